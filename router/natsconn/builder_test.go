package natsconn_test

import (
	"errors"
	"fmt"
	"maps"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/natsconn"
)

// reference is what Builder.Msg must equal: Msg, then Nats-Msg-Id, then CheckHeaders.
func reference(m *router.Message, dedup bool, reply string) (*nats.Msg, error) {
	msg := natsconn.Msg(m, 1)
	if dedup {
		msg.Header[nats.MsgIdHdr] = []string{m.DedupID()}
	}
	msg.Reply = reply
	return msg, natsconn.CheckHeaders(msg.Header)
}

func sameMsg(t *testing.T, got, want *nats.Msg) {
	t.Helper()
	if got.Subject != want.Subject || got.Reply != want.Reply || string(got.Data) != string(want.Data) {
		t.Fatalf("got %q reply %q data %q, want %q reply %q data %q", got.Subject, got.Reply, got.Data, want.Subject, want.Reply, want.Data)
	}
	if !maps.EqualFunc(got.Header, want.Header, func(a, b []string) bool { return len(a) == 1 && len(b) == 1 && a[0] == b[0] }) {
		t.Fatalf("headers %v, want %v", got.Header, want.Header)
	}
}

func TestABuilderReusedForManyMessagesBuildsEachAsMsgDoes(t *testing.T) {
	t.Parallel()
	msgs := []router.Message{
		{ID: 1, Stream: "orders", Topic: "orders.created", Key: []byte("k1"), Payload: []byte("a"),
			Headers: map[string]string{"content-type": "application/json", "trace": "t1", "extra": "x"}},
		{ID: 2, Stream: "orders", Topic: "orders.created", Payload: []byte("b")}, // no key, no headers: nothing left over
		{ID: 3, Stream: "orders", Topic: "orders.paid", MessageID: "order-3", Key: []byte{},
			Headers: map[string]string{router.HeaderID: "forged", nats.MsgIdHdr: "forged-too"}},
		{ID: 4, Stream: "orders", Topic: "orders.created", Headers: map[string]string{"trace": "t4"}},
		{ID: 5, Stream: "orders", Topic: "orders.created", Headers: map[string]string{"trace": "t5"}}, // 4's shape
		{ID: 6, Stream: "refunds", Topic: "refunds.created", Headers: map[string]string{"span": "s6"}},
		{ID: 7, Stream: "orders", Topic: "orders.created", Key: []byte("k7"), Payload: []byte("g"),
			Headers: map[string]string{"content-type": "text/plain", "trace": "t7", "extra": "y"}}, // 1's shape, after others
		{ID: 8, Stream: "orders", Topic: "orders.created", Key: []byte("k8"),
			Headers: map[string]string{"content-type": "text/plain", "trace": "t8", "extra": "z"}}, // 7's shape
		{ID: 9, Stream: "orders", Topic: "orders.paid", MessageID: "order-9", Key: []byte("k9"),
			Headers: map[string]string{router.HeaderID: "forged", nats.MsgIdHdr: "forged-again"}}, // 3's names, keyed
		{ID: 10, Stream: "orders", Topic: "orders.paid", Key: []byte("k10"),
			Headers: map[string]string{router.HeaderID: "forged", nats.MsgIdHdr: "forged-once-more"}}, // 9's shape
	}
	var b natsconn.Builder
	for _, dedup := range []bool{true, false} {
		for i := range msgs {
			got, err := b.Msg(&msgs[i], dedup, "_INBOX.x.1."+string(rune('0'+i)))
			if err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
			want, _ := reference(&msgs[i], dedup, "_INBOX.x.1."+string(rune('0'+i)))
			sameMsg(t, got, want)
		}
	}
}

