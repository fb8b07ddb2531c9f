package webhook_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/webhook"
)

func TestEveryAnswerIsClassifiedWithItsStatusBodyAndRetryAfter(t *testing.T) {
	t.Parallel()
	past := time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat)
	cases := []struct {
		name       string
		code       int
		retryAfter string
		location   string
		body       string
		want       router.Kind
		hint       time.Duration // at least
		text       []string      // in the error
	}{
		{"200 confirms", 200, "", "", "", -1, 0, nil},
		{"202 confirms", 202, "", "", "", -1, 0, nil},
		{"204 confirms", 204, "", "", "", -1, 0, nil},
		{"400 fails for good with the status and the body", 400, "", "", `{"error":"schema"}`, router.KindPermanent, 0,
			[]string{"400 Bad Request", `{\"error\":\"schema\"}`}},
		{"404 fails for good", 404, "", "", "no route", router.KindPermanent, 0, []string{"404 Not Found", "no route"}},
		{"422 fails for good with only the start of a long body", 422, "", "", strings.Repeat("x", 5000), router.KindPermanent, 0,
			[]string{"422 Unprocessable Entity", strings.Repeat("x", 200) + `"…`}},
		{"a 4xx with a Retry-After still fails for good", 403, "30", "", "", router.KindPermanent, 0, []string{"403 Forbidden"}},
		{"408 is retried", 408, "", "", "", router.KindRetryable, 0, []string{"408 Request Timeout"}},
		{"429 is retried after its Retry-After in seconds", 429, "3", "", "slow down", router.KindRetryable, 3 * time.Second,
			[]string{"429 Too Many Requests", "retry after 3s", "slow down"}},
		{"503 is retried after its Retry-After as a date", 503, time.Now().Add(time.Minute).UTC().Format(http.TimeFormat), "", "",
			router.KindRetryable, 50 * time.Second, []string{"503 Service Unavailable", "retry after"}},
		{"503 with a Retry-After in the past is retried without a hint", 503, past, "", "", router.KindRetryable, 0, nil},
		{"503 with an unreadable Retry-After is retried without a hint", 503, "later", "", "", router.KindRetryable, 0, nil},
		{"500 is retried", 500, "", "", "", router.KindRetryable, 0, []string{"500 Internal Server Error"}},
		{"a redirect is not followed and fails for good, naming its target without credentials or query", 301, "",
			"https://user:hunter22@elsewhere.example/hooks?key=sesame", "", router.KindPermanent, 0,
			[]string{"301 Moved Permanently", "redirects are not followed", "elsewhere.example/hooks?…"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newSink(t, false)
			s.setAnswer(func(w http.ResponseWriter, r *http.Request) bool {
				if c.retryAfter != "" {
					w.Header().Set("Retry-After", c.retryAfter)
				}
				if c.location != "" {
					w.Header().Set("Location", c.location)
				}
				w.WriteHeader(c.code)
				_, _ = w.Write([]byte(c.body))
				return true
			})
			d := newDriver(t, options(s.url(), false))
			err := d.Publish(testCtx(t), messages("orders", 1, 1))[0]
			if c.want < 0 {
				if err != nil {
					t.Fatalf("%d was not a confirmation: %v", c.code, err)
				}
				return
			}
			if k := router.KindOf(err); k != c.want {
				t.Fatalf("%d: %s (%v), want %s", c.code, k, err, c.want)
			}
			hint := router.RetryAfterOf(err)
			if hint < c.hint || (c.hint == 0 && hint != 0) || hint > time.Hour {
				t.Fatalf("Retry-After %q gave the hint %v, want at least %v", c.retryAfter, hint, c.hint)
			}
			for _, want := range c.text {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("the error %q does not say %q", err, want)
				}
			}
			if strings.Contains(err.Error(), "hunter22") || strings.Contains(err.Error(), "sesame") {
				t.Fatalf("the error quotes a credential: %v", err)
			}
			if n := len(s.received()); n != 1 {
				t.Fatalf("%d requests for one message; a redirect or refusal must not be repeated", n)
			}
		})
	}
}

