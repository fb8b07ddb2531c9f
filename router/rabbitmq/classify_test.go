package rabbitmq

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
	"strconv"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxd/outboxd/router"
)

// Real errors, produced the way the driver meets them.

func refusedDialError(t *testing.T) error {
	t.Helper()
	u, err := amqp.ParseURI(refusingURL(t))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", net.JoinHostPort(u.Host, strconv.Itoa(u.Port)))
	if err == nil {
		conn.Close()
		t.Fatal("dialling a port nobody listens on succeeded")
	}
	return err
}

func untrustedCertificateError(t *testing.T) error {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	defer srv.Close()
	conn, err := tls.Dial("tcp", srv.Listener.Addr().String(), &tls.Config{MinVersion: tls.VersionTLS12})
	if err == nil {
		conn.Close()
		t.Fatal("a self-signed certificate was trusted")
	}
	return err
}

// fromBroker is an error the broker sent (channel.close or connection.close), as the
// library builds it.
func fromBroker(code int, reason string) *amqp.Error {
	return &amqp.Error{Code: code, Reason: reason, Server: true}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	returned := &returnedError{exchange: "orders", ret: &amqp.Return{ReplyCode: amqp.NoRoute, ReplyText: "NO_ROUTE", RoutingKey: "a.b"}}
	cases := []struct {
		name string
		err  error
		want router.Kind
	}{
		{"a message no queue takes, returned by the broker, is permanent", returned, router.KindPermanent},
		{"an exchange that does not exist is permanent",
			fromBroker(amqp.NotFound, "NOT_FOUND - no exchange 'orders' in vhost '/'"), router.KindPermanent},
		{"an exchange we may not write to is permanent",
			fromBroker(amqp.AccessRefused, "ACCESS_REFUSED - write access to exchange 'orders' refused"), router.KindPermanent},
		{"a message the broker finds too large is permanent",
			fromBroker(amqp.PreconditionFailed, "PRECONDITION_FAILED - message size 200 is larger than configured max size 100"), router.KindPermanent},
		{"a frame the broker could not take is permanent", fromBroker(amqp.FrameError, "FRAME_ERROR - type 2, all octets = <<>>: {frame_too_large,1,2}"), router.KindPermanent},
		{"a field the client cannot encode is permanent", amqp.ErrFieldType, router.KindPermanent},
		{"a connection an operator closed is unreachable", fromBroker(amqp.ConnectionForced, "CONNECTION_FORCED - broker forced connection closure"), router.KindUnreachable},
		{"an error inside the broker is retryable", fromBroker(amqp.InternalError, "INTERNAL_ERROR"), router.KindRetryable},
		{"a broker short of resources is retryable", fromBroker(amqp.ResourceError, "RESOURCE_ERROR"), router.KindRetryable},
		{"a code we do not know is retryable", fromBroker(599, "SOMETHING_NEW"), router.KindRetryable},
		{"a channel or connection the library finds closed is unreachable", amqp.ErrClosed, router.KindUnreachable},
		{"a frame the library could not read is unreachable", &amqp.Error{Code: amqp.FrameError, Reason: "EOF"}, router.KindUnreachable},
		{"a nack is retryable", fmt.Errorf("publish: %w", errNack), router.KindRetryable},
		{"no confirm within the publish timeout is retryable", fmt.Errorf("publish: %w", errConfirmTimeout), router.KindRetryable},
		{"a refused connection is unreachable", refusedDialError(t), router.KindUnreachable},
		{"a connection attempt that failed is unreachable", &connectError{addr: "amqp://h", err: refusedDialError(t)}, router.KindUnreachable},
		{"credentials the broker refuses cost no attempt: the driver, not the message, is wrong",
			&connectError{addr: "amqp://h", err: amqp.ErrCredentials}, router.KindUnreachable},
		{"a vhost the user may not open costs no attempt",
			&connectError{addr: "amqp://h", err: fromBroker(amqp.NotAllowed, "NOT_ALLOWED - vhost x not found")}, router.KindUnreachable},
		{"a connection attempt past the publish timeout is unreachable",
			&connectError{addr: "amqp://h", err: context.DeadlineExceeded}, router.KindUnreachable},
		{"a connection attempt our context cancelled is canceled",
			&connectError{addr: "amqp://h", err: context.Canceled}, router.KindCanceled},
		{"a broker whose certificate we do not trust is unreachable", untrustedCertificateError(t), router.KindUnreachable},
		{"a connection lost under unconfirmed messages is unreachable",
			&connectionLostError{cause: &amqp.Error{Code: amqp.FrameError, Reason: "EOF"}}, router.KindUnreachable},
		{"a connection lost without a reason is unreachable", &connectionLostError{}, router.KindUnreachable},
		{"a connection an operator closed under unconfirmed messages is unreachable",
			&connectionLostError{cause: fromBroker(amqp.ConnectionForced, "CONNECTION_FORCED")}, router.KindUnreachable},
		{"a connection the broker closed for a protocol violation spends an attempt",
			&connectionLostError{cause: fromBroker(amqp.FrameError, "FRAME_ERROR")}, router.KindRetryable},
		{"our cancelled context is canceled", context.Canceled, router.KindCanceled},
		{"the caller's deadline is canceled", context.DeadlineExceeded, router.KindCanceled},
		{"a closed driver is unreachable", fmt.Errorf("rabbitmq driver %q: %w", "bus", router.ErrClosed), router.KindUnreachable},
		{"a connection closed under the client is unreachable", io.EOF, router.KindUnreachable},
		{"an error we cannot place is retryable", errors.New("something odd"), router.KindRetryable},
		{"an error already classified keeps its kind", router.Unreachable(fromBroker(amqp.NotFound, "NOT_FOUND")), router.KindUnreachable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := classify(c.err)
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

func TestAReturnedMessageSaysWhereItWasNotRouted(t *testing.T) {
	t.Parallel()
	ret := &amqp.Return{ReplyCode: amqp.NoRoute, ReplyText: "NO_ROUTE", RoutingKey: "orders.created"}
	cases := []struct {
		exchange, want string
	}{
		{"shop", `rabbitmq: exchange "shop" has no queue bound for routing key "orders.created" (NO_ROUTE)`},
		{"", `rabbitmq: the default exchange has no queue named "orders.created" (NO_ROUTE)`},
	}
	for _, c := range cases {
		if got := (&returnedError{exchange: c.exchange, ret: ret}).Error(); got != c.want {
			t.Errorf("%q, want %q", got, c.want)
		}
	}
}
