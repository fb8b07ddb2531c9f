package redis

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxd/outboxd/router"
)

func TestAnEntryCarriesTheOutboxFieldsAndEachHeaderUnderItsPrefix(t *testing.T) {
	t.Parallel()
	addr, c := server(t)
	d := newDriver(t, testOptions(addr))
	key := uniqueKey(t, c, "fields")
	msgs := []router.Message{
		{ID: 7, Stream: "orders", Topic: key, Key: []byte("order-7"), Payload: []byte(`{"n":7}`), MessageID: "m-7",
			Headers: map[string]string{
				"content-type":         "application/json",
				"payload":              "a header, not the payload",
				"id":                   "a header, not the id",
				router.HeaderID:        "the producer's, replaced",
				router.HeaderMessageID: "the producer's, replaced",
			}},
		{ID: 8, Stream: "orders", Topic: key, Payload: nil, RowDedupID: "row-8", Headers: map[string]string{"payload": "one header"}},
		{ID: 9, Stream: "orders", Topic: key, Key: []byte{}, Payload: []byte("p"), RowDedupID: "row-9",
			Headers: map[string]string{router.HeaderKey: "the producer's, dropped"}},
	}
	if errs := d.Publish(testCtx(t), msgs); errs[0] != nil || errs[1] != nil || errs[2] != nil {
		t.Fatalf("Publish: %v", errs)
	}
	got := readStream(t, c, key, 3)
	want := [][]string{
		{"id", "7", "message_id", "m-7", "stream", "orders", "key", "order-7", "payload", `{"n":7}`,
			"h:content-type", "application/json", "h:id", "a header, not the id", "h:payload", "a header, not the payload"},
		{"id", "8", "message_id", "row-8", "stream", "orders", "payload", "", "h:payload", "one header"},
		{"id", "9", "message_id", "row-9", "stream", "orders", "key", "", "payload", "p"},
	}
	for i, e := range got {
		// XRANGE as the raw reply: the fields in the order they were written.
		raw, err := c.Do(context.Background(), "XRANGE", key, e.ID, e.ID).Slice()
		if err != nil {
			t.Fatal(err)
		}
		var fields []string
		for _, f := range raw[0].([]any)[1].([]any) {
			fields = append(fields, f.(string))
		}
		if !slices.Equal(fields, want[i]) {
			t.Errorf("entry %d holds\n%q\nwant\n%q", i, fields, want[i])
		}
	}
}

func TestMaxLenTrimsEachStreamAsEntriesAreAdded(t *testing.T) {
	t.Parallel()
	addr, c := server(t)
	cases := []struct {
		name        string
		approximate bool
		lo, hi      int64
	}{
		// Approximate trimming drops only whole nodes of the stream (100 entries each by
		// default), so it keeps at least maxlen and less than maxlen and a node more.
		{"approximately, keeping at least maxlen entries and whole nodes", true, 10, 10 + 200},
		{"exactly, when approximate is off", false, 10, 10},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions(addr)
			o.MaxLen, o.Approximate = 10, tc.approximate
			d := newDriver(t, o)
			key := uniqueKey(t, c, "maxlen")
			for range 10 {
				for i, err := range d.Publish(testCtx(t), messages(key, 100)) {
					if err != nil {
						t.Fatalf("message %d: %v", i, err)
					}
				}
			}
			n, err := c.XLen(context.Background(), key).Result()
			if err != nil {
				t.Fatal(err)
			}
			if n < tc.lo || n > tc.hi {
				t.Fatalf("after 1000 entries the stream holds %d, want %d to %d", n, tc.lo, tc.hi)
			}
		})
	}
}

func TestAKeyHoldingAnotherTypeFailsItsMessagesPermanentlyNamingTheType(t *testing.T) {
	t.Parallel()
	addr, c := server(t)
	d := newDriver(t, testOptions(addr))
	ctx := context.Background()
	good, text, list := uniqueKey(t, c, "good"), uniqueKey(t, c, "text"), uniqueKey(t, c, "list")
	if err := c.Set(ctx, text, "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.LPush(ctx, list, "x").Err(); err != nil {
		t.Fatal(err)
	}
	msgs := messages(good, 5)
	msgs[1].Topic, msgs[3].Topic = text, list
	errs := d.Publish(testCtx(t), msgs)
	if k := kinds(errs); !slices.Equal(k, []string{"ok", "permanent", "ok", "permanent", "ok"}) {
		t.Fatalf("kinds %v: %v", k, errs)
	}
	for i, typ := range map[int]string{1: "string", 3: "list"} {
		want := "redis: key " + strconv.Quote(msgs[i].Topic) + " is a " + typ + ", not a stream: WRONGTYPE"
		if !strings.Contains(errs[i].Error(), want) {
			t.Errorf("message %d: %q does not say %q", i, errs[i], want)
		}
	}
	readStream(t, c, good, 3)
}

// perKey answers each XADD with the reply its key names ("ok" adds an entry).
func perKey(args []string) string {
	switch {
	case strings.EqualFold(args[0], "hello"):
		return noHello
	case !strings.EqualFold(args[0], "xadd"):
		return errorReply("ERR unexpected " + args[0])
	}
	switch key := args[1]; key {
	case "ok":
		return bulkReply("1-0")
	case "oom":
		return errorReply("OOM command not allowed when used memory > 'maxmemory'.")
	case "wrongtype":
		return errorReply("WRONGTYPE Operation against a key holding the wrong kind of value")
	case "noauth":
		return errorReply("NOAUTH Authentication required.")
	case "empty":
		return bulkReply("")
	default:
		return errorReply("LOADING Redis is loading the dataset in memory")
	}
}

