package nats

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/outboxd/outboxd/router"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		err  error
		want router.Kind
	}{
		{"an invalid subject is permanent", nats.ErrBadSubject, router.KindPermanent},
		{"a payload over the server's max_payload is permanent", nats.ErrMaxPayload, router.KindPermanent},
		{"headers on a server without header support are permanent", nats.ErrHeadersNotSupported, router.KindPermanent},
		{"a closed connection is unreachable", nats.ErrConnectionClosed, router.KindUnreachable},
		{"a reconnecting connection is unreachable", nats.ErrConnectionReconnecting, router.KindUnreachable},
		{"a publish refused by the disabled reconnect buffer is unreachable", nats.ErrReconnectBufExceeded, router.KindUnreachable},
		{"a disconnected server is unreachable", nats.ErrDisconnected, router.KindUnreachable},
		{"a draining connection is unreachable", nats.ErrConnectionDraining, router.KindUnreachable},
		{"no server to connect to is unreachable", nats.ErrNoServers, router.KindUnreachable},
		{"a stale connection is unreachable", nats.ErrStaleConnection, router.KindUnreachable},
		{"a client timeout is unreachable", nats.ErrTimeout, router.KindUnreachable},
		{"a network error under the client is unreachable", netError(t), router.KindUnreachable},
		{"a connection closed under the client is unreachable", net.ErrClosed, router.KindUnreachable},
		{"the caller's cancellation is canceled", context.Canceled, router.KindCanceled},
		{"the caller's deadline is canceled", context.DeadlineExceeded, router.KindCanceled},
		{"a wrapped sentinel keeps its kind", fmt.Errorf("publish to a.b: %w", nats.ErrMaxPayload), router.KindPermanent},
		{"an error nobody classified is retryable", errors.New("something else"), router.KindRetryable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := classify(c.err)
			if k := router.KindOf(got); k != c.want {
				t.Fatalf("classify(%v) is %s, want %s", c.err, k, c.want)
			}
			if !errors.Is(got, c.err) {
				t.Fatalf("classify(%v) = %v lost the cause", c.err, got)
			}
		})
	}
}

// netError is the error of a real dial to a port where nothing listens.
func netError(t *testing.T) error {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	conn, err := net.Dial("tcp", addr)
	if err == nil {
		_ = conn.Close()
		t.Fatalf("something listens on %s", addr)
	}
	return err
}

func TestClassifyFlush(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		err  error
	}{
		{"a flush with no PONG in time is unreachable", nats.ErrTimeout},
		{"a flush cut by a lost connection is unreachable", nats.ErrConnectionClosed},
		{"a flush failing for any other reason is unreachable", errors.New("write: broken pipe")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if k := router.KindOf(classifyFlush(c.err)); k != router.KindUnreachable {
				t.Fatalf("classifyFlush(%v) is %s, want unreachable", c.err, k)
			}
		})
	}
}

func TestClassifyKeepsNil(t *testing.T) {
	t.Parallel()
	if err := classify(nil); err != nil {
		t.Fatalf("classify(nil) = %v", err)
	}
}
