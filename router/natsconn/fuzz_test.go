package natsconn_test

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/outboxd/outboxd/router/natsconn"
)

// FuzzCheckHeaders: a header CheckHeaders accepts survives NATS's wire format unchanged
// (written as the client writes it, read back with the client's own decoder), and
// checking never panics, whatever the bytes.
func FuzzCheckHeaders(f *testing.F) {
	for _, seed := range [][2]string{
		{"content-type", "application/json"},
		{"bad name", "v"},
		{"trace", "a\r\nInjected: yes"},
		{"x", " padded "},
		{"k", "ünïcode"},
		{"", "empty name"},
		{"colon:name", "v"},
		{"tab", "a\tb"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, name, value string) {
		h := nats.Header{name: []string{value}}
		if natsconn.CheckHeaders(h) != nil {
			return
		}
		wire := "NATS/1.0\r\n" + name + ": " + value + "\r\n\r\n"
		got, err := nats.DecodeHeadersMsg([]byte(wire))
		if err != nil {
			t.Fatalf("accepted header %q: %q does not decode: %v", name, value, err)
		}
		if vs := got[name]; len(vs) != 1 || vs[0] != value {
			t.Fatalf("accepted header %q: %q arrives as %q", name, value, got)
		}
	})
}
