package discard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"testing"

	"github.com/outboxd/outboxd/router"
)

func newDriver(t *testing.T, logger *slog.Logger) *Driver {
	t.Helper()
	d, err := New("sink", DefaultOptions(), logger)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// batch builds n messages whose payloads are size bytes each.
func batch(n, size int) []router.Message {
	msgs := make([]router.Message, n)
	for i := range msgs {
		msgs[i] = router.Message{ID: int64(i + 1), Stream: "s", Topic: "t", Key: []byte(strconv.Itoa(i % 3)), Payload: make([]byte, size)}
	}
	return msgs
}

func TestEveryMessageIsConfirmedAndCountedOnceUnderConcurrency(t *testing.T) {
	t.Parallel()
	d := newDriver(t, nil)
	const publishers, batches, perBatch, size = 8, 50, 100, 17
	var wg sync.WaitGroup
	for range publishers {
		wg.Go(func() {
			for range batches {
				msgs := batch(perBatch, size)
				errs := d.Publish(context.Background(), msgs)
				if len(errs) != len(msgs) {
					t.Errorf("got %d results for %d messages", len(errs), len(msgs))
					return
				}
				for i, err := range errs {
					if err != nil {
						t.Errorf("message %d: %v", i, err)
					}
				}
			}
		})
	}
	wg.Wait()
	messages, payload := d.Counts()
	if want := int64(publishers * batches * perBatch); messages != want || payload != want*size {
		t.Fatalf("counted %d messages and %d bytes, want %d and %d", messages, payload, want, want*size)
	}
}

func TestAnEmptyBatchHasNoResultsAndCountsNothing(t *testing.T) {
	t.Parallel()
	d := newDriver(t, nil)
	if errs := d.Publish(context.Background(), nil); len(errs) != 0 {
		t.Fatalf("empty batch: %d results", len(errs))
	}
	if messages, payload := d.Counts(); messages != 0 || payload != 0 {
		t.Fatalf("counted %d messages, %d bytes", messages, payload)
	}
}

func TestACancelledContextFailsEveryMessageAsCanceledAndCountsNone(t *testing.T) {
	t.Parallel()
	d := newDriver(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	errs := d.Publish(ctx, batch(5, 1))
	if len(errs) != 5 {
		t.Fatalf("got %d results for 5 messages", len(errs))
	}
	for i, err := range errs {
		if router.KindOf(err) != router.KindCanceled || !errors.Is(err, context.Canceled) {
			t.Fatalf("message %d: %v (kind %s), want canceled", i, err, router.KindOf(err))
		}
	}
	if messages, _ := d.Counts(); messages != 0 {
		t.Fatalf("counted %d messages of a cancelled publish", messages)
	}
}

func TestAfterCloseEveryMessageFailsUnreachableAndCloseLogsTheTotalsOnce(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	d := newDriver(t, slog.New(slog.NewJSONHandler(&logs, nil)))
	d.Publish(context.Background(), batch(3, 10))
	if err := d.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for i, err := range d.Publish(context.Background(), batch(4, 10)) {
		if !errors.Is(err, router.ErrClosed) || router.KindOf(err) != router.KindUnreachable {
			t.Fatalf("message %d after Close: %v (kind %s), want ErrClosed, unreachable", i, err, router.KindOf(err))
		}
	}
	if messages, payload := d.Counts(); messages != 3 || payload != 30 {
		t.Fatalf("counted %d messages and %d bytes, want 3 and 30", messages, payload)
	}
	var rec struct {
		Msg      string `json:"msg"`
		Driver   string `json:"driver"`
		Messages int64  `json:"messages"`
		Bytes    int64  `json:"payload_bytes"`
	}
	lines := bytes.Split(bytes.TrimSpace(logs.Bytes()), []byte("\n"))
	if len(lines) != 1 {
		t.Fatalf("want one log line from two Closes, got %d:\n%s", len(lines), logs.String())
	}
	if err := json.Unmarshal(lines[0], &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Msg != ClosedMessage || rec.Driver != "sink" || rec.Messages != 3 || rec.Bytes != 30 {
		t.Fatalf("close logged %+v", rec)
	}
}
