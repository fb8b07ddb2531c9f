package kafka

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outboxd/outboxd/router"
)

// Real errors, produced the way the driver meets them.

func dialError(t *testing.T) error {
	t.Helper()
	conn, err := net.Dial("tcp", refusingAddr(t))
	if err == nil {
		conn.Close()
		t.Fatal("dialling a port nobody listens on succeeded")
	}
	return err
}

func dialTimeoutError(t *testing.T) error {
	t.Helper()
	// TEST-NET-1 is never routed; a nanosecond is over before any packet leaves.
	conn, err := net.DialTimeout("tcp", "192.0.2.1:9092", time.Nanosecond)
	if err == nil {
		conn.Close()
		t.Fatal("dialling TEST-NET-1 succeeded")
	}
	return err
}

// closedByBrokerError is what kafka-go reports when the broker accepts a connection
// and closes it before answering.
func closedByBrokerError(t *testing.T) error {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(ln.Addr().String()), Transport: tr}
	_, err = client.Metadata(context.Background(), &kafka.MetadataRequest{Topics: []string{"x"}})
	if err == nil {
		t.Fatal("a broker that hangs up answered")
	}
	return err
}

func untrustedCertificateError(t *testing.T) error {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is the point
	srv.StartTLS()
	defer srv.Close()
	conn, err := tls.Dial("tcp", srv.Listener.Addr().String(), &tls.Config{MinVersion: tls.VersionTLS12})
	if err == nil {
		conn.Close()
		t.Fatal("a self-signed certificate was trusted")
	}
	return err
}

// tooLargeForWriterError is kafka-go's own refusal of a message above BatchBytes,
// answered before anything is sent.
func tooLargeForWriterError(t *testing.T) error {
	t.Helper()
	w := &kafka.Writer{Addr: kafka.TCP(refusingAddr(t)), Topic: "t", BatchBytes: 16}
	defer w.Close()
	err := w.WriteMessages(context.Background(), kafka.Message{Value: make([]byte, 64)})
	if err == nil {
		t.Fatal("the writer took a message above its BatchBytes")
	}
	return err
}

func cancelledDialError(t *testing.T) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", refusingAddr(t))
	if err == nil {
		conn.Close()
		t.Fatal("a dial under a cancelled context succeeded")
	}
	return err
}

func cancelledError() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx.Err()
}

func TestClassify(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		err  error
		want router.Kind
	}{
		{"a topic that does not exist is permanent when auto-creation is off",
			publishError("orders", topicError(kafka.UnknownTopicOrPartition, false)), router.KindPermanent},
		{"a message the broker finds too large is permanent", kafka.MessageSizeTooLarge, router.KindPermanent},
		{"a message above the writer's byte limit is permanent", tooLargeForWriterError(t), router.KindPermanent},
		{"a request whose records exceed the broker's limit is permanent", kafka.RecordListTooLarge, router.KindPermanent},
		{"an invalid topic name is permanent", publishError("a b", topicError(kafka.InvalidTopic, false)), router.KindPermanent},
		{"a topic we may not write to is permanent", kafka.TopicAuthorizationFailed, router.KindPermanent},
		{"credentials the broker rejects cost no attempt: the driver, not the message, is wrong", kafka.SASLAuthenticationFailed, router.KindUnreachable},
		{"a compression codec the broker lacks is permanent", kafka.UnsupportedCompressionType, router.KindPermanent},
		{"too few in-sync replicas is retryable", kafka.NotEnoughReplicas, router.KindRetryable},
		{"losing replicas after the append is retryable", kafka.NotEnoughReplicasAfterAppend, router.KindRetryable},
		{"a partition without a leader is retryable", kafka.LeaderNotAvailable, router.KindRetryable},
		{"a broker that is no longer the leader is retryable", kafka.NotLeaderForPartition, router.KindRetryable},
		{"a broker that timed out the request is retryable", kafka.RequestTimedOut, router.KindRetryable},
		{"a produce request that got no answer within its deadline is retryable", context.DeadlineExceeded, router.KindRetryable},
		{"an error code we do not know is retryable", kafka.Error(9999), router.KindRetryable},
		{"an error we cannot place is retryable", errors.New("something odd"), router.KindRetryable},
		{"a leader kafka-go has no connection for is unreachable", kafka.BrokerNotAvailable, router.KindUnreachable},
		{"a refused connection is unreachable", dialError(t), router.KindUnreachable},
		{"a connection that times out while dialling is unreachable", dialTimeoutError(t), router.KindUnreachable},
		{"a broker that closes the connection is unreachable", closedByBrokerError(t), router.KindUnreachable},
		{"a broker whose certificate we do not trust is unreachable", untrustedCertificateError(t), router.KindUnreachable},
		{"our cancelled context is canceled", cancelledError(), router.KindCanceled},
		{"a dial our context cancelled is canceled", cancelledDialError(t), router.KindCanceled},
		{"a closed driver is unreachable", fmt.Errorf("kafka driver %q: %w", "bus", router.ErrClosed), router.KindUnreachable},
		{"an error already classified keeps its kind", router.Unreachable(kafka.MessageSizeTooLarge), router.KindUnreachable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := classify(c.err)
			t.Logf("%T: %v", c.err, c.err)
			if k := router.KindOf(got); k != c.want {
				t.Fatalf("classify(%v) is %s, want %s", c.err, k, c.want)
			}
			if !strings.Contains(got.Error(), c.err.Error()) {
				t.Fatalf("classify(%v) = %v lost the error's text", c.err, got)
			}
			if reflect.TypeOf(c.err).Comparable() && !errors.Is(got, c.err) {
				t.Fatalf("classify(%v) = %v lost the error's chain", c.err, got)
			}
		})
	}
	if classify(nil) != nil {
		t.Fatal("classify(nil) is not nil")
	}
}
