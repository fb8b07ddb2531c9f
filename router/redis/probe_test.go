package redis

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/outboxd/outboxd/router"
)

func TestProbeTellsAKeyAnXAddCanUseFromOneHoldingAnotherType(t *testing.T) {
	t.Parallel()
	addr, c := server(t)
	d := newDriver(t, testOptions(addr))
	ctx := context.Background()
	missing, stream, text := uniqueKey(t, c, "missing"), uniqueKey(t, c, "stream"), uniqueKey(t, c, "text")
	if err := c.XAdd(ctx, xaddArgs(stream)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, text, "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for what, key := range map[string]string{"the server": "", "a missing key": missing, "a stream": stream} {
		if err := d.Probe(testCtx(t), key); err != nil {
			t.Errorf("probing %s: %v", what, err)
		}
	}
	var wrong *router.NoDestinationError
	want := "redis: key " + strconv.Quote(text) + " is a string, not a stream"
	if err := d.Probe(testCtx(t), text); !errors.As(err, &wrong) || wrong.Error() != want {
		t.Fatalf("probing a string key: %v, want a NoDestinationError saying %q", err, want)
	}
	if err := newDriver(t, testOptions(refusingAddr(t))).Probe(testCtx(t), ""); err == nil {
		t.Fatal("probing an absent server succeeded")
	}
	_ = d.Close()
	if err := d.Probe(testCtx(t), ""); !errors.Is(err, router.ErrClosed) {
		t.Fatalf("probing after close: %v, want router.ErrClosed", err)
	}
}
