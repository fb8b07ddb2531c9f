package jetstream

import (
	"errors"
	"reflect"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

func TestParsePubAck(t *testing.T) {
	t.Parallel()
	invalid := jetstream.ErrInvalidJSAck
	cases := []struct {
		name    string
		data    string
		dup     bool
		err     error
		scanned bool // read by the scan, without encoding/json
	}{
		{"The server's usual answer is a success.", `{"stream":"ORDERS","seq":42}`, false, nil, true},
		{"An answer with a domain is a success.", `{"stream":"ORDERS","domain":"hub","seq":7}`, false, nil, true},
		{"A duplicate is a success marked duplicate.", `{"stream":"ORDERS","seq":42,"duplicate":true}`, true, nil, true},
		{"Whitespace anywhere is allowed.", " {\n\"stream\" : \"S\" ,\t\"seq\":1 } \r\n", false, nil, true},
		{"A batch acknowledgement's fields are read.", `{"stream":"S","seq":9,"batch":"b1","count":3}`, false, nil, true},
		{"An answer without a stream is invalid.", `{"seq":1}`, false, invalid, true},
		{"An empty stream name is invalid.", `{"stream":"","seq":1}`, false, invalid, true},
		{"An empty object is invalid.", `{}`, false, invalid, true},
		{"An error object is the server's API error.", `{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"},"stream":"S","seq":0}`,
			false, &jetstream.APIError{Code: 503, ErrorCode: 10077, Description: "maximum messages exceeded"}, false},
		{"A null error with a stream is a success.", `{"error":null,"stream":"S","seq":1}`, false, nil, false},
		{"A stream name with an escape is read by encoding/json.", `{"stream":"A\u0042","seq":1}`, false, nil, false},
		{"A key in another case matches as encoding/json matches it.", `{"Stream":"S","SEQ":1}`, false, nil, false},
		{"A fractional sequence is invalid.", `{"stream":"S","seq":1.5}`, false, invalid, false},
		{"A negative sequence is invalid.", `{"stream":"S","seq":-1}`, false, invalid, false},
		{"A duplicate flag that is not a boolean is invalid.", `{"stream":"S","seq":1,"duplicate":"yes"}`, false, invalid, false},
		{"The last of two stream keys counts.", `{"stream":"S","stream":"","seq":1}`, false, invalid, true},
		{"Text after the object is invalid.", `{"stream":"S","seq":1} x`, false, invalid, false},
		{"An empty answer is invalid.", ``, false, invalid, false},
		{"Text that is not JSON is invalid.", `stream S seq 1`, false, invalid, false},
		{"A truncated answer is invalid.", `{"stream":"S","se`, false, invalid, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := parsePubAck([]byte(c.data))
			if got.duplicate != c.dup {
				t.Errorf("duplicate = %v, want %v", got.duplicate, c.dup)
			}
			var apiErr *jetstream.APIError
			switch {
			case errors.As(c.err, &apiErr):
				if !reflect.DeepEqual(got.err, c.err) {
					t.Errorf("err = %#v, want %#v", got.err, c.err)
				}
			case !errors.Is(got.err, c.err) || (c.err == nil) != (got.err == nil):
				t.Errorf("err = %v, want %v", got.err, c.err)
			}
			if _, scanned := scanPubAck([]byte(c.data)); scanned != c.scanned {
				t.Errorf("scanned = %v, want %v", scanned, c.scanned)
			}
		})
	}
}

// FuzzParsePubAck holds the scan to encoding/json: whenever the scan reads an answer,
// the library's way of decoding it reaches the same decision.
func FuzzParsePubAck(f *testing.F) {
	for _, s := range []string{
		`{"stream":"ORDERS","seq":42}`,
		`{"stream":"ORDERS","domain":"hub","seq":7,"duplicate":true}`,
		`{"stream":"S","seq":9,"batch":"b1","count":3,"val":"1"}`,
		`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 3"},"stream":"S","seq":0}`,
		`{"seq":00,"stream":"x"}`, `{"type":"io.nats.jetstream.api.v1.pub_ack","stream":"S"}`, `{}`, ` `, `{"stream":"S",}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		scanned, ok := scanPubAck(data)
		if !ok {
			return
		}
		decoded := decodePubAck(data)
		if scanned.duplicate != decoded.duplicate || !errors.Is(decoded.err, scanned.err) || (scanned.err == nil) != (decoded.err == nil) {
			t.Fatalf("%q: scan gives %+v, encoding/json %+v", data, scanned, decoded)
		}
	})
}

func BenchmarkParsePubAck(b *testing.B) {
	data := []byte(`{"stream":"OUTBOXD_BENCH","seq":1234567}`)
	b.Run("scan", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if a := parsePubAck(data); a.err != nil {
				b.Fatal(a.err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if a := decodePubAck(data); a.err != nil {
				b.Fatal(a.err)
			}
		}
	})
}
