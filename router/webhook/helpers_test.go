package webhook_test

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/routertest"
	"github.com/outboxd/outboxd/router/webhook"
)

// sink is an HTTP endpoint that records what arrives, by topic, in arrival order. It
// takes requests to /events/<topic>, one message each or, in batch mode, a JSON array.
// It refuses (400) a topic ending in ".refused" and any request carrying a message
// whose payload is "refused", taking nothing of that request.
type sink struct {
	srv   *httptest.Server
	batch bool

	mu       sync.Mutex
	got      map[string][]routertest.Received
	requests []request                                         // every request, in arrival order
	answer   func(w http.ResponseWriter, r *http.Request) bool // answers instead, when it returns true
}

// request is a request as the sink received it.
type request struct {
	method, path string
	header       http.Header
	body         []byte
	at           time.Time
}

// batchItem is one element of a batch body, as a receiver decodes it.
type batchItem struct {
	ID        int64             `json:"id"`
	MessageID string            `json:"message_id"`
	Stream    string            `json:"stream"`
	Topic     string            `json:"topic"`
	Key       []byte            `json:"key"`
	Headers   map[string]string `json:"headers"`
	Payload   []byte            `json:"payload"`
}

func newSink(t testing.TB, batch bool) *sink {
	t.Helper()
	s := &sink{batch: batch, got: map[string][]routertest.Received{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

// url is the driver's URL template for this sink.
func (s *sink) url() string { return s.srv.URL + "/events/{topic}" }

func (s *sink) setAnswer(f func(w http.ResponseWriter, r *http.Request) bool) {
	s.mu.Lock()
	s.answer = f
	s.mu.Unlock()
}

func (s *sink) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.requests = append(s.requests, request{method: r.Method, path: r.URL.EscapedPath(), header: r.Header.Clone(), body: body, at: time.Now()})
	answer := s.answer
	s.mu.Unlock()
	if answer != nil && answer(w, r) {
		return
	}
	topic, err := url.PathUnescape(strings.TrimPrefix(r.URL.EscapedPath(), "/events/"))
	if err != nil || r.Method != http.MethodPost {
		http.Error(w, "want POST /events/<topic>", http.StatusNotFound)
		return
	}
	if strings.HasSuffix(topic, ".refused") {
		http.Error(w, "no such topic: "+topic, http.StatusBadRequest)
		return
	}
	var got []routertest.Received
	if s.batch {
		var items []batchItem
		if err := json.Unmarshal(body, &items); err != nil {
			http.Error(w, "bad JSON: "+err.Error(), http.StatusBadRequest)
			return
		}
		for _, it := range items {
			// The outbox fields travel in the JSON; the suite reads them as the headers
			// every other driver sends.
			h := map[string]string{router.HeaderID: strconv.FormatInt(it.ID, 10), router.HeaderStream: it.Stream,
				router.HeaderMessageID: it.MessageID}
			for k, v := range it.Headers {
				h[k] = v
			}
			got = append(got, routertest.Received{Topic: it.Topic, Key: it.Key, Headers: h, Payload: it.Payload})
		}
	} else {
		h := map[string]string{}
		for k, vs := range r.Header {
			// HTTP header names are case-insensitive (HTTP/2 lower-cases them): a
			// receiver finds a header by either spelling.
			h[k], h[strings.ToLower(k)] = vs[0], vs[0]
		}
		rec := routertest.Received{Topic: topic, Headers: h, Payload: body}
		if k, ok := r.Header[router.HeaderKey]; ok {
			rec.Key = []byte(k[0])
		}
		got = append(got, rec)
	}
	for _, m := range got {
		if string(m.Payload) == "refused" {
			http.Error(w, "message refused", http.StatusBadRequest)
			return
		}
	}
	s.mu.Lock()
	s.got[topic] = append(s.got[topic], got...)
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// receive returns the n messages taken on topic. Publish returns only once every request
// was answered, so they are all there; more or fewer fails t.
func (s *sink) receive(t *testing.T, topic string, n int) []routertest.Received {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	got := s.got[topic]
	if len(got) != n {
		t.Fatalf("topic %s: %d messages arrived, want %d", topic, len(got), n)
	}
	return append([]routertest.Received(nil), got...)
}

func (s *sink) received() []request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]request(nil), s.requests...)
}

// refusingURL is a URL template for a port where nothing listens: bound, so no one else
// takes it while the test runs, but never listening.
func refusingURL(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatalf("socket: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("bind: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("getsockname: %v", err)
	}
	return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port)) + "/events/{topic}"
}

// newTLSSink is an https endpoint with a certificate of its own, which takes anything.
func newTLSSink(t testing.TB) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are expected
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// caFile writes srv's certificate as a PEM file and returns its path.
func caFile(t testing.TB, srv *httptest.Server) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ca.pem")
	data := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func options(u string, batch bool) webhook.Options {
	o := webhook.DefaultOptions()
	o.URL, o.Batch = u, batch
	return o
}

func newDriver(t testing.TB, o webhook.Options) *webhook.Driver {
	t.Helper()
	d, err := webhook.New("hook", o, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// messages returns n messages to topic, over keys keys, with numbered payloads.
func messages(topic string, n, keys int) []router.Message {
	msgs := make([]router.Message, n)
	for i := range msgs {
		msgs[i] = router.Message{ID: int64(i + 1), Stream: "orders", Topic: topic, Key: []byte("k" + strconv.Itoa(i%keys)),
			Headers: map[string]string{"seq": strconv.Itoa(i)}, Payload: []byte("m" + strconv.Itoa(i)), RowDedupID: "d" + strconv.Itoa(i)}
	}
	return msgs
}

func requireNoErrors(t *testing.T, errs []error) {
	t.Helper()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
}