func TestNoAnswerWithinTheTimeoutIsRetryableAndReportedInTime(t *testing.T) {
	t.Parallel()
	s := newSink(t, false)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	s.setAnswer(func(w http.ResponseWriter, r *http.Request) bool {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		return true
	})
	o := options(s.url(), false)
	o.Timeout = 200 * time.Millisecond
	d := newDriver(t, o)
	start := time.Now()
	err := d.Publish(testCtx(t), messages("orders", 1, 1))[0]
	if router.KindOf(err) != router.KindRetryable || !strings.Contains(err.Error(), "no answer within 200ms") {
		t.Fatalf("a request the endpoint sat on: %v (%s), want retryable saying so", err, router.KindOf(err))
	}
	if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Fatalf("the timeout of 200ms took %v to report", elapsed)
	}
}

func TestTheCallersCancellationOrDeadlineIsCanceledNotAFailure(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		ctx  func(arrived <-chan struct{}) context.Context
		want error
	}{
		{"cancelled mid-request", func(arrived <-chan struct{}) context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			go func() { <-arrived; cancel() }()
			return ctx
		}, context.Canceled},
		{"the caller's deadline, shorter than the request timeout", func(<-chan struct{}) context.Context {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			t.Cleanup(cancel)
			return ctx
		}, context.DeadlineExceeded},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newSink(t, false)
			arrived := make(chan struct{}, 1)
			s.setAnswer(func(w http.ResponseWriter, r *http.Request) bool {
				arrived <- struct{}{}
				<-r.Context().Done()
				return true
			})
			d := newDriver(t, options(s.url(), false))
			err := d.Publish(c.ctx(arrived), messages("orders", 1, 1))[0]
			if router.KindOf(err) != router.KindCanceled || !errors.Is(err, c.want) {
				t.Fatalf("%v (%s), want canceled with %v", err, router.KindOf(err), c.want)
			}
		})
	}
}

// keyedSink answers after a pause and records, per key, how many of its requests were
// in flight at once, and the most requests in flight overall.
type keyedSink struct {
	*sink
	mu                sync.Mutex
	inFlight          map[string]int
	total, maxTotal   int
	maxPerKey         int
	order             map[string][]int // seq numbers per key, in arrival order
	refuseKey, refuse string           // refuse this key's message with this seq
}

