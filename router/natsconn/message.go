package natsconn

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/outboxd/outboxd/router"
)

// Msg returns m in NATS's wire form: its subject is m.Topic; its headers are the
// producer's, then the outbox id and stream (which win over producer headers of the same
// name) and, since NATS has no key of its own, the key as router.HeaderKey when there is
// one. room is how many more headers the caller will add.
func Msg(m *router.Message, room int) *nats.Msg {
	h := make(nats.Header, len(m.Headers)+3+room)
	for k, v := range m.Headers {
		h[k] = []string{v}
	}
	h[router.HeaderID] = []string{strconv.FormatInt(m.ID, 10)}
	h[router.HeaderStream] = []string{m.Stream}
	if m.Key != nil {
		h[router.HeaderKey] = []string{string(m.Key)}
	}
	return &nats.Msg{Subject: m.Topic, Header: h, Data: m.Payload}
}

// CheckSubject returns an error wrapping nats.ErrBadSubject unless subject is a literal
// subject: dot-separated tokens, none empty, none a wildcard ("*" or ">"), no whitespace.
// The library checks only for whitespace, and the server would take a wildcard subject
// and deliver it to whoever matches, so the driver refuses it here.
func CheckSubject(subject string) error {
	if subject == "" {
		return fmt.Errorf("empty subject: %w", nats.ErrBadSubject)
	}
	if strings.ContainsAny(subject, " \t\r\n") {
		return fmt.Errorf("subject %q contains whitespace: %w", subject, nats.ErrBadSubject)
	}
	for tok := range strings.SplitSeq(subject, ".") {
		switch tok {
		case "":
			return fmt.Errorf("subject %q has an empty token: %w", subject, nats.ErrBadSubject)
		case "*", ">":
			return fmt.Errorf("subject %q has the wildcard token %q: %w", subject, tok, nats.ErrBadSubject)
		}
	}
	return nil
}

// NotConnected returns nil when nc is connected, otherwise why a publish cannot reach the
// server now, wrapping the library's error for that state.
func NotConnected(nc *nats.Conn) error {
	var err error
	switch st := nc.Status(); st {
	case nats.CONNECTED:
		return nil
	case nats.CLOSED:
		err = nats.ErrConnectionClosed
	case nats.RECONNECTING:
		err = nats.ErrConnectionReconnecting
	case nats.DRAINING_PUBS, nats.DRAINING_SUBS:
		err = nats.ErrConnectionDraining
	default:
		err = nats.ErrDisconnected
	}
	return fmt.Errorf("not connected to a NATS server: %w", err)
}
