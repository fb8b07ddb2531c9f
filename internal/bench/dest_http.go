package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/webhook"
)

// httpDest is the http driver in batch mode, posting to an HTTP endpoint the bench
// serves itself: nothing to install, so it is measured by default.
var httpDest = benchDest{typ: webhook.Type, byDefault: true,
	inBench: func(Options) bool { return true }, // the bench's own sink
	environ: func(o router.Options) map[string]string {
		h := o.(webhook.Options)
		return map[string]string{"URL": h.URL, "BATCH": strconv.FormatBool(h.Batch)}
	},
	options: func(o benchOptions) router.Options {
		h := webhook.DefaultOptions()
		h.URL, h.Batch = o.addrs[webhook.Type], true
		if h.URL == "" { // before setup: any valid URL, for resolve's check
			h.URL = "http://127.0.0.1:1" + httpSinkPath
		}
		return h
	},
	setup: func(_ context.Context, b *bench) (string, string, func(), error) {
		sink, err := startHTTPSink()
		if err != nil {
			return "", "", nil, err
		}
		b.web = sink
		return sink.url, "an HTTP endpoint in the bench's process, posted to in batch mode", sink.close, nil
	},
	arrivals: func(_ context.Context, b *bench) (arrivalCounter, error) {
		if b.web == nil {
			return nil, errors.New("bench: the HTTP endpoint was not started")
		}
		return b.web.count(), nil
	},
}

// httpSinkPath is where the endpoint takes batches; the topic does not matter to it.
const httpSinkPath = "/outboxd-bench/{topic}"

// httpSink is the endpoint: it decodes every batch and tallies its messages by id
// before answering 204, so that a message the driver saw confirmed is counted.
type httpSink struct {
	srv   *http.Server
	url   string
	tally atomic.Pointer[tally] // the current drain's
}

func startHTTPSink() (*httpSink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench: listen for the http driver: %w", err)
	}
	s := &httpSink{url: "http://" + ln.Addr().String() + httpSinkPath}
	s.tally.Store(newTally())
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *httpSink) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var items []struct {
		ID int64 `json:"id"`
	}
	if err == nil {
		err = json.Unmarshal(body, &items)
	}
	if err != nil {
		http.Error(w, "want a JSON array of messages: "+err.Error(), http.StatusBadRequest)
		return
	}
	t := s.tally.Load()
	for _, it := range items {
		t.add(strconv.FormatInt(it.ID, 10))
	}
	w.WriteHeader(http.StatusNoContent)
}

// count starts a drain's tally.
func (s *httpSink) count() arrivalCounter {
	t := newTally()
	s.tally.Store(t)
	return httpCounter{t}
}

func (s *httpSink) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
}

// httpCounter reads a drain's tally once the dispatcher has stopped: every request it
// sent has been answered by then, and the endpoint counts before it answers.
type httpCounter struct{ t *tally }

func (c httpCounter) countedBy() string {
	return "the bench's HTTP endpoint (distinct ids of the batches it took)"
}

func (httpCounter) close() {}

func (c httpCounter) count(_ context.Context, ids []int64, _ *dispatcherProcess) (int64, int64, error) {
	arrived, duplicates := c.t.against(ids)
	return arrived, duplicates, nil
}
