package chaos_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/chaos"
)

// echo serves lines back, upper-cased, on a loopback port until t ends.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(strings.ToUpper(line))); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func newProxy(t *testing.T, target string) *chaos.Proxy {
	t.Helper()
	p, err := chaos.Listen(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close proxy: %v", err)
		}
	})
	return p
}

type client struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{t: t, conn: c, r: bufio.NewReader(c)}
}

// exchange dials addr and makes one round trip; any failure is returned.
func exchange(addr, line string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSuffix(got, "\n"), err
}

// roundTrip sends a line and returns the answer, or the error reading it.
func (c *client) roundTrip(line string) (string, error) {
	c.t.Helper()
	_ = c.conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.conn.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	got, err := c.r.ReadString('\n')
	return strings.TrimSuffix(got, "\n"), err
}

// waitFor polls cond until it holds, failing t after 10 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestAProxyForwardsBothWaysUntilTold(t *testing.T) {
	t.Parallel()
	p := newProxy(t, echo(t))
	c := dial(t, p.Addr())
	for _, line := range []string{"hello", "again"} {
		if got, err := c.roundTrip(line); err != nil || got != strings.ToUpper(line) {
			t.Fatalf("round trip %q: %q, %v", line, got, err)
		}
	}
	if p.Accepted() != 1 || p.Live() != 1 {
		t.Fatalf("accepted %d, live %d; want 1 and 1", p.Accepted(), p.Live())
	}
}

func TestACutClosesLiveConnectionsAndResetsNewOnesUntilRestored(t *testing.T) {
	t.Parallel()
	p := newProxy(t, echo(t))
	live := dial(t, p.Addr())
	if _, err := live.roundTrip("before"); err != nil {
		t.Fatal(err)
	}

	p.Cut()
	if _, err := live.roundTrip("during"); err == nil {
		t.Fatal("a connection that was live at the cut still answers")
	}
	// The kernel accepts; the proxy resets it at once.
	if got, err := exchange(p.Addr(), "during"); err == nil {
		t.Fatalf("a connection made during the cut was forwarded: %q", got)
	}
	if p.Refused() == 0 {
		t.Fatal("no connection counted as refused")
	}

	p.Restore()
	if got, err := exchange(p.Addr(), "after"); err != nil || got != "AFTER" {
		t.Fatalf("after Restore: %q, %v", got, err)
	}
}

func TestAStallHoldsBytesOnOpenConnectionsUntilRestored(t *testing.T) {
	t.Parallel()
	p := newProxy(t, echo(t))
	c := dial(t, p.Addr())
	if _, err := c.roundTrip("warm"); err != nil {
		t.Fatal(err)
	}

	p.Stall()
	if _, err := c.conn.Write([]byte("held\n")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the proxy to hold the chunk", func() bool { return p.Held() == 1 })
	// Held before forwarding: the echo server has not seen it, so nothing can be read.
	_ = c.conn.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := c.r.ReadString('\n'); !isTimeout(err) {
		t.Fatalf("read during a stall: %v; want a timeout", err)
	}

	p.Restore()
	_ = c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := c.r.ReadString('\n')
	if err != nil || got != "HELD\n" {
		t.Fatalf("after Restore: %q, %v", got, err)
	}
	if p.Held() != 0 || p.Live() != 1 {
		t.Fatalf("held %d, live %d after Restore; want 0 and 1", p.Held(), p.Live())
	}
}

func TestADelaySlowsEveryChunkInBothDirections(t *testing.T) {
	t.Parallel()
	p := newProxy(t, echo(t))
	c := dial(t, p.Addr())
	const d = 100 * time.Millisecond
	p.Delay(d)
	start := time.Now()
	if _, err := c.roundTrip("slow"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 2*d {
		t.Fatalf("a round trip took %s with a delay of %s each way", took, d)
	}
	p.Restore()
	start = time.Now()
	if _, err := c.roundTrip("fast"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took >= 2*d {
		t.Logf("a round trip after Restore took %s (a busy machine?)", took)
	}
}

func TestATargetThatIsDownResetsTheClient(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := ln.Addr().String()
	ln.Close()
	p := newProxy(t, gone)
	if got, err := exchange(p.Addr(), "anyone?"); err == nil {
		t.Fatalf("a connection to a target that is down was answered: %q", got)
	}
	waitFor(t, "the refusal to be counted", func() bool { return p.Refused() == 1 })

	p.Retarget(echo(t))
	if got, err := exchange(p.Addr(), "now"); err != nil || got != "NOW" {
		t.Fatalf("after Retarget: %q, %v", got, err)
	}
}

func TestCloseEndsEveryConnectionAndIsIdempotent(t *testing.T) {
	t.Parallel()
	p, err := chaos.Listen(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, p.Addr())
	if _, err := c.roundTrip("x"); err != nil {
		t.Fatal(err)
	}
	p.Stall()
	if _, err := c.conn.Write([]byte("stuck\n")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the proxy to hold the chunk", func() bool { return p.Held() == 1 })
	if err := p.Close(); err != nil { // returns only when every goroutine has ended
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	_ = c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.r.ReadString('\n'); err == nil || isTimeout(err) {
		t.Fatalf("read after Close: %v; want the connection closed", err)
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Fatal("the closed proxy still accepts")
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() && !errors.Is(err, io.EOF)
}
