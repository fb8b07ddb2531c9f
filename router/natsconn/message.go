package natsconn

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/outboxd/outboxd/router"
)

// Msg returns m in NATS's wire form: its subject is m.Topic; its headers are the
// producer's, then the outbox id, stream and message id (which win over producer headers
// of the same name) and, since NATS has no key of its own, the key as router.HeaderKey
// when there is one. room is how many more headers the caller will add.
func Msg(m *router.Message, room int) *nats.Msg {
	h := make(nats.Header, len(m.Headers)+4+room)
	for k, v := range m.Headers {
		h[k] = []string{v}
	}
	h[router.HeaderID] = []string{strconv.FormatInt(m.ID, 10)}
	h[router.HeaderStream] = []string{m.Stream}
	h[router.HeaderMessageID] = []string{m.DedupID()}
	if m.Key != nil {
		h[router.HeaderKey] = []string{string(m.Key)}
	}
	return &nats.Msg{Subject: m.Topic, Header: h, Data: m.Payload}
}

// Builder writes messages as Msg does, into storage it reuses: the message it returns
// is valid until its next call. That suits nats.Conn.PublishMsg, which copies a message
// into the connection's buffer before it returns, and spares a header map and its value
// slices per message. The zero Builder is ready to use; it is not safe for concurrent use.
//
// A message of the same shape as the one before (the same producer header names, a key
// or none, Nats-Msg-Id or none), as a stream's messages nearly always are, only has its
// values written: the map already holds, under every name, a slice of the storage.
type Builder struct {
	msg  nats.Msg
	vals []string // backing storage of the header values

	// The last message's shape: vals[i] holds the value of the producer header
	// names[i], then come the outbox's own headers.
	shaped         bool // the map holds the shape below, over the current vals
	names          []string
	namesOK        bool // every name in names passes headerNameOK
	keyed, deduped bool
}

// sameShapeMax bounds the producer headers a message may have for its shape to be
// compared with the last one's (name by name).
const sameShapeMax = 8

// Msg returns m as Msg(m, 1) would, with reply as its reply subject and, when dedup is
// set, m.DedupID() as Nats-Msg-Id (winning over a producer header of that name). Its
// error is CheckHeaders's for those headers; the headers are checked as they are set,
// and CheckHeaders runs only for a message that may fail.
func (b *Builder) Msg(m *router.Message, dedup bool, reply string) (*nats.Msg, error) {
	np := len(m.Headers)
	need := np + 5
	if cap(b.vals) < need {
		b.vals, b.shaped = make([]string, need), false // the map's slices are of the old storage
	}
	vals := b.vals[:need]
	h := b.msg.Header
	same := b.shaped && np == len(b.names) && np <= sameShapeMax && (m.Key != nil) == b.keyed && dedup == b.deduped
	ok := true
	if same {
		ok = b.namesOK
		for k, v := range m.Headers {
			j := slices.Index(b.names, k)
			if j < 0 { // a name the last message did not have: build the map afresh
				same = false
				break
			}
			ok = ok && headerValueOK(v)
			vals[j] = v
		}
	}
	if !same {
		if h == nil {
			h = make(nats.Header, need)
			b.msg.Header = h
		} else {
			clear(h)
		}
		b.names, b.namesOK, ok = b.names[:0], true, true
		for k, v := range m.Headers {
			b.namesOK = b.namesOK && headerNameOK(k)
			ok = ok && headerValueOK(v)
			n := len(b.names)
			vals[n] = v
			h[k] = vals[n : n+1 : n+1]
			b.names = append(b.names, k)
		}
		ok = ok && b.namesOK
		b.shaped, b.keyed, b.deduped = true, m.Key != nil, dedup
	}
	n := np
	set := func(name, value string) {
		vals[n] = value
		if !same {
			h[name] = vals[n : n+1 : n+1]
		}
		n++
	}
	set(router.HeaderID, strconv.FormatInt(m.ID, 10))
	ok = ok && headerValueOK(m.Stream)
	set(router.HeaderStream, m.Stream)
	if m.Key != nil {
		key := string(m.Key)
		ok = ok && headerValueOK(key)
		set(router.HeaderKey, key)
	}
	dedupID := m.DedupID()
	ok = ok && headerValueOK(dedupID) // a producer's message_id may be anything
	set(router.HeaderMessageID, dedupID)
	if dedup {
		set(nats.MsgIdHdr, dedupID)
	}
	b.msg.Subject, b.msg.Reply, b.msg.Data = m.Topic, reply, m.Payload
	if !ok {
		// Exact, and slow: a producer header refused above may have been replaced.
		if err := CheckHeaders(h); err != nil {
			return nil, err
		}
	}
	return &b.msg, nil
}

