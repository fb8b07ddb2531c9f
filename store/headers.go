package store

// Reading a claimed row's headers.
//
// Invariant: headerScan gives the same map encoding/json gives for the same text. It
// reads by hand only the shape PostgreSQL prints for nearly every row: one flat object
// whose keys and values are printable ASCII without escapes; anything else, and any
// text it does not recognise, goes to encoding/json.

import (
	"encoding/json"
	"fmt"
)

// headerScan scans a jsonb column (the table's CHECK holds it to an object of strings)
// into *m, a nil map for SQL NULL. It is a pgtype.BytesScanner: pgx hands it the text
// of the value in the connection's buffer, valid only during the call.
//
// encoding/json spends six allocations on a small object (its decoder state, the map,
// each string); the hand-read shape costs two, the map and one string that every key
// and value is cut from. A claim reads one such object a message (docs/benchmarks.md).
type headerScan struct{ m *map[string]string }

// ScanBytes implements pgtype.BytesScanner.
func (h headerScan) ScanBytes(src []byte) error {
	if src == nil {
		*h.m = nil
		return nil
	}
	if m, ok := flatHeaders(src); ok {
		*h.m = m
		return nil
	}
	var m map[string]string
	if err := json.Unmarshal(src, &m); err != nil {
		return fmt.Errorf("headers: %w", err)
	}
	*h.m = m
	return nil
}

// flatHeaders reads src when it is a JSON object of plain strings: printable ASCII,
// no backslash, with JSON's whitespace around the tokens. ok is false for anything
// else, which encoding/json then reads (or refuses). Every key and value is cut from
// one copy of src, made before reading: text of another shape wastes it.
func flatHeaders(src []byte) (m map[string]string, ok bool) {
	i := skipSpace(src, 0)
	if i == len(src) || src[i] != '{' {
		return nil, false
	}
	text := string(src)
	m = map[string]string{}
	if i = skipSpace(src, i+1); i < len(src) && src[i] == '}' {
		return m, skipSpace(src, i+1) == len(src)
	}
	for {
		keyStart := i
		keyEnd, ok := plainString(src, keyStart)
		if !ok {
			return nil, false
		}
		if i = skipSpace(src, keyEnd); i == len(src) || src[i] != ':' {
			return nil, false
		}
		valueStart := skipSpace(src, i+1)
		valueEnd, ok := plainString(src, valueStart)
		if !ok {
			return nil, false
		}
		m[text[keyStart+1:keyEnd-1]] = text[valueStart+1 : valueEnd-1]
		if i = skipSpace(src, valueEnd); i == len(src) {
			return nil, false
		}
		switch src[i] {
		case '}':
			return m, skipSpace(src, i+1) == len(src)
		case ',':
			i = skipSpace(src, i+1)
		default:
			return nil, false
		}
	}
}

// plainString returns the offset just past the JSON string starting at src[i] when it
// holds only printable ASCII other than the backslash.
func plainString(src []byte, i int) (end int, ok bool) {
	if i >= len(src) || src[i] != '"' {
		return 0, false
	}
	for j := i + 1; j < len(src); j++ {
		switch c := src[j]; {
		case c == '"':
			return j + 1, true
		case c < 0x20 || c > 0x7e || c == '\\':
			return 0, false
		}
	}
	return 0, false
}

// skipSpace returns the offset of the first byte at or after i that is not JSON
// whitespace.
func skipSpace(src []byte, i int) int {
	for i < len(src) && (src[i] == ' ' || src[i] == '\t' || src[i] == '\n' || src[i] == '\r') {
		i++
	}
	return i
}
