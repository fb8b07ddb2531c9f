package natsconn_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/natsconn"
)

func TestASubjectTooLongForTheServersControlLineIsRefusedWithoutQuotingItWhole(t *testing.T) {
	t.Parallel()
	if err := natsconn.CheckSubject(strings.Repeat("a", 3968)); err != nil {
		t.Fatalf("a subject of 3968 bytes: %v", err)
	}
	err := natsconn.CheckSubject(strings.Repeat("a", 3969))
	if !errors.Is(err, nats.ErrBadSubject) || !strings.Contains(err.Error(), "3969 bytes long") ||
		!strings.Contains(err.Error(), "max_control_line") {
		t.Fatalf("a subject of 3969 bytes: %v", err)
	}
	if len(err.Error()) > 400 {
		t.Fatalf("the error quotes the whole subject: %d bytes", len(err.Error()))
	}
}

func TestCheckHeadersRefusesWhatNATSWouldDropOrRewrite(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		header nats.Header
		want   string // "" when accepted
	}{
		{"plain headers are accepted", nats.Header{"Content-Type": {"application/json"}, "x-trace_id.v1": {"a b"}}, ""},
		{"an empty value is accepted", nats.Header{"note": {""}}, ""},
		{"non-ASCII and control characters inside a value are accepted", nats.Header{"note": {"größe\x01\tend"}}, ""},
		{"a name with a space is refused", nats.Header{"bad name": {"v"}}, `header "bad name" has a name NATS refuses`},
		{"a name with a colon is refused", nats.Header{"a:b": {"v"}}, `header "a:b" has a name NATS refuses`},
		{"a name with a slash is refused", nats.Header{"a/b": {"v"}}, `header "a/b" has a name NATS refuses`},
		{"a name in non-ASCII letters is refused", nats.Header{"größe": {"v"}}, `header "größe" has a name NATS refuses`},
		{"a name holding DEL is refused", nats.Header{"a\x7f": {"v"}}, `has a name NATS refuses`},
		{"an empty name is refused", nats.Header{"": {"v"}}, `header "" has a name NATS refuses`},
		{"a value holding CR LF is refused", nats.Header{"note": {"a\r\nX-Forged: 1"}}, `header "note" has a value holding CR or LF`},
		{"a value holding a lone LF is refused", nats.Header{"note": {"a\nb"}}, "CR or LF"},
		{"a value with a leading space is refused", nats.Header{"note": {" a"}}, "beginning or ending with whitespace"},
		{"a value with a trailing tab is refused", nats.Header{"note": {"a\t"}}, "beginning or ending with whitespace"},
		{"the key's header is named as the row's key", nats.Header{router.HeaderKey: {"k\n"}}, `"Outbox-Key", which carries the row's key,`},
		{"Nats-Msg-Id is named as the row's message_id", nats.Header{nats.MsgIdHdr: {"id\r"}}, `"Nats-Msg-Id", which carries the row's message_id,`},
		{"every problem is listed in name order", nats.Header{"z z": {"v"}, "a a": {"v"}}, `header "a a" has a name NATS refuses (printable ASCII without spaces or any of "()/,:;<=>?@[\]{}, and not empty); header "z z"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := natsconn.CheckHeaders(c.header)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (!errors.Is(err, nats.ErrBadHeaderMsg) || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("error %v; want nats.ErrBadHeaderMsg saying %q", err, c.want)
			}
		})
	}
}

// CheckHeaders agrees with the client on every one-byte variation of a name and a value:
// what it accepts, a subscriber receives unchanged; what it refuses, the client refuses
// or rewrites.
func TestCheckHeadersAgreesWithTheClientAndTheServer(t *testing.T) {
	t.Parallel()
	url := startServer(t, &server.Options{})
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	sub, err := nc.SubscribeSync("check")
	if err != nil {
		t.Fatal(err)
	}
	for c := 0; c < 256; c++ {
		for _, h := range []nats.Header{{"a" + string([]byte{byte(c)}): {"v"}}, {"n": {"v" + string([]byte{byte(c)})}}} {
			var name, value string
			for name = range h {
				value = h[name][0]
			}
			m := nats.NewMsg("check")
			m.Header = h
			accepted := natsconn.CheckHeaders(h) == nil
			pubErr := nc.PublishMsg(m)
			if pubErr != nil {
				if accepted {
					t.Fatalf("CheckHeaders accepted %q: %q, the client refused it: %v", name, value, pubErr)
				}
				continue
			}
			got, err := sub.NextMsg(5 * time.Second)
			if err != nil {
				t.Fatalf("%q: %q published, not received: %v", name, value, err)
			}
			same := len(got.Header[name]) == 1 && got.Header[name][0] == value
			if accepted != same {
				t.Fatalf("CheckHeaders accepted=%v for %q: %q, but it arrived unchanged=%v (%q)", accepted, name, value, same, got.Header)
			}
		}
	}
}

func TestAHeaderTheClientCannotEncodeIsPermanent(t *testing.T) {
	t.Parallel()
	if k := router.KindOf(natsconn.Classify(nats.ErrBadHeaderMsg)); k != router.KindPermanent {
		t.Fatalf("nats.ErrBadHeaderMsg is %s, want permanent: publishing it again gives the same answer", k)
	}
}
