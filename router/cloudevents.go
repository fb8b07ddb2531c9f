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
	// The binding's header names of the attributes every event may have, looked up once.
	id, sourceH, typeH, spec, timeH, contentType, subject string
}

func newEventer(stream string, cfg CloudEvents, b EventBinding) *eventer {
	e := &eventer{cfg: cfg, source: cfg.Source, binding: b,
		id: b.EventHeader("id"), sourceH: b.EventHeader("source"), typeH: b.EventHeader("type"),
		spec: b.EventHeader("specversion"), timeH: b.EventHeader("time"),
		contentType: b.EventHeader("datacontenttype"), subject: b.EventHeader("subject")}
	if e.source == "" {
		e.source = "/outboxd/" + stream
	}
	return e
}

// event returns m's headers as they leave in binary content mode: the producer's
// headers but its ce-* and content-type ones, then every attribute under the binding's
// header name. Its error is permanent: the row itself is wrong.
func (e *eventer) event(m *Message) (map[string]string, error) {
	out := make(map[string]string, len(m.Headers)+7)
	var typ, source, subject, tm, contentType string
	var seen []string // the attributes rows set, to find one set twice (rare: only then allocated)
	for k, v := range m.Headers {
		if len(k) <= len(ceHeaderPrefix) || !strings.EqualFold(k[:len(ceHeaderPrefix)], ceHeaderPrefix) {
			if strings.EqualFold(k, "content-type") {
				contentType = v
			} else {
				out[k] = v
			}
			continue
		}
		name := k[len(ceHeaderPrefix):]
		if !isLower(name) {
			name = strings.ToLower(name)
		}
		if why := attrProblem(name); why != "" {
			return nil, Permanent(fmt.Errorf("cloudevents: row header %s: %s", quoteName(k), why))
		}
		if v == "" {
			return nil, Permanent(fmt.Errorf("cloudevents: row header %s is empty", quoteName(k)))
		}
		for _, s := range seen {
			if s == name {
				return nil, Permanent(fmt.Errorf("cloudevents: attribute %q is set by two row headers differing in case", name))
			}
		}
		seen = append(seen, name)
		switch name {
		case "type":
			typ = v
		case "source":
			if _, err := url.Parse(v); err != nil || strings.ContainsAny(v, " \t\r\n") {
				return nil, Permanent(fmt.Errorf("cloudevents: attribute source must be a URI-reference (no spaces), got %s", quoteName(v)))
			}
			source = v
		case "subject":
			subject = v
		case "time":
			if _, err := time.Parse(time.RFC3339Nano, v); err != nil {
				return nil, Permanent(fmt.Errorf("cloudevents: attribute time must be an RFC 3339 timestamp, got %s", quoteName(v)))
			}
			tm = v
		case "dataschema":
			if u, err := url.Parse(v); err != nil || !u.IsAbs() {
				return nil, Permanent(fmt.Errorf("cloudevents: attribute dataschema must be an absolute URI, got %s", quoteName(v)))
			}
			out[e.binding.EventHeader(name)] = v
		default:
			out[e.binding.EventHeader(name)] = v
		}
	}
	if typ == "" {
		if e.cfg.Type == "" {
			return nil, Permanent(fmt.Errorf("cloudevents: message %d has no event type: set the row header ce-type "+
				"or the stream's cloudevents.type", m.ID))
		}
		typ = e.cfg.Type
	}
	if source == "" {
		source = e.source
	}
	if tm == "" && !m.CreatedAt.IsZero() {
		tm = m.CreatedAt.UTC().Format(time.RFC3339Nano)
	}
	if subject == "" && e.cfg.SubjectFromKey && len(m.Key) > 0 && utf8.Valid(m.Key) {
		subject = string(m.Key)
	}
	out[e.id] = m.DedupID()
	out[e.sourceH] = source
	out[e.typeH] = typ
	out[e.spec] = ceSpecVersion
	if tm != "" {
		out[e.timeH] = tm
	}
	if subject != "" {
		out[e.subject] = subject
	}
	if contentType != "" {
		out[e.contentType] = contentType
	}
	return out, nil
}

// isLower reports whether s holds no upper-case ASCII letter.
func isLower(s string) bool {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return false
		}
	}
	return true
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
