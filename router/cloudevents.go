package router

import (
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"
)

// CloudEvents sets a stream to publish each message as a CloudEvents 1.0 event in the
// binary content mode of its driver's protocol binding: the payload is the event's data,
// unchanged, and the attributes travel as headers named by the driver (EventBinding).
// The attributes are computed here, once for every driver:
//
//   - id: Message.DedupID(), the same on every publish of a row, so that consumers
//     de-duplicate on it;
//   - source: the row header ce-source, else Source, else "/outboxd/<stream>";
//   - type: the row header ce-type, else Type; a message with neither fails for good;
//   - specversion: "1.0";
//   - time: the row header ce-time (RFC 3339), else the row's created_at;
//   - datacontenttype: the row header content-type, when there is one;
//   - subject: the row header ce-subject, else the key when SubjectFromKey is set;
//   - any other ce-<name> row header: the extension attribute <name>.
//
// Row headers are matched in any case; a ce-* header that names no valid attribute, or
// one outboxd sets itself (id, specversion), fails the message for good with the reason.
type CloudEvents struct {
	Type           string
	Source         string
	SubjectFromKey bool
}

// EventBinding is implemented by drivers that can carry CloudEvents in binary content
// mode: EventHeader names the message header that carries the context attribute attr
// (a lower-case CloudEvents attribute name, such as "id" or "datacontenttype").
type EventBinding interface {
	EventHeader(attr string) string
}

// CloudEvents attribute names outboxd sets itself, and the specification version.
const (
	ceSpecVersion  = "1.0"
	ceHeaderPrefix = "ce-" // row headers that carry attributes, in any case
	maxAttrName    = 20
)

// eventer turns the messages of one stream into CloudEvents for one binding.
type eventer struct {
	cfg     CloudEvents
	source  string // the default source
	binding EventBinding
	names   map[string]string // attribute → header name, for the attributes of every event
}

func newEventer(stream string, cfg CloudEvents, b EventBinding) *eventer {
	e := &eventer{cfg: cfg, source: cfg.Source, binding: b, names: map[string]string{}}
	if e.source == "" {
		e.source = "/outboxd/" + stream
	}
	for _, a := range []string{"id", "source", "type", "specversion", "time", "datacontenttype", "subject"} {
		e.names[a] = b.EventHeader(a)
	}
	return e
}

// header names the binding's header for attr.
func (e *eventer) header(attr string) string {
	if h, ok := e.names[attr]; ok {
		return h
	}
	return e.binding.EventHeader(attr)
}

// event returns m's headers as they leave in binary content mode: the producer's
// headers but its ce-* and content-type ones, then every attribute under the binding's
// header name. Its error is permanent: the row itself is wrong.
func (e *eventer) event(m *Message) (map[string]string, error) {
	attrs := make(map[string]string, 8)
	out := make(map[string]string, len(m.Headers)+7)
	contentType := ""
	for k, v := range m.Headers {
		switch {
		case len(k) > len(ceHeaderPrefix) && strings.EqualFold(k[:len(ceHeaderPrefix)], ceHeaderPrefix):
			name := strings.ToLower(k[len(ceHeaderPrefix):])
			if why := attrProblem(name); why != "" {
				return nil, Permanent(fmt.Errorf("cloudevents: row header %s: %s", quoteName(k), why))
			}
			if _, dup := attrs[name]; dup {
				return nil, Permanent(fmt.Errorf("cloudevents: attribute %q is set by two row headers differing in case", name))
			}
			attrs[name] = v
		case strings.EqualFold(k, "content-type"):
			contentType = v
		default:
			out[k] = v
		}
	}
	if attrs["type"] == "" {
		if e.cfg.Type == "" {
			return nil, Permanent(fmt.Errorf("cloudevents: message %d has no event type: set the row header ce-type "+
				"or the stream's cloudevents.type", m.ID))
		}
		attrs["type"] = e.cfg.Type
	}
	if attrs["source"] == "" {
		attrs["source"] = e.source
	}
	if err := checkAttrs(attrs); err != nil {
		return nil, err
	}
	attrs["id"] = m.DedupID()
	attrs["specversion"] = ceSpecVersion
	if _, ok := attrs["time"]; !ok && !m.CreatedAt.IsZero() {
		attrs["time"] = m.CreatedAt.UTC().Format(time.RFC3339Nano)
	}
	if _, ok := attrs["subject"]; !ok && e.cfg.SubjectFromKey && len(m.Key) > 0 && utf8.Valid(m.Key) {
		attrs["subject"] = string(m.Key)
	}
	if contentType != "" {
		attrs["datacontenttype"] = contentType
	}
	for a, v := range attrs {
		out[e.header(a)] = v
	}
	return out, nil
}

// attrProblem says why a row header ce-<name> cannot set the attribute name, or "".
func attrProblem(name string) string {
	switch name {
	case "id":
		return "the event id is the message's de-duplication id (set message_id to choose it)"
	case "specversion":
		return "outboxd sets specversion (1.0)"
	case "datacontenttype":
		return "set the content-type header for datacontenttype"
	case "data":
		return "data is the payload, not an attribute"
	}
	if len(name) > maxAttrName {
		return fmt.Sprintf("attribute names are at most %d characters", maxAttrName)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return "attribute names hold only the letters a-z and digits 0-9"
		}
	}
	return ""
}

// checkAttrs applies the specification's rules to the attributes a row may set.
func checkAttrs(attrs map[string]string) error {
	bad := func(attr, why string) error {
		return Permanent(fmt.Errorf("cloudevents: attribute %s %s", attr, why))
	}
	if _, err := url.Parse(attrs["source"]); err != nil || strings.ContainsAny(attrs["source"], " \t\r\n") {
		return bad("source", "must be a URI-reference (no spaces), got "+quoteName(attrs["source"]))
	}
	if s, ok := attrs["dataschema"]; ok {
		if u, err := url.Parse(s); err != nil || !u.IsAbs() {
			return bad("dataschema", "must be an absolute URI")
		}
	}
	if t, ok := attrs["time"]; ok {
		if _, err := time.Parse(time.RFC3339Nano, t); err != nil {
			return bad("time", "must be an RFC 3339 timestamp, got "+quoteName(t))
		}
	}
	for a, v := range attrs {
		if v == "" {
			return bad(a, "is empty")
		}
	}
	return nil
}

// quoteName quotes a header name or value for an error, cut to a readable length.
func quoteName(s string) string {
	if len(s) > 64 {
		cut := 64
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return fmt.Sprintf("%q…", s[:cut])
	}
	return fmt.Sprintf("%q", s)
}
