package rabbitmq

import (
	"bytes"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// pipe returns a corkConn writing into one end of a local TCP connection and the other
// end, which reads what was written.
func pipe(t *testing.T) (*corkConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer := <-accepted
	t.Cleanup(func() { c.Close(); peer.Close() })
	return &corkConn{Conn: c}, peer
}

// readWithin returns what arrives at peer within d.
func readWithin(t *testing.T, peer net.Conn, d time.Duration) string {
	t.Helper()
	_ = peer.SetReadDeadline(time.Now().Add(d))
	var got bytes.Buffer
	buf := make([]byte, 1<<20)
	for {
		n, err := peer.Read(buf)
		got.Write(buf[:n])
		if err != nil {
			return got.String()
		}
	}
}

func TestACorkedSocketWritesABatchOnceUncorked(t *testing.T) {
	t.Parallel()
	c, peer := pipe(t)
	c.cork()
	c.cork() // a second publish corks too
	for _, s := range []string{"method", "header", "body"} {
		if n, err := c.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write while corked: %d, %v", n, err)
		}
	}
	if got := readWithin(t, peer, 50*time.Millisecond); got != "" {
		t.Fatalf("%q went out while corked", got)
	}
	c.uncork()
	if got := readWithin(t, peer, 50*time.Millisecond); got != "" {
		t.Fatalf("%q went out while another publish still corked", got)
	}
	c.uncork()
	if got := readWithin(t, peer, time.Second); got != "methodheaderbody" {
		t.Fatalf("after the last uncork, %q arrived", got)
	}
	if _, err := c.Write([]byte("heartbeat")); err != nil {
		t.Fatal(err)
	}
	if got := readWithin(t, peer, time.Second); got != "heartbeat" {
		t.Fatalf("uncorked, %q arrived", got)
	}
}

func TestACorkedSocketWritesThroughPastItsBound(t *testing.T) {
	t.Parallel()
	c, peer := pipe(t)
	c.cork()
	big := strings.Repeat("x", corkMax)
	done := make(chan string)
	go func() { done <- readWithin(t, peer, time.Second) }()
	if _, err := c.Write([]byte(big)); err != nil {
		t.Fatal(err)
	}
	if got := <-done; len(got) != corkMax {
		t.Fatalf("%d bytes arrived of a corked write of %d, the bound", len(got), corkMax)
	}
	c.uncork()
}

func TestAFailedFlushClosesTheSocketSoTheReaderSeesIt(t *testing.T) {
	t.Parallel()
	c, peer := pipe(t)
	peer.Close()
	c.cork()
	_, _ = c.Write(bytes.Repeat([]byte("x"), 1<<20)) // more than the closed peer takes
	c.uncork()
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read after a failed flush: %v; want the socket closed", err)
	}
}
