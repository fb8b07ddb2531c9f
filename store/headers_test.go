package store

import (
	"context"
	"encoding/json"
	"maps"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
)

func TestHeaderScanReadsEveryObjectAsEncodingJSONDoes(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		byHand     bool // read without encoding/json
	}{
		{"an empty object", `{}`, true},
		{"an empty object with spaces", ` { } `, true},
		{"one pair as PostgreSQL prints it", `{"content-type": "application/json"}`, true},
		{"pairs without spaces", `{"a":"1","b":"2"}`, true},
		{"pairs with every kind of JSON whitespace", "{\n\t\"a\" :\r \"1\" ,\n \"b\":\"\" }\n", true},
		{"an empty key", `{"": "v"}`, true},
		{"a repeated key, the last winning", `{"a": "1", "a": "2"}`, true},
		{"an escaped quote", `{"a": "say \"hi\""}`, false},
		{"an escaped unicode character", `{"a": "\u00e9"}`, false},
		{"a surrogate pair", `{"a": "\ud83d\ude00"}`, false},
		{"UTF-8 text", `{"é": "ü"}`, false},
		{"invalid UTF-8", "{\"a\": \"\xff\"}", false},
		{"null", `null`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var want map[string]string
			if err := json.Unmarshal([]byte(tc.text), &want); err != nil {
				t.Fatalf("encoding/json refuses %q: %v", tc.text, err)
			}
			_, byHand := flatHeaders([]byte(tc.text))
			if byHand != tc.byHand {
				t.Fatalf("read by hand: %v, want %v", byHand, tc.byHand)
			}
			got := map[string]string{"left": "over"}
			if err := (headerScan{&got}).ScanBytes([]byte(tc.text)); err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, want) || (got == nil) != (want == nil) {
				t.Fatalf("read %q as %#v, encoding/json as %#v", tc.text, got, want)
			}
		})
	}
}

func TestHeaderScanRefusesWhatEncodingJSONRefuses(t *testing.T) {
	for _, text := range []string{
		``, `{`, `}`, `{"a"}`, `{"a": }`, `{"a": "1",}`, `{"a": "1"} x`, `{"a": 1}`, `{"a": ["1"]}`,
		`{"a": "1" "b": "2"}`, `{a: "1"}`, `["a"]`, `"a"`,
	} {
		var want map[string]string
		if json.Unmarshal([]byte(text), &want) == nil {
			t.Fatalf("encoding/json takes %q", text)
		}
		if _, ok := flatHeaders([]byte(text)); ok {
			t.Errorf("%q read by hand", text)
		}
		var got map[string]string
		if err := (headerScan{&got}).ScanBytes([]byte(text)); err == nil {
			t.Errorf("%q read as %#v, want an error", text, got)
		}
	}
}

func TestHeaderScanTakesSQLNullAsNoHeaders(t *testing.T) {
	got := map[string]string{"left": "over"}
	if err := (headerScan{&got}).ScanBytes(nil); err != nil || got != nil {
		t.Fatalf("NULL read as %#v, %v", got, err)
	}
}

// FuzzHeaderScan holds the hand-read shape to encoding/json on any text: the same map,
// or an error from both.
func FuzzHeaderScan(f *testing.F) {
	for _, s := range []string{`{}`, `{"a": "b"}`, `{"a":"b","c":"d"}`, `{"a": "\n"}`, `{"a": 1}`, ` {"a" : "b" } `, `{"a": "b",}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		var want map[string]string
		wantErr := json.Unmarshal(text, &want)
		var got map[string]string
		err := (headerScan{&got}).ScanBytes(text)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("%q: error %v, encoding/json's %v", text, err, wantErr)
		}
		if err == nil && (!maps.Equal(got, want) || (got == nil) != (want == nil)) {
			t.Fatalf("%q read as %#v, encoding/json as %#v", text, got, want)
		}
	})
}

func TestClaimReadsEveryHeaderAsTheProducerWroteIt(t *testing.T) {
	t.Parallel()
	pg := testenv.NewPG(t)
	s, err := New(pg.Pool, pg.Table)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	written := []map[string]string{
		{},
		{"content-type": "application/json", "trace": "00-ab-cd-01"},
		{"quote": `say "hi"`},
		{"slash": `a\b`},
		{"line": "1\n2", "tab": "\t"},
		{"é": "ü", "emoji": "😀", "control": "\u0001"},
	}
	for _, h := range written {
		text, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pg.Pool.Exec(ctx, `INSERT INTO `+pg.Table.Qualified()+` (stream, topic, headers, payload) VALUES ('s', 't', $1, 'p')`, string(text)); err != nil {
			t.Fatal(err)
		}
	}
	for _, held := range []bool{false, true} { // the leasing claim, then the held one

		var c Claim
		if held {
			c, err = s.ClaimHeld(ctx, "s", 10, "r", time.Minute, Position{})
		} else {
			c, err = s.Claim(ctx, "s", 10, "r", time.Minute, Position{})
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Messages) != len(written) {
			t.Fatalf("held %v: claimed %d rows, want %d", held, len(c.Messages), len(written))
		}
		for i, m := range c.Messages {
			if !maps.Equal(m.Headers, written[i]) || m.Headers == nil {
				t.Fatalf("held %v: row %d read back with headers %#v, written %#v", held, i, m.Headers, written[i])
			}
		}
		if held {
			s.Rollback(ctx, c.Token)
		} else if _, err := s.Release(ctx, c.Token, c.IDs()); err != nil {
			t.Fatal(err)
		}
	}
}