func TestEachMessageGetsTheKindOfItsOwnReply(t *testing.T) {
	t.Parallel()
	s := scriptedServer(t, perKey)
	d := newDriver(t, Options{Addr: s.addr})
	var msgs []router.Message
	for _, key := range []string{"ok", "oom", "wrongtype", "ok", "noauth", "loading", "empty", "ok"} {
		msgs = append(msgs, router.Message{ID: 1, Stream: "s", Topic: key, Payload: []byte("p")})
	}
	errs := d.Publish(testCtx(t), msgs)
	want := []string{"ok", "retryable", "permanent", "ok", "unreachable", "retryable", "retryable", "ok"}
	if k := kinds(errs); !slices.Equal(k, want) {
		t.Fatalf("kinds %v, want %v: %v", k, want, errs)
	}
	if !strings.Contains(errs[6].Error(), "without an entry id") {
		t.Fatalf("an XADD answered without an entry id was not reported as such: %v", errs[6])
	}
}

func TestAFailedPipelineIsNotSentAgainByTheClient(t *testing.T) {
	t.Parallel()
	var xadds atomic.Int32
	s := scriptedServer(t, func(args []string) string {
		if strings.EqualFold(args[0], "hello") {
			return noHello
		}
		xadds.Add(1)
		return hangUp
	})
	d := newDriver(t, Options{Addr: s.addr})
	errs := d.Publish(testCtx(t), messages("orders", 1))
	if router.KindOf(errs[0]) != router.KindUnreachable {
		t.Fatalf("a connection closed before the reply: %v (%s), want unreachable", errs[0], router.KindOf(errs[0]))
	}
	if n, conns := xadds.Load(), s.accepted.Load(); n != 1 || conns != 1 {
		t.Fatalf("the server got %d XADDs over %d connections; the dispatcher, not the client, retries", n, conns)
	}
}

func TestCredentialsOrADatabaseTheServerRefusesLeaveEveryMessageUnreachable(t *testing.T) {
	t.Parallel()
	addr, c := server(t)
	cases := []struct {
		name string
		opts func(o *Options)
		want string
	}{
		{"a user the server does not know", func(o *Options) { o.Username, o.Password = "outboxd-test-nobody", "pw" }, "WRONGPASS"},
		{"a database index the server lacks", func(o *Options) { o.DB = 1 << 30 }, "DB index is out of range"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions(addr)
			tc.opts(&o)
			d := newDriver(t, o)
			key := uniqueKey(t, c, "refused")
			for i, err := range d.Publish(testCtx(t), messages(key, 3)) {
				if router.KindOf(err) != router.KindUnreachable || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("message %d: %v (%s), want unreachable saying %q", i, err, router.KindOf(err), tc.want)
				}
			}
			if n, err := c.Exists(context.Background(), key).Result(); err != nil || n != 0 {
				t.Fatalf("the stream exists (%d, %v)", n, err)
			}
		})
	}
}

func TestACancelledPublishReturnsAtOnceAndCloseWaitsForItsPipeline(t *testing.T) {
	t.Parallel()
	s := scriptedServer(t, func(args []string) string {
		if strings.EqualFold(args[0], "hello") {
			return noHello
		}
		return silent
	})
	const timeout = time.Second
	d := newDriver(t, Options{Addr: s.addr, PublishTimeout: timeout})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	errs := d.Publish(ctx, messages("orders", 3))
	if waited := time.Since(start); waited > timeout/2 {
		t.Fatalf("Publish returned %v after its context ended", waited-50*time.Millisecond)
	}
	for i, err := range errs {
		if router.KindOf(err) != router.KindCanceled || !errors.Is(err, context.Canceled) {
			t.Fatalf("message %d: %v (%s), want canceled", i, err, router.KindOf(err))
		}
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if closed := time.Since(start); closed < timeout {
		t.Fatalf("Close returned after %v, before the pipeline's publish timeout of %v", closed, timeout)
	}
}

func TestAPublishWhoseReplyDoesNotComeWithinTheTimeoutIsRetryable(t *testing.T) {
	t.Parallel()
	s := scriptedServer(t, func(args []string) string {
		if strings.EqualFold(args[0], "hello") {
			return noHello
		}
		return silent
	})
	d := newDriver(t, Options{Addr: s.addr, PublishTimeout: 100 * time.Millisecond})
	start := time.Now()
	for i, err := range d.Publish(testCtx(t), messages("orders", 2)) {
		if router.KindOf(err) != router.KindRetryable {
			t.Fatalf("message %d: %v (%s), want retryable", i, err, router.KindOf(err))
		}
	}
	if waited := time.Since(start); waited > 2*time.Second {
		t.Fatalf("Publish took %v with a publish timeout of 100ms", waited)
	}
}

func TestConcurrentPublishesEachGetTheirOwnResults(t *testing.T) {
	t.Parallel()
	addr, c := server(t)
	d := newDriver(t, testOptions(addr))
	key := uniqueKey(t, c, "concurrent")
	const publishers, each = 8, 50
	done := make(chan []error, publishers)
	for range publishers {
		go func() { done <- d.Publish(context.Background(), messages(key, each)) }()
	}
	for range publishers {
		for i, err := range <-done {
			if err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
		}
	}
	readStream(t, c, key, publishers*each)
}
