package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/driveropt"
)

// maxRetryAfter bounds the wait an endpoint may ask for: a Retry-After of a day,
// mistaken or not, should not park a message that long.
const maxRetryAfter = time.Hour

// bodyQuote bounds how much of an error answer's body goes into the error (and so into
// the row's last_error).
const bodyQuote = 200

// StatusError is an answer other than 2xx.
type StatusError struct {
	Method, URL string // the URL as shown: credentials redacted, no query
	Code        int
	Status      string        // "400 Bad Request"
	Body        string        // the start of the answer's body
	Location    string        // a redirect's target, as shown
	RetryAfter  time.Duration // the answer's Retry-After, bounded; 0 for none
	Messages    int           // messages in the request when it was a batch; 0 otherwise
}

func (e *StatusError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", e.Method, e.URL)
	if e.Messages > 0 {
		fmt.Fprintf(&b, " (a batch of %d)", e.Messages)
	}
	fmt.Fprintf(&b, ": the endpoint answered %s", e.Status)
	if e.Code >= 300 && e.Code < 400 {
		where := ""
		if e.Location != "" {
			where = " to " + e.Location
		}
		fmt.Fprintf(&b, ", a redirect%s; redirects are not followed, so set the url to where the endpoint is", where)
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, ", retry after %s", driveropt.FormatDuration(e.RetryAfter))
	}
	if e.Body != "" {
		fmt.Fprintf(&b, ": %s", e.Body)
	}
	return b.String()
}

// requestError is a request that got no answer.
type requestError struct {
	Method, URL string
	Err         error
	// Connected says a connection (TLS included) was established for the request, so
	// the endpoint may have received it.
	Connected bool
	// TimedOut says the request's own timeout ended it.
	TimedOut bool
	Timeout  time.Duration
}

func (e *requestError) Error() string {
	switch {
	case e.TimedOut && e.Connected:
		return fmt.Sprintf("%s %s: no answer within %s: %v", e.Method, e.URL, driveropt.FormatDuration(e.Timeout), e.Err)
	case e.TimedOut:
		return fmt.Sprintf("%s %s: could not connect within %s: %v", e.Method, e.URL, driveropt.FormatDuration(e.Timeout), e.Err)
	}
	return fmt.Sprintf("%s %s: %v", e.Method, e.URL, e.Err)
}

func (e *requestError) Unwrap() error { return e.Err }

// classify gives an error its router kind, keeping its text and chain, and a
// Retry-After hint when the endpoint sent one. An error already classified keeps its
// kind.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var done *router.Error
	if errors.As(err, &done) {
		return err
	}
	out := &router.Error{Kind: kindOf(err), Err: err}
	var status *StatusError
	if errors.As(err, &status) && out.Kind == router.KindRetryable {
		out.RetryAfter = status.RetryAfter
	}
	return out
}

func kindOf(err error) router.Kind {
	if errors.Is(err, context.Canceled) {
		return router.KindCanceled
	}
	if errors.Is(err, router.ErrClosed) {
		return router.KindUnreachable
	}
	var status *StatusError
	if errors.As(err, &status) {
		return statusKind(status.Code)
	}
	var req *requestError
	if errors.As(err, &req) && !req.Connected || neverConnected(err) {
		// No connection, so nothing was sent: refused, not resolved, a handshake that
		// failed, or a connect that timed out.
		return router.KindUnreachable
	}
	// The request may have reached the endpoint (a timeout waiting for the answer, a
	// connection reset after sending): retry, spending an attempt.
	return router.KindRetryable
}

// statusKind classifies an answer's status code.
func statusKind(code int) router.Kind {
	switch {
	case code == http.StatusRequestTimeout, code == http.StatusTooManyRequests, code >= 500 && code < 600:
		return router.KindRetryable
	case code >= 300 && code < 500:
		// A redirect is not followed (its target is the operator's to configure), and
		// any other 4xx says the endpoint will not take this request as it is.
		return router.KindPermanent
	}
	return router.KindRetryable // a code HTTP does not define
}

// refusedBatch reports an answer that refuses a batch for its content: a permanent 4xx,
// which one of its messages may have caused alone.
func refusedBatch(err error) bool {
	var status *StatusError
	return errors.As(err, &status) && status.Code >= 400 && status.Code < 500 && statusKind(status.Code) == router.KindPermanent
}

// neverConnected reports an error that means no connection was made: the address was
// refused or did not resolve, or the TLS handshake failed.
func neverConnected(err error) bool { return driveropt.NeverConnected(err) }

// parseRetryAfter reads a Retry-After value, delay-seconds or an HTTP date, as the wait
// from now, at most maxRetryAfter; ok is false for a value that is neither.
func parseRetryAfter(v string, now time.Time) (wait time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if strings.Trim(v, "0123456789") == "" {
		secs, err := strconv.ParseInt(v, 10, 64)
		if err != nil || secs > int64(maxRetryAfter/time.Second) {
			return maxRetryAfter, true // digits too many to parse are a long wait
		}
		return time.Duration(secs) * time.Second, true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return min(max(at.Sub(now), 0), maxRetryAfter), true
}

// bodySnippet renders the start of an answer's body for an error: at most bodyQuote
// bytes, cut at a character, quoted so that control characters cannot forge lines.
func bodySnippet(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	cut := len(b) > bodyQuote
	if cut {
		n := bodyQuote
		for n > 0 && !utf8.RuneStart(b[n]) {
			n--
		}
		b = b[:n]
	}
	s := strconv.Quote(string(b))
	if cut {
		s += "…"
	}
	return s
}
