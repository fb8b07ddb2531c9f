package redis

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/router"
)

// testDB is the database index every test uses, on the Redis server testenv names
// (127.0.0.1:6379 unless OUTBOXD_TEST_REDIS_ADDR says otherwise); each test's keys carry
// a random suffix of their own and are deleted when it ends.
const testDB = 9

// server returns the test server's address and a client of its test database, or
// skips t (fails it under OUTBOXD_REQUIRE_SERVICES=1) when no server answers there.
func server(t testing.TB) (string, *goredis.Client) {
	t.Helper()
	addr := testenv.RedisAddr(t)
	c := goredis.NewClient(&goredis.Options{Addr: addr, DB: testDB, MaxRetries: -1, DialTimeout: 2 * time.Second})
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("redis at %s accepts connections but does not answer PING on database %d: %v", addr, testDB, err)
	}
	return addr, c
}

// testOptions are the driver's defaults on the test database of the server at addr.
func testOptions(addr string) Options {
	o := DefaultOptions()
	o.Addr = addr
	o.DB = testDB
	return o
}

func newDriver(t testing.TB, o Options) *Driver {
	t.Helper()
	d, err := New("test", o, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// uniqueKey returns a key no other test uses, deleted when t ends.
func uniqueKey(t testing.TB, c *goredis.Client, name string) string {
	t.Helper()
	key := "outboxd-test:" + name + ":" + strconv.FormatUint(rand.Uint64(), 36)
	t.Cleanup(func() { _ = c.Del(context.Background(), key).Err() })
	return key
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// readStream returns every entry of key once it holds at least n, failing t if it
// does not within ten seconds.
func readStream(t testing.TB, c *goredis.Client, key string, n int) []goredis.XMessage {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := c.XRange(context.Background(), key, "-", "+").Result()
		if err != nil {
			t.Fatalf("XRANGE %s: %v", key, err)
		}
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream %s holds %d entries, want %d", key, len(got), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// messages builds n messages bound for topic, keyed over three keys.
func messages(topic string, n int) []router.Message {
	msgs := make([]router.Message, n)
	for i := range msgs {
		msgs[i] = router.Message{
			ID: int64(i + 1), Stream: "orders", Topic: topic, Key: []byte("k" + strconv.Itoa(i%3)),
			Headers: map[string]string{"seq": strconv.Itoa(i)}, Payload: []byte("p" + strconv.Itoa(i)),
			RowDedupID: "dedup-" + strconv.Itoa(i),
		}
	}
	return msgs
}

// kinds names each result's kind, "ok" for nil.
func kinds(errs []error) []string {
	out := make([]string, len(errs))
	for i, err := range errs {
		out[i] = "ok"
		if err != nil {
			out[i] = router.KindOf(err).String()
		}
	}
	return out
}

// refusingAddr returns a local address whose port is bound but not listening, so
// connections to it are refused for as long as the test runs.
func refusingAddr(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatalf("socket: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("bind: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("getsockname: %v", err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
}

// A scripted server: it speaks RESP and answers each command as a test says. It
// stands in for a real server only where a reply cannot be had from one without
// changing it for everyone else who uses it (maxmemory for OOM, a password for NOAUTH,
// a failover for READONLY, a stuck script for BUSY).
type scripted struct {
	addr     string
	accepted atomic.Int32
}

// Replies a script may give besides a RESP reply.
const (
	silent  = ""        // read the command, answer nothing
	hangUp  = "hang up" // close the connection
	noHello = "-ERR unknown command 'HELLO'\r\n"
)

func errorReply(text string) string { return "-" + text + "\r\n" }
func bulkReply(s string) string     { return "$" + strconv.Itoa(len(s)) + "\r\n" + s + "\r\n" }

// scriptedServer starts a server that answers every command with answer(args). HELLO
// should be answered noHello, as Redis before 6 does, so that the client goes on
// without a handshake.
func scriptedServer(t testing.TB, answer func(args []string) string) *scripted {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &scripted{addr: ln.Addr().String()}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go serve(c, answer)
		}
	}()
	return s
}

func serve(c net.Conn, answer func([]string) string) {
	defer c.Close()
	rd := bufio.NewReader(c)
	for {
		args, err := readCommand(rd)
		if err != nil {
			return
		}
		switch reply := answer(args); reply {
		case silent:
		case hangUp:
			return
		default:
			if _, err := io.WriteString(c, reply); err != nil {
				return
			}
		}
	}
}

// readCommand reads one command, an array of bulk strings.
func readCommand(rd *bufio.Reader) ([]string, error) {
	line, err := rd.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(line, "*") {
		return nil, fmt.Errorf("not an array: %q", line)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil {
		return nil, err
	}
	args := make([]string, n)
	for i := range args {
		head, err := rd.ReadString('\n')
		if err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(head, "$")))
		if err != nil {
			return nil, err
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return nil, err
		}
		args[i] = string(buf[:size])
	}
	if n == 0 {
		return nil, errors.New("empty command")
	}
	return args, nil
}

// xaddArgs adds one entry to key.
func xaddArgs(key string) *goredis.XAddArgs {
	return &goredis.XAddArgs{Stream: key, Values: []any{FieldPayload, "x"}}
}