func newKeyedSink(t *testing.T, batch bool) *keyedSink {
	k := &keyedSink{sink: newSink(t, batch), inFlight: map[string]int{}, order: map[string][]int{}}
	k.setAnswer(func(w http.ResponseWriter, r *http.Request) bool {
		key, seq := r.Header.Get(router.HeaderKey), r.Header.Get("Seq")
		k.mu.Lock()
		k.inFlight[key]++
		k.total++
		k.maxPerKey, k.maxTotal = max(k.maxPerKey, k.inFlight[key]), max(k.maxTotal, k.total)
		n, _ := strconv.Atoi(seq)
		k.order[key] = append(k.order[key], n)
		refuse := key == k.refuseKey && seq == k.refuse
		k.mu.Unlock()
		time.Sleep(5 * time.Millisecond) // long enough for requests to overlap
		k.mu.Lock()
		k.inFlight[key]--
		k.total--
		k.mu.Unlock()
		if refuse {
			http.Error(w, "try later", http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	return k
}

func TestAKeysMessagesAreNeverInFlightAtOnceWhileKeysGoInParallelUpToTheLimit(t *testing.T) {
	t.Parallel()
	s := newKeyedSink(t, false)
	o := options(s.url(), false)
	o.MaxConcurrency = 4
	d := newDriver(t, o)
	msgs := messages("orders", 120, 12)
	requireNoErrors(t, d.Publish(testCtx(t), msgs))
	if got := s.receive(t, "orders", 120); len(got) != 120 {
		t.Fatalf("%d arrived", len(got))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.maxPerKey != 1 {
		t.Fatalf("%d requests of one key were in flight at once", s.maxPerKey)
	}
	if s.maxTotal > 4 || s.maxTotal < 2 {
		t.Fatalf("at most %d requests were in flight; want parallel keys, at most max_concurrency (4)", s.maxTotal)
	}
	for key, seqs := range s.order {
		if !slices.IsSorted(seqs) {
			t.Fatalf("key %s arrived out of order: %v", key, seqs)
		}
	}
}

func TestInAKeyOrderedPublishARetryableFailureHoldsBackTheRestOfItsKeyOnly(t *testing.T) {
	t.Parallel()
	s := newKeyedSink(t, false)
	s.refuseKey, s.refuse = "k1", "6" // the third message of k1 (seq 1, 6, 11, 16)
	d := newDriver(t, options(s.url(), false))
	rt, err := router.New([]router.Route{{Stream: "orders", DriverName: "hook", Driver: d}})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := rt.Publisher("orders")
	if err != nil {
		t.Fatal(err)
	}
	msgs := messages("orders", 20, 5)
	errs := pub.PublishOrdered(testCtx(t), msgs)
	for i, err := range errs {
		switch {
		case i == 6 && router.KindOf(err) != router.KindRetryable:
			t.Fatalf("the refused message: %v (%s), want retryable", err, router.KindOf(err))
		case (i == 11 || i == 16) && router.KindOf(err) != router.KindHeldBack:
			t.Fatalf("message %d behind the refused one of its key: %v (%s), want held back", i, err, router.KindOf(err))
		case i != 6 && i != 11 && i != 16 && err != nil:
			t.Fatalf("message %d: %v", i, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if got := s.order["k1"]; !slices.Equal(got, []int{1, 6}) {
		t.Fatalf("key k1 sent seqs %v; nothing after the refused 6 may go", got)
	}
}

func TestCloseWaitsForTheRequestsInFlightThenRefusesEverything(t *testing.T) {
	t.Parallel()
	s := newSink(t, false)
	arrived, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	letGo := sync.OnceFunc(func() { close(release) })
	t.Cleanup(letGo) // before the sink's Close, which waits for its handlers
	s.setAnswer(func(w http.ResponseWriter, r *http.Request) bool {
		once.Do(func() { close(arrived) })
		<-release
		return false
	})
	d := newDriver(t, options(s.url(), false))
	published := make(chan []error, 1)
	go func() { published <- d.Publish(testCtx(t), messages("orders", 3, 1)) }()
	<-arrived
	closed := make(chan error, 1)
	go func() { closed <- d.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) with a request in flight", err)
	case <-time.After(200 * time.Millisecond):
	}
	letGo()
	requireNoErrors(t, <-published)
	if err := <-closed; err != nil {
		t.Fatalf("close: %v", err)
	}
	for i, err := range d.Publish(testCtx(t), messages("orders", 2, 1)) {
		if !errors.Is(err, router.ErrClosed) || router.KindOf(err) != router.KindUnreachable {
			t.Fatalf("message %d after close: %v", i, err)
		}
	}
	if n := len(s.receive(t, "orders", 3)); n != 3 {
		t.Fatalf("%d arrived", n)
	}
}

func TestAPerMessageRequestCarriesTheMessagesHeadersAndTheOutboxOnes(t *testing.T) {
	t.Parallel()
	s := newSink(t, false)
	o := options(s.srv.URL+"/events/{topic}?t={topic}", false)
	o.Headers = []string{"X-Team: payments", "X-Override: static"}
	d := newDriver(t, o)
	msgs := []router.Message{
		{ID: 7, Stream: "orders", Topic: "a/b c", Key: []byte("order-7"), Payload: []byte(`{"id":7}`), RowDedupID: "dd7",
			Headers: map[string]string{"content-type": "application/json", "traceparent": "00-abc-def-01",
				"x-override": "producer", "outbox-id": "forged", "Outbox-Stream": "forged"}},
		{ID: 8, Stream: "orders", Topic: "plain", Payload: []byte("raw")},
	}
	requireNoErrors(t, d.Publish(testCtx(t), msgs))
	reqs := s.received()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	slices.SortFunc(reqs, func(a, b request) int {
		return strings.Compare(a.header.Get(router.HeaderID), b.header.Get(router.HeaderID))
	})
	first := reqs[0]
	if first.path != "/events/a%2Fb%20c" {
		t.Fatalf("path %s: the topic must be one path segment, escaped", first.path)
	}
	want := map[string]string{
		"Content-Type": "application/json", "Traceparent": "00-abc-def-01", "X-Team": "payments", "X-Override": "static",
		router.HeaderID: "7", router.HeaderStream: "orders", router.HeaderMessageID: "dd7", router.HeaderKey: "order-7",
		webhook.HeaderTopic: "a/b c",
	}
	for k, v := range want {
		if got := first.header.Values(k); len(got) != 1 || got[0] != v {
			t.Errorf("header %s: %q, want %q", k, got, v)
		}
	}
	if string(first.body) != `{"id":7}` || first.method != http.MethodPost {
		t.Errorf("%s with body %q", first.method, first.body)
	}
	second := reqs[1]
	if ct := second.header.Get("Content-Type"); ct != "application/octet-stream" {
		t.Errorf("a message without a content-type went as %q", ct)
	}
	if _, ok := second.header[router.HeaderKey]; ok {
		t.Errorf("a message without a key has %s", router.HeaderKey)
	}
}

func TestTheQueryPlaceholderIsQueryEscaped(t *testing.T) {
	t.Parallel()
	s := newSink(t, false)
	var query string
	s.setAnswer(func(w http.ResponseWriter, r *http.Request) bool { query = r.URL.RawQuery; return true })
	d := newDriver(t, options(s.srv.URL+"/in?topic={topic}&v=1", false))
	requireNoErrors(t, d.Publish(testCtx(t), []router.Message{{ID: 1, Stream: "s", Topic: "a&b=c d"}}))
	if query != "topic=a%26b%3Dc+d&v=1" {
		t.Fatalf("query %q", query)
	}
}

func TestCredentialsInTheURLAreSentAsBasicAuthAndNeverShown(t *testing.T) {
	t.Parallel()
	s := newSink(t, false)
	var user, pass string
	s.setAnswer(func(w http.ResponseWriter, r *http.Request) bool {
		user, pass, _ = r.BasicAuth()
		http.Error(w, "nope", http.StatusUnauthorized)
		return true
	})
	u := strings.Replace(s.url(), "http://", "http://outboxd:hunter22@", 1) + "?code=sesame"
	d := newDriver(t, options(u, false))
	err := d.Publish(testCtx(t), messages("orders", 1, 1))[0]
	if user != "outboxd" || pass != "hunter22" {
		t.Fatalf("basic auth %q:%q", user, pass)
	}
	if router.KindOf(err) != router.KindPermanent || strings.Contains(err.Error(), "hunter22") || strings.Contains(err.Error(), "sesame") {
		t.Fatalf("error %v", err)
	}
	if !strings.Contains(err.Error(), "[REDACTED]@127.0.0.1") || !strings.Contains(err.Error(), "?…") {
		t.Fatalf("the error does not show where it went, redacted: %v", err)
	}
	refused := newDriver(t, options(strings.Replace(refusingURL(t), "http://", "http://outboxd:hunter22@", 1), false))
	if err := refused.Publish(testCtx(t), messages("orders", 1, 1))[0]; strings.Contains(err.Error(), "hunter22") {
		t.Fatalf("the connection error quotes the password: %v", err)
	}
}

func TestProbeTakesAnyAnswerAsReachable(t *testing.T) {
	t.Parallel()
	s := newSink(t, false)
	var method, path string
	s.setAnswer(func(w http.ResponseWriter, r *http.Request) bool {
		method, path = r.Method, r.URL.Path
		w.WriteHeader(http.StatusMethodNotAllowed)
		return true
	})
	d := newDriver(t, options(s.url(), false))
	if err := d.Probe(testCtx(t), ""); err != nil {
		t.Fatalf("probe of an endpoint answering 405: %v", err)
	}
	if method != http.MethodHead || path != "/" {
		t.Fatalf("probe sent %s %s, want HEAD /", method, path)
	}
	if err := d.Probe(testCtx(t), "orders"); err != nil || path != "/events/orders" {
		t.Fatalf("probe of a topic: %v, path %s", err, path)
	}
	down := newDriver(t, options(strings.Replace(refusingURL(t), "http://", "http://u:hunter22@", 1), false))
	err := down.Probe(testCtx(t), "")
	if err == nil || strings.Contains(err.Error(), "hunter22") {
		t.Fatalf("probe of a closed port: %v", err)
	}
}

func TestABatchIsOneJSONArrayInOrderWithItsFieldsEncoded(t *testing.T) {
	t.Parallel()
	s := newSink(t, true)
	d := newDriver(t, options(s.url(), true))
	msgs := []router.Message{
		{ID: 1, Stream: "orders", Topic: "orders", Key: []byte{0, 0xff, 'k'}, Payload: []byte("p1"), RowDedupID: "d1",
			Headers: map[string]string{"content-type": "text/plain"}},
		{ID: 2, Stream: "orders", Topic: "orders", MessageID: "m2"},
		{ID: 3, Stream: "orders", Topic: "other", Payload: []byte("p3")},
	}
	requireNoErrors(t, d.Publish(testCtx(t), msgs))
	reqs := s.received()
	if len(reqs) != 2 {
		t.Fatalf("%d requests for two URLs", len(reqs))
	}
	slices.SortFunc(reqs, func(a, b request) int { return strings.Compare(a.path, b.path) })
	want := `[{"id":1,"message_id":"d1","stream":"orders","topic":"orders","key":"AP9r","headers":{"content-type":"text/plain"},"payload":"cDE="},` +
		`{"id":2,"message_id":"m2","stream":"orders","topic":"orders","key":null,"headers":{},"payload":""}]`
	if got := string(reqs[0].body); got != want {
		t.Fatalf("body\n%s\nwant\n%s", got, want)
	}
	if ct := reqs[0].header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q", ct)
	}
}

func TestABatchLargerThanOneRequestMayCarryGoesInSeveralInOrder(t *testing.T) {
	t.Parallel()
	s := newSink(t, true)
	o := options(s.url(), true)
	o.MaxPayloadBytes = 2 << 20
	d := newDriver(t, o)
	msgs := messages("big", 10, 3)
	for i := range msgs {
		msgs[i].Payload = []byte(strings.Repeat(strconv.Itoa(i), 1<<20))
	}
	requireNoErrors(t, d.Publish(testCtx(t), msgs))
	if n := len(s.received()); n < 3 {
		t.Fatalf("10 MiB went in %d requests; a request body is bounded to a few MiB", n)
	}
	for i, r := range s.receive(t, "big", 10) {
		if r.Headers["seq"] != strconv.Itoa(i) {
			t.Fatalf("message %d arrived as %s", i, r.Headers["seq"])
		}
	}
}

func TestABatchRetriedByTheEndpointFailsWholeWithItsRetryAfter(t *testing.T) {
	t.Parallel()
	s := newSink(t, true)
	s.setAnswer(func(w http.ResponseWriter, r *http.Request) bool {
		w.Header().Set("Retry-After", "5")
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
		return true
	})
	d := newDriver(t, options(s.url(), true))
	for i, err := range d.Publish(testCtx(t), messages("orders", 5, 2)) {
		if router.KindOf(err) != router.KindRetryable || router.RetryAfterOf(err) != 5*time.Second ||
			!strings.Contains(err.Error(), "a batch of 5") {
			t.Fatalf("message %d: %v (%s, hint %v)", i, err, router.KindOf(err), router.RetryAfterOf(err))
		}
	}
	if n := len(s.received()); n != 1 {
		t.Fatalf("%d requests; a retryable answer is not split up", n)
	}
}

func TestAnUntrustedCertificateIsUnreachableAndTheConfiguredCAIsTrusted(t *testing.T) {
	t.Parallel()
	srv := newTLSSink(t)
	d := newDriver(t, options(srv.URL+"/events/{topic}", false))
	if err := d.Publish(testCtx(t), messages("orders", 1, 1))[0]; router.KindOf(err) != router.KindUnreachable {
		t.Fatalf("an endpoint whose certificate we do not trust: %v (%s), want unreachable", err, router.KindOf(err))
	}
	o := options(srv.URL+"/events/{topic}", false)
	o.TLS.Enabled, o.TLS.CAFile = true, caFile(t, srv)
	trusting := newDriver(t, o)
	requireNoErrors(t, trusting.Publish(testCtx(t), messages("orders", 1, 1)))
	plain := newDriver(t, options(strings.Replace(newSink(t, false).url(), "http://", "https://", 1), false))
	if err := plain.Publish(testCtx(t), messages("orders", 1, 1))[0]; router.KindOf(err) != router.KindUnreachable {
		t.Fatalf("a TLS handshake answered in plain HTTP: %v (%s), want unreachable", err, router.KindOf(err))
	}
}
