package webhook

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/router"
)

// Real errors, produced the way the driver meets them.

// postError is what net/http answers a POST to target with, unwrapped from its
// *url.Error as the driver does.
func postError(t *testing.T, client *http.Client, target string) error {
	t.Helper()
	resp, err := client.Post(target, "text/plain", strings.NewReader("x"))
	if err == nil {
		resp.Body.Close()
		t.Fatalf("POST %s was answered", target)
	}
	return errors.Unwrap(err)
}

func refusedDialError(t *testing.T) error {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return postError(t, http.DefaultClient, "http://"+addr+"/x")
}

func unresolvedHostError(t *testing.T) error {
	t.Helper()
	// .invalid never resolves (RFC 6761).
	return postError(t, http.DefaultClient, "http://outboxd-classify.invalid/x")
}

func untrustedCertificateError(t *testing.T) error {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is the point
	srv.StartTLS()
	defer srv.Close()
	return postError(t, &http.Client{}, srv.URL+"/x")
}

// plainAnswerToTLSError is a TLS client talking to a plain HTTP server.
func plainAnswerToTLSError(t *testing.T) error {
	t.Helper()
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	return postError(t, &http.Client{}, "https://"+strings.TrimPrefix(srv.URL, "http://")+"/x")
}

// answerTimeoutError is a request whose answer did not come within its timeout.
func answerTimeoutError(t *testing.T) error {
	t.Helper()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
	defer srv.Close()
	defer close(release)
	return postError(t, &http.Client{Timeout: 50 * time.Millisecond}, srv.URL+"/x")
}

// cutAfterSendingError is a connection the endpoint closes after reading the request.
func cutAfterSendingError(t *testing.T) error {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer srv.Close()
	return postError(t, &http.Client{}, srv.URL+"/x")
}

func TestClassify(t *testing.T) {
	t.Parallel()
	sent := func(err error) error {
		return &requestError{Method: "POST", URL: "http://e/x", Err: err, Connected: true}
	}
	unsent := func(err error) error { return &requestError{Method: "POST", URL: "http://e/x", Err: err} }
	status := func(code int) error {
		return &StatusError{Method: "POST", URL: "http://e/x", Code: code, Status: http.StatusText(code)}
	}
	cases := []struct {
		name string
		err  error
		want router.Kind
	}{
		{"a refused connection is unreachable", unsent(refusedDialError(t)), router.KindUnreachable},
		{"a refused dial is unreachable even unmarked", refusedDialError(t), router.KindUnreachable},
		{"a host that does not resolve is unreachable", unsent(unresolvedHostError(t)), router.KindUnreachable},
		{"a host that does not resolve is unreachable even unmarked", unresolvedHostError(t), router.KindUnreachable},
		{"a certificate we do not trust is unreachable", unsent(untrustedCertificateError(t)), router.KindUnreachable},
		{"a certificate we do not trust is unreachable even unmarked", untrustedCertificateError(t), router.KindUnreachable},
		{"a plain-text answer to a TLS handshake is unreachable", unsent(plainAnswerToTLSError(t)), router.KindUnreachable},
		{"a connect that timed out is unreachable", &requestError{Err: context.DeadlineExceeded, TimedOut: true}, router.KindUnreachable},
		{"no answer within the timeout after connecting is retryable", sent(answerTimeoutError(t)), router.KindRetryable},
		{"a connection cut after the request was sent is retryable", sent(cutAfterSendingError(t)), router.KindRetryable},
		{"an error we cannot place is retryable", errors.New("something odd"), router.KindRetryable},
		{"400 is permanent", status(400), router.KindPermanent},
		{"401 is permanent", status(401), router.KindPermanent},
		{"403 is permanent", status(403), router.KindPermanent},
		{"404 is permanent", status(404), router.KindPermanent},
		{"413 is permanent", status(413), router.KindPermanent},
		{"422 is permanent", status(422), router.KindPermanent},
		{"408 is retryable", status(408), router.KindRetryable},
		{"429 is retryable", status(429), router.KindRetryable},
		{"500 is retryable", status(500), router.KindRetryable},
		{"502 is retryable", status(502), router.KindRetryable},
		{"503 is retryable", status(503), router.KindRetryable},
		{"504 is retryable", status(504), router.KindRetryable},
		{"a redirect (301) is permanent", status(301), router.KindPermanent},
		{"a redirect (307) is permanent", status(307), router.KindPermanent},
		{"a status HTTP does not define is retryable", status(799), router.KindRetryable},
		{"our cancelled context is canceled", fmt.Errorf("POST x: %w", context.Canceled), router.KindCanceled},
		{"a closed driver is unreachable", fmt.Errorf("http driver %q: %w", "hook", router.ErrClosed), router.KindUnreachable},
		{"an error already classified keeps its kind", router.Unreachable(status(400)), router.KindUnreachable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := classify(c.err)
			t.Logf("%T: %v", c.err, c.err)
			if k := router.KindOf(got); k != c.want {
				t.Fatalf("classify(%v) is %s, want %s", c.err, k, c.want)
			}
			if !strings.Contains(got.Error(), c.err.Error()) {
				t.Fatalf("classify(%v) = %v lost the error's text", c.err, got)
			}
			if !errors.Is(got, c.err) {
				t.Fatalf("classify(%v) = %v lost the error's chain", c.err, got)
			}
		})
	}
	if classify(nil) != nil {
		t.Fatal("classify(nil) is not nil")
	}
}

