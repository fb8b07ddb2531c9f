package router_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/outboxd/outboxd/router"
)

func TestKindOfReadsTheClassificationThroughWrapping(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		err  error
		want router.Kind
	}{
		{"a permanent error wrapped again stays permanent", fmt.Errorf("publish: %w", router.Permanent(errors.New("too large"))), router.KindPermanent},
		{"an unreachable error is unreachable", router.Unreachable(errors.New("connection refused")), router.KindUnreachable},
		{"a bare cancelled context is canceled", fmt.Errorf("wait: %w", context.Canceled), router.KindCanceled},
		{"a bare deadline is canceled", context.DeadlineExceeded, router.KindCanceled},
		{"an unclassified error is retryable", errors.New("something odd"), router.KindRetryable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := router.KindOf(c.err); got != c.want {
				t.Fatalf("KindOf(%v) = %s, want %s", c.err, got, c.want)
			}
		})
	}
}

func TestRetryAfterOfReadsTheHintThroughWrapping(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		err  error
		want time.Duration
	}{
		{"a hinted retryable error wrapped again keeps its hint",
			fmt.Errorf("publish: %w", router.RetryableAfter(errors.New("429"), 3*time.Second)), 3 * time.Second},
		{"a retryable error without a hint has none", router.Retryable(errors.New("503")), 0},
		{"a negative hint is no hint", router.RetryableAfter(errors.New("503"), -time.Second), 0},
		{"an unclassified error has none", errors.New("odd"), 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := router.RetryAfterOf(c.err); got != c.want {
				t.Fatalf("RetryAfterOf(%v) = %v, want %v", c.err, got, c.want)
			}
			if c.want > 0 && router.KindOf(c.err) != router.KindRetryable {
				t.Fatalf("a hinted error is %s, want retryable", router.KindOf(c.err))
			}
		})
	}
}

type countingDriver struct{ results int }

func (d countingDriver) Publish(ctx context.Context, msgs []router.Message) []error {
	return make([]error, d.results)
}
func (countingDriver) Close() error { return nil }

func TestAPublisherNeverTurnsABrokenDriverAnswerIntoSuccess(t *testing.T) {
	t.Parallel()
	r, err := router.New([]router.Route{{Stream: "orders", DriverName: "broken", Driver: countingDriver{results: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.Publisher("orders")
	if err != nil {
		t.Fatal(err)
	}
	errs := p.Publish(context.Background(), make([]router.Message, 3))
	if len(errs) != 3 {
		t.Fatalf("%d results for 3 messages", len(errs))
	}
	for i, err := range errs {
		if err == nil || router.KindOf(err) != router.KindRetryable {
			t.Fatalf("message %d: %v; want a retryable error", i, err)
		}
	}
	if _, err := r.Publisher("payments"); err == nil {
		t.Fatal("a stream without a route got a publisher")
	}
}

func TestNewRefusesARouteWithoutADriverOrTwice(t *testing.T) {
	t.Parallel()
	if _, err := router.New([]router.Route{{Stream: "a"}}); err == nil {
		t.Fatal("route without a driver accepted")
	}
	d := countingDriver{}
	if _, err := router.New([]router.Route{{Stream: "a", Driver: d}, {Stream: "a", Driver: d}}); err == nil {
		t.Fatal("stream routed twice accepted")
	}
}

func TestDedupIDPrefersTheProducersMessageID(t *testing.T) {
	t.Parallel()
	m := router.Message{ID: 42}
	if m.DedupID() != "42" {
		t.Fatalf("DedupID = %q", m.DedupID())
	}
	m.MessageID = "order-42-paid"
	if m.DedupID() != "order-42-paid" {
		t.Fatalf("DedupID = %q", m.DedupID())
	}
}
