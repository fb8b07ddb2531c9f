package redis

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/driveropt"
)

// restrictedUser creates an ACL user who may run only commands (and those of
// connecting) on keys under allowed, removed when t ends. The server checks a command's keys against the user's ACL when
// it queues the command, so such a refusal inside MULTI discards the transaction, as
// OOM or LOADING would.
func restrictedUser(t *testing.T, allowed string, commands ...string) (user, password string) {
	t.Helper()
	_, c := server(t)
	// The user's name and password are random, and the user is deleted when t ends.
	user = "outboxd-test-" + strconv.FormatUint(rand.Uint64(), 36)
	password = "pw-" + user
	ctx := context.Background()
	args := []any{"ACL", "SETUSER", user, "on", ">" + password, "resetkeys", "~" + allowed + "*", "+@connection"}
	for _, cmd := range commands {
		args = append(args, "+"+cmd)
	}
	if err := c.Do(ctx, args...).Err(); err != nil {
		t.Skipf("redis: cannot create an ACL user for the test (Redis 6 or later needed): %v", err)
	}
	t.Cleanup(func() { _ = c.Do(context.Background(), "ACL", "DELUSER", user).Err() })
	return user, password
}

func TestAnOrderedPublishAddsNothingWhenTheServerRefusesOneOfItsMessagesAsItIsQueued(t *testing.T) {
	t.Parallel()
	addr, c := server(t)
	allowed := uniqueKey(t, c, "allowed")
	user, password := restrictedUser(t, allowed, "xadd", "multi", "exec")
	o := testOptions(addr)
	o.Username, o.Password = user, driveropt.Secret(password)
	d := newDriver(t, o)
	rt, err := router.New([]router.Route{{Stream: "orders", DriverName: "cache", Driver: d}})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := rt.Publisher("orders")
	if err != nil {
		t.Fatal(err)
	}
	batch := func(key string) []router.Message {
		msgs := messages(key, 4)
		msgs[1].Topic = "outboxd-test:forbidden:" + key // NOPERM, for a key of its own
		return msgs
	}

	// Unordered, a plain pipeline: the refused message fails alone.
	plain, tx := allowed+":plain", allowed+":tx"
	t.Cleanup(func() { c.Del(context.Background(), plain, tx) })
	errs := pub.Publish(testCtx(t), batch(plain))
	if k := kinds(errs); !slices.Equal(k, []string{"ok", "permanent", "ok", "ok"}) {
		t.Fatalf("unordered: kinds %v: %v", k, errs)
	}
	readStream(t, c, plain, 3)

	// Ordered, one transaction: discarded whole, so nothing passes the refusal.
	errs = pub.PublishOrdered(testCtx(t), batch(tx))
	if k := kinds(errs); !slices.Equal(k, []string{"retryable", "permanent", "retryable", "retryable"}) {
		t.Fatalf("ordered: kinds %v: %v", k, errs)
	}
	if n, err := c.Exists(context.Background(), tx).Result(); err != nil || n != 0 {
		t.Fatalf("the ordered publish added entries (exists %d, %v)", n, err)
	}
}

func TestAnOrderedPublishByAUserWhoMayNotRunMultiIsUnreachable(t *testing.T) {
	t.Parallel()
	addr, c := server(t)
	allowed := uniqueKey(t, c, "allowed")
	user, password := restrictedUser(t, allowed, "xadd")
	o := testOptions(addr)
	o.Username, o.Password = user, driveropt.Secret(password)
	rt, err := router.New([]router.Route{{Stream: "orders", DriverName: "cache", Driver: newDriver(t, o)}})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := rt.Publisher("orders")
	if err != nil {
		t.Fatal(err)
	}
	for i, err := range pub.PublishOrdered(testCtx(t), messages(allowed, 3)) {
		if router.KindOf(err) != router.KindUnreachable || !strings.Contains(err.Error(), "'multi' command") {
			t.Fatalf("message %d: %v (%s), want unreachable naming MULTI", i, err, router.KindOf(err))
		}
	}
}
