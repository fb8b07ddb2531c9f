package natsconn_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/natsconn"
)

func TestCheckSubject(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		subject string
		ok      bool
	}{
		{"a dotted literal subject is accepted", "orders.created.v1", true},
		{"a single token is accepted", "orders", true},
		{"a star inside a token is a literal and accepted", "orders.a*b", true},
		{"an empty subject is refused", "", false},
		{"a subject with a space is refused", "orders created", false},
		{"a subject with a tab is refused", "orders\tcreated", false},
		{"a subject with a line break is refused", "orders\r\ncreated", false},
		{"a single-token wildcard is refused", "orders.*", false},
		{"a full wildcard is refused", "orders.>", false},
		{"a wildcard in the middle is refused", "orders.*.v1", false},
		{"an empty token in the middle is refused", "orders..created", false},
		{"a leading dot is refused", ".orders", false},
		{"a trailing dot is refused", "orders.", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := natsconn.CheckSubject(c.subject)
			if c.ok && err != nil {
				t.Fatalf("CheckSubject(%q) = %v, want nil", c.subject, err)
			}
			if !c.ok && !errors.Is(err, nats.ErrBadSubject) {
				t.Fatalf("CheckSubject(%q) = %v, want nats.ErrBadSubject", c.subject, err)
			}
		})
	}
}

func TestMsgCarriesTheProducerHeadersAndTheOutboxHeadersWin(t *testing.T) {
	t.Parallel()
	m := router.Message{
		ID: 42, Stream: "orders", Topic: "orders.created", Key: []byte("customer-7"),
		Headers: map[string]string{"content-type": "application/json", router.HeaderID: "forged", router.HeaderMessageID: "forged"},
		Payload: []byte(`{}`), RowDedupID: "6f1c2a56-7f3e-4b8e-9a55-0d3c1b2a4e10",
	}
	got := natsconn.Msg(&m, 0)
	want := map[string]string{
		"content-type":         "application/json",
		router.HeaderID:        "42",
		router.HeaderStream:    "orders",
		router.HeaderKey:       "customer-7",
		router.HeaderMessageID: "6f1c2a56-7f3e-4b8e-9a55-0d3c1b2a4e10",
	}
	if got.Subject != "orders.created" || string(got.Data) != `{}` {
		t.Fatalf("subject %q data %q", got.Subject, got.Data)
	}
	if len(got.Header) != len(want) {
		t.Fatalf("headers %v, want %v", got.Header, want)
	}
	for k, v := range want {
		if got.Header.Get(k) != v {
			t.Fatalf("header %s = %q, want %q (all: %v)", k, got.Header.Get(k), v, got.Header)
		}
	}
}

func TestMsgWithoutAKeyHasNoKeyHeader(t *testing.T) {
	t.Parallel()
	got := natsconn.Msg(&router.Message{ID: 1, Stream: "s", Topic: "t"}, 0)
	if _, ok := got.Header[router.HeaderKey]; ok {
		t.Fatalf("a message without a key got %s: %v", router.HeaderKey, got.Header)
	}
}
