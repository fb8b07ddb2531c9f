package postgres

import (
	"encoding/json"
	"testing"

	"github.com/outboxd/outboxd/router"
)

// FuzzHeadersAreJSONThatDecodesToThem holds appendHeaders to encoding/json: for any
// header the driver sends (Check refuses NUL bytes and invalid UTF-8), the object it
// writes decodes to the producer's headers plus the outbox ones.
func FuzzHeadersAreJSONThatDecodesToThem(f *testing.F) {
	f.Add("content-type", "application/json", "orders", "id-1")
	f.Add("quote\"back\\slash", "tab\tnewline\n\x1f\x7f é 🙂", "s", "\u2028")
	f.Add("", "", "", "")
	f.Fuzz(func(t *testing.T, name, value, stream, id string) {
		m := router.Message{ID: 42, Stream: stream, Topic: "t", Headers: map[string]string{name: value}, MessageID: id}
		if badText(name) != "" || badText(value) != "" || badText(stream) != "" || badText(m.DedupID()) != "" {
			t.Skip("Check refuses it")
		}
		var got map[string]string
		raw := appendHeaders(nil, &m)
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatalf("appendHeaders wrote %q, not JSON: %v", raw, err)
		}
		want := map[string]string{router.HeaderID: "42", router.HeaderStream: stream, router.HeaderMessageID: m.DedupID()}
		if !replaced(name) {
			want[name] = value
		}
		if len(got) != len(want) {
			t.Fatalf("decoded %q, want %q", got, want)
		}
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("decoded %q, want %q", got, want)
			}
		}
	})
}