func TestABuilderRefusesWhatCheckHeadersRefusesWithItsError(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		m    router.Message
		ok   bool
	}{
		{"A producer header name with a space is refused.", router.Message{Headers: map[string]string{"bad name": "v"}}, false},
		{"A producer header value with a line break is refused.", router.Message{Headers: map[string]string{"trace": "a\r\nInjected: 1"}}, false},
		{"A key ending in a space is refused.", router.Message{Key: []byte("k ")}, false},
		{"A producer message id with a line break is refused.", router.Message{MessageID: "id\n2"}, false},
		{"A bad producer value under a name the outbox header replaces is accepted.", router.Message{Headers: map[string]string{router.HeaderID: " forged\r\n"}}, true},
		{"A bad producer message id header is replaced by the dedup id.", router.Message{Headers: map[string]string{nats.MsgIdHdr: "\n"}}, true},
	}
	var b natsconn.Builder
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.m.ID, c.m.Stream, c.m.Topic = 7, "s", "t"
			_, want := reference(&c.m, true, "")
			_, err := b.Msg(&c.m, true, "")
			if (err == nil) != c.ok || (want == nil) != c.ok {
				t.Fatalf("Builder.Msg: %v; CheckHeaders: %v; want ok=%v", err, want, c.ok)
			}
			if err != nil && (err.Error() != want.Error() || !errors.Is(err, nats.ErrBadHeaderMsg)) {
				t.Fatalf("error %q, want %q", err, want)
			}
		})
	}
}

func TestABuilderRefusesAMessageOfTheShapeBeforeItWhenAValueIsBadAndTakesTheNext(t *testing.T) {
	t.Parallel()
	var b natsconn.Builder
	for i, value := range []string{"fine", "bad\r\nInjected: 1", " padded", "fine again"} {
		m := router.Message{ID: int64(i + 1), Stream: "s", Topic: "t", Key: []byte("k"), Headers: map[string]string{"trace": value}}
		buildsAsReference(t, &b, &m, true, fmt.Sprintf("value %q", value))
	}
}

// buildsAsReference holds b's build of m to reference's: the same message, or the same
// error. what names the case in a failure.
func buildsAsReference(t *testing.T, b *natsconn.Builder, m *router.Message, dedup bool, what string) {
	t.Helper()
	got, err := b.Msg(m, dedup, "r")
	want, wantErr := reference(m, dedup, "r")
	if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() {
		t.Fatalf("%s: error %v, want %v", what, err, wantErr)
	}
	if err == nil {
		sameMsg(t, got, want)
	}
}

// FuzzBuilder: whatever the headers, key and message id, Builder.Msg gives the message
// and the error Msg and CheckHeaders give, also after building another message first:
// of another shape, or of the same shape with other values.
func FuzzBuilder(f *testing.F) {
	f.Add("content-type", "application/json", "key-1", "", true)
	f.Add("bad name", "v", "k", "id", false)
	f.Add(router.HeaderKey, "x", " k", "id\r\n", true)
	f.Add(nats.MsgIdHdr, "forged", "", "", true)
	f.Fuzz(func(t *testing.T, name, value, key, msgID string, dedup bool) {
		m := router.Message{ID: 10, Stream: "s", Topic: "t", Key: []byte(key), MessageID: msgID, Headers: map[string]string{name: value}}
		priors := []router.Message{
			{ID: 9, Stream: "s", Topic: "t", Headers: map[string]string{"left": "over", name + "2": value}},
			{ID: 9, Stream: "s0", Topic: "t0", Key: []byte(key + "0"), Headers: map[string]string{name: value + "0"}},
		}
		for i := range priors {
			var b natsconn.Builder
			priorDedup := dedup // the second prior is of m's shape
			if i == 0 {
				priorDedup = !dedup
			}
			_, _ = b.Msg(&priors[i], priorDedup, "r0")
			buildsAsReference(t, &b, &m, dedup, fmt.Sprintf("after prior %d", i))
		}
	})
}

func BenchmarkBuild(b *testing.B) {
	m := router.Message{ID: 123456789, Stream: "bench_1", Topic: "outboxd-bench.events", Key: []byte("key-42"),
		Headers: map[string]string{"content-type": "application/octet-stream"}, Payload: make([]byte, 1024)}
	b.Run("builder", func(b *testing.B) {
		b.ReportAllocs()
		var bd natsconn.Builder
		for b.Loop() {
			if _, err := bd.Msg(&m, true, "_INBOX.abc.1.2"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("msg-and-check", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := reference(&m, true, "_INBOX.abc.1.2"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
