package dispatch_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/outboxd/outboxd/dispatch"
	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/router"
)

// capturePublisher keeps every message it is asked to publish and confirms it.
type capturePublisher struct {
	mu   sync.Mutex
	msgs []router.Message
}

func (c *capturePublisher) Publish(_ context.Context, msgs []router.Message) []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs = append(c.msgs, msgs...)
	return make([]error, len(msgs))
}

func TestAnExpiredMessageIsDeadLetteredOnlyWhereItsRouteAsksAndAlwaysLogged(t *testing.T) {
	t.Parallel()
	with, without := &capturePublisher{}, &capturePublisher{}
	fw := dispatch.NewDeadLetterForwarder(dispatch.DeadLetterConfig{Routes: []dispatch.DeadLetterRoute{
		{Stream: "orders", Topic: "orders.dead", Publisher: with, Expired: true},
		{Stream: "payments", Topic: "payments.dead", Publisher: without},
	}}, nil, nil)
	defer fw.Close()
	var logged bytes.Buffer
	fl := dispatch.NewFailureLog(dispatch.FailureLogConfig{}, slog.New(slog.NewTextHandler(&logged, nil)))

	reason := "expires_at 2026-01-01 00:00:00+00 passed before delivery"
	for _, e := range []events.MessageExpired{
		{Stream: "orders", ID: 7, Topic: "created", Key: []byte("k"), Payload: []byte("p"), Headers: map[string]string{"a": "b"}, Err: reason},
		{Stream: "payments", ID: 8, Topic: "paid", Payload: []byte("q"), Err: reason},
	} {
		if want := e.Stream == "orders"; fw.Wants(e) != want {
			t.Errorf("Wants(%s expired) = %v, want %v", e.Stream, !want, want)
		}
		fw.Handle(e)
		fl.Handle(e)
	}
	if len(without.msgs) != 0 {
		t.Errorf("a route without expired forwarded %d messages", len(without.msgs))
	}
	if len(with.msgs) != 1 {
		t.Fatalf("forwarded %d messages, want 1", len(with.msgs))
	}
	m := with.msgs[0]
	if m.Topic != "orders.dead" || string(m.Payload) != "p" || m.Headers[dispatch.HeaderDeadLetterReason] != "expired" ||
		m.Headers[dispatch.HeaderDeadLetterError] != reason || m.Headers["a"] != "b" {
		t.Errorf("dead letter %+v", m)
	}
	if n := strings.Count(logged.String(), "message expired before delivery"); n != 2 {
		t.Errorf("logged %d expiry lines, want 2:\n%s", n, logged.String())
	}
}