// maxSubjectBytes bounds a subject. The server reads a PUB or HPUB command as one control
// line of at most max_control_line bytes (4096 by default) and closes the connection of a
// client that sends a longer one, so a single message with a long subject would cut the
// connection every stream on the driver shares, again on every attempt. 128 bytes are
// left for the verb, a JetStream reply inbox and the two sizes.
const maxSubjectBytes = 4096 - 128

// CheckSubject returns an error wrapping nats.ErrBadSubject unless subject is a literal
// subject: dot-separated tokens, none empty, none a wildcard ("*" or ">"), no whitespace,
// at most maxSubjectBytes long. The library checks only for whitespace, and the server
// would take a wildcard subject and deliver it to whoever matches, so the driver refuses
// it here.
func CheckSubject(subject string) error {
	if subject == "" {
		return fmt.Errorf("empty subject: %w", nats.ErrBadSubject)
	}
	if len(subject) > maxSubjectBytes {
		return fmt.Errorf("subject %s is %d bytes long; the server closes the connection of a client whose command "+
			"exceeds max_control_line (4096 bytes by default), so at most %d are allowed: %w",
			quoteShort(subject), len(subject), maxSubjectBytes, nats.ErrBadSubject)
	}
	if strings.ContainsAny(subject, " \t\r\n") {
		return fmt.Errorf("subject %s contains whitespace: %w", quoteShort(subject), nats.ErrBadSubject)
	}
	for tok := range strings.SplitSeq(subject, ".") {
		switch tok {
		case "":
			return fmt.Errorf("subject %s has an empty token: %w", quoteShort(subject), nats.ErrBadSubject)
		case "*", ">":
			return fmt.Errorf("subject %s has the wildcard token %q: %w", quoteShort(subject), tok, nats.ErrBadSubject)
		}
	}
	return nil
}

// What the headers the drivers add carry, for errors about them.
var headerOrigin = map[string]string{
	router.HeaderKey:       "the row's key",
	router.HeaderMessageID: "the row's message_id",
	nats.MsgIdHdr:          "the row's message_id",
}

// CheckHeaders returns an error wrapping nats.ErrBadHeaderMsg unless NATS carries every
// header of h unchanged, naming each header it would not. The client refuses a name that
// is not printable ASCII or holds a space or one of "()/,:;<=>?@[\]{} (ADR-4), and it
// rewrites a value silently: CR and LF become spaces and surrounding whitespace is
// trimmed, so a header would arrive other than it was written.
func CheckHeaders(h nats.Header) error {
	ok := true
	for name, values := range h {
		ok = ok && headerNameOK(name)
		for _, v := range values {
			ok = ok && headerValueOK(v)
		}
	}
	if ok {
		return nil
	}
	// The slow path, for a message that fails: every problem, in name order.
	var problems []string
	for _, name := range slices.Sorted(maps.Keys(h)) {
		what := "header " + quoteShort(name)
		if origin, ok := headerOrigin[name]; ok {
			what += ", which carries " + origin + ","
		}
		if !headerNameOK(name) {
			problems = append(problems, what+" has a name NATS refuses (printable ASCII without spaces or any of "+
				"\"()/,:;<=>?@[\\]{}, and not empty)")
			continue
		}
		for _, v := range h[name] {
			switch {
			case strings.ContainsAny(v, "\r\n"):
				problems = append(problems, what+" has a value holding CR or LF, which NATS would replace with spaces")
			case !headerValueOK(v):
				problems = append(problems, what+" has a value beginning or ending with whitespace, which NATS would trim")
			}
		}
	}
	return fmt.Errorf("%s: %w", strings.Join(problems, "; "), nats.ErrBadHeaderMsg)
}

// headerNameOK applies the client's rule for header names (nats.go isHeaderKeyValid).
func headerNameOK(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !headerNameByte[name[i]] {
			return false
		}
	}
	return true
}

// headerNameByte says which bytes a header name may hold: printable ASCII but for the
// space and "()/,:;<=>?@[\]{}.
var headerNameByte = func() (t [256]bool) {
	for c := 33; c <= 126; c++ {
		t[c] = !strings.ContainsRune(`"()/,:;<=>?@[\]{}`, rune(c))
	}
	return t
}()

// headerValueOK reports whether the client sends v as it is: it trims ASCII whitespace
// (textproto.TrimString) and turns CR and LF into spaces.
func headerValueOK(v string) bool {
	if v == "" {
		return true
	}
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }
	return !isSpace(v[0]) && !isSpace(v[len(v)-1]) && strings.IndexByte(v, '\r') < 0 && strings.IndexByte(v, '\n') < 0
}

// quoteShort quotes s for an error, cut to a readable length: the stored error text is
// bounded, and the reason must not be cut off behind a long subject or header name.
func quoteShort(s string) string {
	const limit = 64
	if len(s) <= limit {
		return strconv.Quote(s)
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "…"
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
