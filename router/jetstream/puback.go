package jetstream

import (
	"encoding/json"

	"github.com/nats-io/nats.go/jetstream"
)

// pubAck is what the driver needs from a PubAck: whether the server stored the message
// (err nil) and whether it had already stored it under the same Nats-Msg-Id.
type pubAck struct {
	duplicate bool
	err       error
}

// parsePubAck reads the server's answer to one publish: {"stream":"S","seq":N} with,
// sometimes, "domain", "duplicate":true and other fields, or {"error":{...}}. Its
// decisions are the client library's (jetstream.PublishMsgAsync): an "error" object is
// that *jetstream.APIError; no error and an empty or absent "stream" is
// jetstream.ErrInvalidJSAck, and so is anything that is not JSON.
//
// Almost every answer is the first form, which a scan reads without allocating. An
// answer the scan is not sure of (an error, an escape, a nested value, a number it does
// not take, a key differing only in case, which encoding/json would match) is decoded
// by encoding/json instead, so the two ways never disagree (FuzzParsePubAck).
func parsePubAck(data []byte) pubAck {
	if a, ok := scanPubAck(data); ok {
		return a
	}
	return decodePubAck(data)
}

// decodePubAck decodes data with encoding/json, the way the client library does.
func decodePubAck(data []byte) pubAck {
	var resp struct {
		Error     *jetstream.APIError `json:"error"`
		Stream    string              `json:"stream"`
		Duplicate bool                `json:"duplicate"`
		// Every other field the library's PubAck has, so that a value of the wrong type
		// fails here as it does there.
		Type     string `json:"type"`
		Sequence uint64 `json:"seq"`
		Domain   string `json:"domain"`
		Value    string `json:"val"`
	}
	if err := json.Unmarshal(data, &resp); err != nil {
		return pubAck{err: jetstream.ErrInvalidJSAck}
	}
	if resp.Error != nil {
		return pubAck{err: resp.Error}
	}
	if resp.Stream == "" {
		return pubAck{err: jetstream.ErrInvalidJSAck}
	}
	return pubAck{duplicate: resp.Duplicate}
}

// scanPubAck reads a flat JSON object whose strings hold no escape and whose numbers are
// unsigned integers. ok is false for anything else, and for an "error" key.
func scanPubAck(data []byte) (a pubAck, ok bool) {
	s := ackScanner{b: data}
	if !s.skipSpace() || s.b[s.i] != '{' {
		return a, false
	}
	s.i++
	stream := false
	for first := true; ; first = false {
		if !s.skipSpace() {
			return a, false
		}
		if s.b[s.i] == '}' && first {
			s.i++
			break
		}
		key, ok := s.str()
		if !ok || !s.skipSpace() || s.b[s.i] != ':' {
			return a, false
		}
		s.i++
		if !s.skipSpace() {
			return a, false
		}
		switch string(key) {
		case "stream":
			v, ok := s.str()
			if !ok {
				return a, false
			}
			stream = len(v) > 0
		case "duplicate":
			v, ok := s.boolean()
			if !ok {
				return a, false
			}
			a.duplicate = v
		case "seq":
			if !s.uint() {
				return a, false
			}
		case "domain", "val", "type", "batch":
			if _, ok := s.str(); !ok {
				return a, false
			}
		case "count":
			if !s.uint() {
				return a, false
			}
		default:
			// "error", and any key encoding/json might match to a field whatever its case.
			return a, false
		}
		if !s.skipSpace() {
			return a, false
		}
		if c := s.b[s.i]; c == ',' {
			s.i++
			continue
		} else if c != '}' {
			return a, false
		}
		s.i++
		break
	}
	if s.skipSpace() { // something after the object
		return a, false
	}
	if !stream {
		a.err = jetstream.ErrInvalidJSAck
	}
	return a, true
}

// ackScanner walks a PubAck; i is the next byte.
type ackScanner struct {
	b []byte
	i int
}

// skipSpace skips JSON whitespace and says whether a byte is left.
func (s *ackScanner) skipSpace() bool {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return true
		}
	}
	return false
}

// str reads a string holding no escape, no control character and only ASCII, whose
// bytes are then the string encoding/json would decode.
func (s *ackScanner) str() ([]byte, bool) {
	if s.b[s.i] != '"' {
		return nil, false
	}
	start := s.i + 1
	for j := start; j < len(s.b); j++ {
		switch c := s.b[j]; {
		case c == '"':
			s.i = j + 1
			return s.b[start:j], true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return nil, false
		}
	}
	return nil, false
}

// boolean reads true or false.
func (s *ackScanner) boolean() (bool, bool) {
	rest := s.b[s.i:]
	switch {
	case len(rest) >= 4 && string(rest[:4]) == "true":
		s.i += 4
		return true, true
	case len(rest) >= 5 && string(rest[:5]) == "false":
		s.i += 5
		return false, true
	}
	return false, false
}

// uint reads an unsigned integer in JSON's form (no leading zero) of at most 19 digits,
// so that it fits a uint64 as encoding/json requires.
func (s *ackScanner) uint() bool {
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	n := s.i - start
	return n >= 1 && n <= 19 && (n == 1 || s.b[start] != '0')
}
