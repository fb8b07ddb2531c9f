package dispatch_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outboxd/outboxd/dispatch"
	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/router"
)

// logSink is a JSON log sink safe for the pipelines' goroutines.
type logSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

// lines parses every JSON line written so far.
func (s *logSink) lines(t *testing.T) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(s.buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line is not JSON: %v\n%s", err, l)
		}
		out = append(out, m)
	}
	return out
}

// failureLines splits WARN lines into per-message lines and suppression summaries, by
// stream.
func failureLines(lines []map[string]any) (full map[string][]map[string]any, suppressed map[string]int) {
	full, suppressed = map[string][]map[string]any{}, map[string]int{}
	for _, l := range lines {
		if l["level"] != "WARN" {
			continue
		}
		stream, _ := l["stream"].(string)
		if n, ok := l["suppressed"].(float64); ok {
			suppressed[stream] += int(n)
			continue
		}
		if _, ok := l["id"]; ok {
			full[stream] = append(full[stream], l)
		}
	}
	return full, suppressed
}

func TestAPoisonedStreamLogsABoundedNumberOfFailuresAndCountsTheRest(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const poisoned, other = 1000, 3
	f.insert(t, "poisoned", poisoned)
	f.insert(t, "other", other)

	var sink logSink
	logger := slog.New(slog.NewJSONHandler(&sink, nil))
	bus := events.NewBus(logger)
	failures := dispatch.NewFailureLog(dispatch.FailureLogConfig{Burst: 10, Interval: time.Hour}, logger)
	bus.Subscribe("failure-log", failures.Handle, events.Filter(dispatch.IsMessageFailed))
	pub := newFakePublisher(func(context.Context, router.Message) error {
		return router.Permanent(errors.New("schema registry: subject not found"))
	})
	stops := []func(){}
	for _, stream := range []string{"poisoned", "other"} {
		p, err := dispatch.NewPipeline(dispatch.PipelineConfig{Stream: stream, Owner: "replica-" + stream,
			PollInterval: 20 * time.Millisecond, BatchSize: 100}, f.store, pub, bus, logger)
		if err != nil {
			t.Fatal(err)
		}
		stops = append(stops, run(t, p))
	}
	waitFor(t, time.Minute, "every row failed", func() bool { return f.counts(t)["failed"] == poisoned+other })
	for _, stop := range stops {
		stop() // Run returns after its last batch's events were emitted
	}
	failures.Close()

	full, suppressed := failureLines(sink.lines(t))
	if n := len(full["poisoned"]); n == 0 || n > 10 {
		t.Fatalf("poisoned stream: %d per-message WARN lines, want 1 to 10 (the burst)", n)
	}
	if got, want := len(full["poisoned"])+suppressed["poisoned"], poisoned; got != want {
		t.Errorf("poisoned stream: %d lines + %d suppressed = %d, want every failure accounted for (%d)",
			len(full["poisoned"]), suppressed["poisoned"], got, want)
	}
	if suppressed["poisoned"] == 0 {
		t.Errorf("poisoned stream: no suppression summary line")
	}
	if n := len(full["other"]); n != other {
		t.Errorf("the other stream logged %d failures, want all %d: its allowance is its own", n, other)
	}
	if suppressed["other"] != 0 {
		t.Errorf("the other stream had %d failures suppressed, want none", suppressed["other"])
	}
	for _, l := range append(full["poisoned"], full["other"]...) {
		id, _ := l["id"].(float64)
		key, _ := l["key"].(string)
		attempts, _ := l["attempts"].(float64)
		errText, _ := l["err"].(string)
		if id <= 0 || !strings.HasPrefix(key, "k") || attempts != 1 || !strings.Contains(errText, "subject not found") {
			t.Errorf("a failure line lacks stream, id, key, attempts or err: %v", l)
		}
	}
}

func TestTheFailureLogAllowsANewBurstEveryIntervalAndSummarisesTheLast(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var sink logSink
		l := dispatch.NewFailureLog(dispatch.FailureLogConfig{Burst: 2, Interval: time.Minute}, slog.New(slog.NewJSONHandler(&sink, nil)))
		fail := func(stream string, id int64) {
			l.Handle(events.MessageFailed{Stream: stream, ID: id, Key: []byte{0xff, 0x00}, Attempts: 3,
				Reason: "attempts_exhausted", Err: "gave up"})
		}
		for id := int64(1); id <= 5; id++ {
			fail("orders", id)
		}
		full, suppressed := failureLines(sink.lines(t))
		if len(full["orders"]) != 2 || suppressed["orders"] != 0 {
			t.Fatalf("within the first interval: %d lines and %d suppressed, want 2 and no summary yet",
				len(full["orders"]), suppressed["orders"])
		}
		if key := full["orders"][0]["key"]; key != "0xff00" {
			t.Errorf("a key that is not UTF-8 is shown as %v, want 0xff00", key)
		}
		time.Sleep(time.Minute) // the window ends: its summary is written without another failure
		synctest.Wait()
		_, suppressed = failureLines(sink.lines(t))
		if suppressed["orders"] != 3 {
			t.Fatalf("after the interval: %d suppressed in summaries, want 3", suppressed["orders"])
		}
		fail("orders", 6)
		full, _ = failureLines(sink.lines(t))
		if len(full["orders"]) != 3 {
			t.Errorf("the next interval's first failure is not logged in full: %d lines, want 3", len(full["orders"]))
		}
		l.Close()
	})
}