func TestClassifyPassesOnTheRetryAfterOfARetryableAnswerOnly(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		code int
		want time.Duration
	}{
		{"a 503 asking for 30s carries the hint", 503, 30 * time.Second},
		{"a 429 asking for 30s carries the hint", 429, 30 * time.Second},
		{"a 400 with a Retry-After fails for good, without a hint", 400, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := classify(&StatusError{Code: c.code, Status: http.StatusText(c.code), RetryAfter: 30 * time.Second})
			if h := router.RetryAfterOf(got); h != c.want {
				t.Fatalf("hint %v, want %v", h, c.want)
			}
		})
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name  string
		value string
		want  time.Duration
		ok    bool
	}{
		{"delay-seconds is a wait in seconds", "120", 2 * time.Minute, true},
		{"zero seconds is no wait", "0", 0, true},
		{"surrounding spaces are ignored", " 7 ", 7 * time.Second, true},
		{"an HTTP date is the wait until then", "Sun, 01 Mar 2026 12:00:45 GMT", 45 * time.Second, true},
		{"an RFC 850 date is read too", "Sunday, 01-Mar-26 12:01:00 GMT", time.Minute, true},
		{"an asctime date is read too", "Sun Mar  1 12:00:10 2026", 10 * time.Second, true},
		{"a date in the past is no wait", "Sun, 01 Mar 2026 11:00:00 GMT", 0, true},
		{"a wait above an hour is cut to an hour", "86400", time.Hour, true},
		{"a date days ahead is cut to an hour", "Wed, 04 Mar 2026 12:00:00 GMT", time.Hour, true},
		{"more digits than an integer holds is cut to an hour", "99999999999999999999999", time.Hour, true},
		{"a negative number is not a Retry-After", "-5", 0, false},
		{"a fraction is not a Retry-After", "1.5", 0, false},
		{"words are not a Retry-After", "soon", 0, false},
		{"an empty header is no Retry-After", "", 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, ok := parseRetryAfter(c.value, now)
			if got != c.want || ok != c.ok {
				t.Fatalf("parseRetryAfter(%q) = %v, %v; want %v, %v", c.value, got, ok, c.want, c.ok)
			}
		})
	}
}

func TestBodySnippetCutsAtACharacterAndQuotesControlCharacters(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 150) // 300 bytes
	got := bodySnippet([]byte(long))
	if !strings.HasSuffix(got, "…") || strings.Contains(got, `\x`) || len(got) > bodyQuote+10 {
		t.Fatalf("snippet of a long body: %s", got)
	}
	if got := bodySnippet([]byte("line one\nforged line")); strings.Contains(got, "\n") {
		t.Fatalf("a newline in the body reached the error: %s", got)
	}
}
