package redis

import (
	"context"
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

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/driveropt"
)

// Real errors, met the way the driver meets them: through the driver's own client.

// xadd is the error of one XADD by the client of a driver with options o.
func xadd(t *testing.T, o Options, key string) error {
	t.Helper()
	d := newDriver(t, o)
	err := d.rdb.XAdd(testCtx(t), xaddArgs(key)).Err()
	if err == nil {
		t.Fatal("the XADD succeeded")
	}
	return err
}

// wrongTypeError is a real server's refusal: WRONGTYPE for a key holding a string.
func wrongTypeError(t *testing.T) error {
	addr, c := server(t)
	key := uniqueKey(t, c, "classify")
	if err := c.Set(context.Background(), key, "text", 0).Err(); err != nil {
		t.Fatal(err)
	}
	return xadd(t, testOptions(addr), key)
}

// wrongPasswordError is a real server's refusal of credentials: a user it lacks.
func wrongPasswordError(t *testing.T) error {
	addr, _ := server(t)
	o := testOptions(addr)
	o.Username, o.Password = "outboxd-test-nobody", "not-a-password"
	return xadd(t, o, "k")
}

// missingDatabaseError is a real server's refusal to SELECT a database it lacks.
func missingDatabaseError(t *testing.T) error {
	addr, _ := server(t)
	o := testOptions(addr)
	o.DB = 1 << 30
	return xadd(t, o, "k")
}

// replyError is the error a scripted server's reply to XADD becomes in the client.
func replyError(t *testing.T, reply string) error {
	t.Helper()
	s := scriptedServer(t, func(args []string) string {
		if strings.EqualFold(args[0], "hello") {
			return noHello
		}
		return errorReply(reply)
	})
	return xadd(t, Options{Addr: s.addr}, "k")
}

func hungUpError(t *testing.T) error {
	s := scriptedServer(t, func(args []string) string {
		if strings.EqualFold(args[0], "hello") {
			return noHello
		}
		return hangUp
	})
	return xadd(t, Options{Addr: s.addr}, "k")
}

func readTimeoutError(t *testing.T) error {
	s := scriptedServer(t, func(args []string) string {
		if strings.EqualFold(args[0], "hello") {
			return noHello
		}
		return silent
	})
	return xadd(t, Options{Addr: s.addr, PublishTimeout: 50 * time.Millisecond}, "k")
}

func refusedError(t *testing.T) error { return xadd(t, Options{Addr: refusingAddr(t)}, "k") }

func dialTimeoutError(t *testing.T) error {
	t.Helper()
	// TEST-NET-1 is never routed; a nanosecond is over before any packet leaves.
	conn, err := net.DialTimeout("tcp", "192.0.2.1:6379", time.Nanosecond)
	if err == nil {
		conn.Close()
		t.Fatal("dialling TEST-NET-1 succeeded")
	}
	return err
}

func untrustedCertificateError(t *testing.T) error {
	srv := httptest.NewUnstartedServer(nil)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is the point
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return xadd(t, Options{Addr: srv.Listener.Addr().String(), TLS: driveropt.TLS{Enabled: true}}, "k")
}

func closedClientError(t *testing.T) error {
	d := newDriver(t, Options{Addr: refusingAddr(t)})
	_ = d.rdb.Close()
	return d.rdb.Ping(context.Background()).Err()
}

func cancelledError() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx.Err()
}

func static(err error) func(*testing.T) error { return func(*testing.T) error { return err } }

func reply(text string) func(*testing.T) error {
	return func(t *testing.T) error { return replyError(t, text) }
}

func TestClassify(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		err  func(t *testing.T) error
		want router.Kind
	}{
		// The message cannot go where it is meant to.
		{"a key that holds another type than a stream is permanent", wrongTypeError, router.KindPermanent},
		{"a key the user's ACL forbids is permanent",
			reply("NOPERM this user has no permissions to access one of the keys used as arguments"), router.KindPermanent},
		{"a key the user's ACL forbids is permanent, in Redis 7.2's words", reply("NOPERM No permissions to access a key"), router.KindPermanent},
		// The driver's configuration is wrong: nothing was written, nothing heals by retrying.
		{"a password the server rejects costs no attempt: the driver, not the message, is wrong", wrongPasswordError, router.KindUnreachable},
		{"a server that wants a password the driver does not give costs no attempt", reply("NOAUTH Authentication required."), router.KindUnreachable},
		{"a database index the server lacks costs no attempt", missingDatabaseError, router.KindUnreachable},
		{"a command the user's ACL forbids costs no attempt: every message would fail alike",
			reply("NOPERM this user has no permissions to run the 'xadd' command"), router.KindUnreachable},
		{"a command the user's ACL forbids costs no attempt, in Redis 7.2's words",
			reply("NOPERM User outboxd has no permissions to run the 'multi' command"), router.KindUnreachable},
		{"a server at its client limit is unreachable", reply("ERR max number of clients reached"), router.KindUnreachable},
		// The server refused this time.
		{"a server out of memory is retryable", reply("OOM command not allowed when used memory > 'maxmemory'."), router.KindRetryable},
		{"a server loading its data set is retryable", reply("LOADING Redis is loading the dataset in memory"), router.KindRetryable},
		{"a server busy with a script is retryable",
			reply("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSCRIPT."), router.KindRetryable},
		{"a replica since a failover is retryable", reply("READONLY You can't write against a read only replica."), router.KindRetryable},
		{"a server that cannot persist is retryable",
			reply("MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk."), router.KindRetryable},
		{"a replica whose primary is down is retryable",
			reply("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), router.KindRetryable},
		{"a primary without enough replicas is retryable", reply("NOREPLICAS Not enough good replicas to write."), router.KindRetryable},
		{"a transaction discarded for another message's refusal is retryable",
			reply("EXECABORT Transaction discarded because of previous errors."), router.KindRetryable},
		{"an error reply we do not know is retryable", reply("ERR something new"), router.KindRetryable},
		{"a reply that did not come within the publish timeout is retryable", readTimeoutError, router.KindRetryable},
		{"an error we cannot place is retryable", static(errors.New("something odd")), router.KindRetryable},
		// The server was not reached.
		{"a refused connection is unreachable", refusedError, router.KindUnreachable},
		{"a connection that times out while dialling is unreachable", dialTimeoutError, router.KindUnreachable},
		{"a server that closes the connection before replying is unreachable", hungUpError, router.KindUnreachable},
		{"a server whose certificate we do not trust is unreachable", untrustedCertificateError, router.KindUnreachable},
		{"a closed client is unreachable", closedClientError, router.KindUnreachable},
		{"a closed driver is unreachable", static(fmt.Errorf("redis driver %q: %w", "bus", router.ErrClosed)), router.KindUnreachable},
		// Ours.
		{"our cancelled context is canceled", static(cancelledError()), router.KindCanceled},
		{"an error already classified keeps its kind", static(router.Unreachable(errors.New("x"))), router.KindUnreachable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.err(t)
			got := classify(err)
			t.Logf("%T: %v", err, err)
			if k := router.KindOf(got); k != c.want {
				t.Fatalf("classify(%v) is %s, want %s", err, k, c.want)
			}
			if !strings.Contains(got.Error(), err.Error()) {
				t.Fatalf("classify(%v) = %v lost the error's text", err, got)
			}
			if reflect.TypeOf(err).Comparable() && !errors.Is(got, err) {
				t.Fatalf("classify(%v) = %v lost the error's chain", err, got)
			}
		})
	}
	if classify(nil) != nil {
		t.Fatal("classify(nil) is not nil")
	}
}
