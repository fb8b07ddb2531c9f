package webhook_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/router/webhook"
)

// The receiver's side, exactly as docs/configuration.md shows it (a test holds the two
// together). It shares nothing with the driver's code.

// docs:begin
// verifySignature checks the Outbox-Signature header of a request against its raw body:
// the signature must be the HMAC-SHA256, keyed with the shared secret, of the header's
// timestamp, a dot and the body, and the timestamp at most maxAge from now.
func verifySignature(secret, header string, body []byte, now time.Time, maxAge time.Duration) error {
	var ts, sig string
	for _, part := range strings.Split(header, ",") {
		name, value, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch name {
		case "t":
			ts = value
		case "v1":
			sig = value
		}
	}
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || sig == "" {
		return errors.New("malformed signature header")
	}
	if age := now.Sub(time.Unix(unix, 0)); age > maxAge || age < -maxAge {
		return errors.New("signature too old, or from the future")
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	want := hex.EncodeToString(mac.Sum(nil))
	if !hmac.Equal([]byte(sig), []byte(want)) {
		return errors.New("signature does not match")
	}
	return nil
}

// docs:end

const secret = "whsec-0123456789abcdef"

func TestEveryRequestIsSignedSoThatTheDocumentedVerifierAcceptsItAndOnlyIt(t *testing.T) {
	t.Parallel()
	for _, batch := range []bool{false, true} {
		t.Run("batch="+strconv.FormatBool(batch), func(t *testing.T) {
			t.Parallel()
			s := newSink(t, batch)
			o := options(s.url(), batch)
			o.SigningSecret = secret
			d := newDriver(t, o)
			requireNoErrors(t, d.Publish(testCtx(t), messages("orders", 6, 2)))
			reqs := s.received()
			if len(reqs) == 0 {
				t.Fatal("nothing arrived")
			}
			now := time.Now()
			for i, r := range reqs {
				header := r.header.Get(webhook.DefaultSignatureHeader)
				if err := verifySignature(secret, header, r.body, now, 5*time.Minute); err != nil {
					t.Fatalf("request %d (%s): %v", i, header, err)
				}
				tampered := append([]byte("x"), r.body...)
				if verifySignature(secret, header, tampered, now, 5*time.Minute) == nil {
					t.Fatalf("request %d: a changed body passed", i)
				}
				if verifySignature("another-secret-of-16", header, r.body, now, 5*time.Minute) == nil {
					t.Fatalf("request %d: another secret passed", i)
				}
				if verifySignature(secret, header, r.body, now.Add(time.Hour), 5*time.Minute) == nil {
					t.Fatalf("request %d: an hour-old signature passed", i)
				}
			}
		})
	}
}

func TestTheSignatureIsTheDocumentedHMACOfTheTimeAndTheBody(t *testing.T) {
	t.Parallel()
	s := newSink(t, false)
	o := options(s.url(), false)
	o.SigningSecret, o.SignatureHeader = secret, "X-Hook-Signature"
	d := newDriver(t, o)
	webhook.SetNow(d, func() time.Time { return time.Unix(1767225600, 0) })
	msgs := messages("orders", 1, 1)
	msgs[0].Payload = []byte(`{"id":1}`)
	requireNoErrors(t, d.Publish(testCtx(t), msgs))
	// Computed apart from both the driver and the verifier:
	// printf '1767225600.{"id":1}' | openssl dgst -sha256 -hmac whsec-0123456789abcdef
	const want = "t=1767225600,v1=5d36b70a9805c35aaa746342849ef8944bea934acdf9ba5db638b4fbc1bf5da5"
	if got := s.received()[0].header.Get("X-Hook-Signature"); got != want {
		t.Fatalf("signature %s, want %s", got, want)
	}
}

func TestTheDocsShowTheTestedVerifier(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("sign_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, code, _ := strings.Cut(string(src), "// docs:begin\n")
	code, _, _ = strings.Cut(code, "\n// docs:end")
	docs, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(docs), "```go\n"+strings.TrimSpace(code)+"\n```") {
		t.Fatalf("docs/configuration.md does not show verifySignature as sign_test.go has it; copy it:\n%s", code)
	}
}
