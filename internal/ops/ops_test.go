package ops_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/ops"
	"github.com/outboxd/outboxd/store"
)

// TestEveryRefusedRequestIsInvalidAndNeverReachesTheStore runs each operation with a
// request it must refuse over operations that have no store at all: a refusal that
// touched the database first would panic here instead of answering ops.ErrInvalid.
func TestEveryRefusedRequestIsInvalidAndNeverReachesTheStore(t *testing.T) {
	t.Parallel()
	o := ops.New(nil, func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) })
	ctx := context.Background()
	zero, key := 0, "k"
	cases := []struct {
		name string
		run  func() error
	}{
		{"a listing with an unknown status", func() error { _, err := o.ListMessages(ctx, ops.MessageQuery{Status: "stuck"}); return err }},
		{"a listing with a cursor not handed out", func() error { _, err := o.ListMessages(ctx, ops.MessageQuery{Cursor: "!!"}); return err }},
		{"a listing with a limit of 0", func() error { _, err := o.ListMessages(ctx, ops.MessageQuery{Limit: "0"}); return err }},
		{"a listing whose window ends before it starts", func() error {
			_, err := o.ListMessages(ctx, ops.MessageQuery{Since: "10m", Until: "2026-01-01T00:00:00Z"})
			return err
		}},
		{"a requeue of nothing", func() error { _, err := o.Requeue(ctx, ops.RequeueRequest{}, nil); return err }},
		{"a requeue by filter without a bound", func() error {
			_, err := o.Requeue(ctx, ops.RequeueRequest{Stream: "orders"}, nil)
			return err
		}},
		{"a requeue with a limit of 0", func() error {
			_, err := o.Requeue(ctx, ops.RequeueRequest{Stream: "orders", Limit: &zero}, nil)
			return err
		}},
		{"a requeue of id 0", func() error { _, err := o.Requeue(ctx, ops.RequeueRequest{IDs: []int64{0}}, nil); return err }},
		{"a skip of nothing", func() error { _, err := o.Skip(ctx, ops.SkipRequest{}); return err }},
		{"a skip of a key without its stream", func() error { _, err := o.Skip(ctx, ops.SkipRequest{Key: &key}); return err }},
		{"a skip of an empty list of ids", func() error { _, err := o.Skip(ctx, ops.SkipRequest{IDs: []int64{}}); return err }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if err := c.run(); !errors.Is(err, ops.ErrInvalid) || errors.Is(err, ops.ErrConflict) {
				t.Fatalf("got %v; want an ops.ErrInvalid refusal", err)
			}
		})
	}
}

func TestParseTimeReadsRFC3339AndDurationsBeforeNow(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name, in string
		want     time.Time
		bad      bool
	}{
		{"nothing is no bound", "", time.Time{}, false},
		{"an RFC 3339 time is read as it is", "2024-05-01T12:00:00Z", time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC), false},
		{"a duration counts back from now", "90m", now.Add(-90 * time.Minute), false},
		{"a negative duration is refused", "-1h", time.Time{}, true},
		{"words are refused", "last week", time.Time{}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := ops.ParseTime(c.in, now)
			if (err != nil) != c.bad || !got.Equal(c.want) {
				t.Fatalf("ParseTime(%q) = %v, %v; want %v (refused: %v)", c.in, got, err, c.want, c.bad)
			}
		})
	}
}

// TestAnEmptyPageWhoseScanRanOutDoesNotSayNothingMatches: a page that found nothing in
// its scan budget but hands out a cursor says more may match, not "no messages match".
func TestAnEmptyPageWhoseScanRanOutDoesNotSayNothingMatches(t *testing.T) {
	var b strings.Builder
	if err := (ops.MessagePage{Scanned: ops.ScanBudget, NextCursor: "MTA"}).WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if got := b.String(); strings.Contains(got, "no messages match\n") || !strings.Contains(got, "more may match") {
		t.Errorf("an empty page whose scan ran out reads %q", got)
	}
}

// TestStatsMarkEstimatedCountsAndOnlyThose: a count past the exact limit of a stream
// sampled so is shown with "~" (its deferred count too, being counted among the pending
// rows) and explained under the table; a count within the limit, and every count of a
// stream counted exactly, is shown as it is.
func TestStatsMarkEstimatedCountsAndOnlyThose(t *testing.T) {
	past := int64(store.ExactCountLimit + 1)
	for _, c := range []struct {
		name string
		st   ops.StreamStats
		want string // the stream's row, spaces squeezed
		note bool
	}{
		{"an estimated pending count marks it and the deferred one",
			ops.StreamStats{Stream: "s", Pending: 2 * past, Failed: 7, Deferred: 40, Estimated: true},
			fmt.Sprintf("s - ~%d 0 7 0 ~40 -", 2*past), true},
		{"an estimated failed count marks only itself",
			ops.StreamStats{Stream: "s", Pending: 3, Failed: past, Expired: 5, Estimated: true},
			fmt.Sprintf("s - 3 0 ~%d 5 0 -", past), true},
		{"a stream counted exactly is shown as it is, however large",
			ops.StreamStats{Stream: "s", Pending: 3 * past, Failed: past, Expired: past, Deferred: 1},
			fmt.Sprintf("s - %d 0 %d %d 1 -", 3*past, past, past), false},
	} {
		var b strings.Builder
		if err := (ops.Stats{Table: "outbox.messages", Streams: []ops.StreamStats{c.st}}).WriteText(&b); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(b.String(), "\n")
		if row := strings.Join(strings.Fields(lines[1]), " "); row != c.want {
			t.Errorf("%s: row %q; want %q", c.name, row, c.want)
		}
		if got := strings.Contains(b.String(), "~ estimated from a sample"); got != c.note {
			t.Errorf("%s: explained estimates %v; want %v:\n%s", c.name, got, c.note, b.String())
		}
	}
}
