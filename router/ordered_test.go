package router_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/router"
)

// checkingDriver refuses topic "bad" before sending (Check), fails the ids in refuse when
// sent, and records each call's ids and whether it came from PublishOrdered.
type checkingDriver struct {
	refuse map[int64]bool
	calls  [][]int64
}

func (d *checkingDriver) Check(m *router.Message) error {
	if m.Topic == "bad" {
		return router.Permanent(errors.New("bad topic"))
	}
	return nil
}

func (d *checkingDriver) Publish(ctx context.Context, msgs []router.Message) []error {
	if !router.KeyOrdered(ctx) {
		panic("PublishOrdered did not mark its context")
	}
	errs := make([]error, len(msgs))
	var ids []int64
	for i, m := range msgs {
		ids = append(ids, m.ID)
		if d.refuse[m.ID] {
			errs[i] = router.Retryable(errors.New("refused"))
		}
	}
	d.calls = append(d.calls, ids)
	return errs
}

func (*checkingDriver) Close() error { return nil }

func TestPublishOrderedNeverSendsAMessageAfterItsKeyStopped(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", router.OrderedChunkBytes/2+1) // two of these need two calls
	msgs := []router.Message{
		{ID: 1, Key: []byte("a"), Topic: "t"},
		{ID: 2, Key: []byte("a"), Topic: "bad"}, // refused by Check: a stops here
		{ID: 3, Key: []byte("a"), Topic: "t"},
		{ID: 4, Key: []byte("b"), Topic: "t", Payload: []byte(big)}, // refused when sent
		{ID: 5, Key: []byte("c"), Topic: "t", Payload: []byte(big)}, // second call
		{ID: 6, Key: []byte("b"), Topic: "t"},                       // b stopped in the first call
		{ID: 7, Topic: "bad"},                                       // no key: fails alone
		{ID: 8, Topic: "t"},
	}
	d := &checkingDriver{refuse: map[int64]bool{4: true}}
	rt, err := router.New([]router.Route{{Stream: "s", DriverName: "d", Driver: d}})
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := rt.Publisher("s")
	errs := pub.PublishOrdered(context.Background(), msgs)
	want := []router.Kind{-1, router.KindPermanent, router.KindHeldBack, router.KindRetryable, -1, router.KindHeldBack, router.KindPermanent, -1}
	for i, err := range errs {
		if want[i] == -1 {
			if err != nil {
				t.Errorf("message %d: %v, want sent", msgs[i].ID, err)
			}
			continue
		}
		if err == nil || router.KindOf(err) != want[i] {
			t.Errorf("message %d: %v, want %s", msgs[i].ID, err, want[i])
		}
	}
	if len(d.calls) != 2 || len(d.calls[0]) != 2 || d.calls[0][0] != 1 || d.calls[0][1] != 4 {
		t.Fatalf("driver calls %v, want [1 4] then the rest (the chunk bound splits the two large messages)", d.calls)
	}
	for _, id := range d.calls[1] {
		if id == 6 || id == 3 {
			t.Fatalf("message %d was sent although its key had stopped: calls %v", id, d.calls)
		}
	}
}
