package dispatch_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outboxd/outboxd/dispatch"
	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/store"
)

// fakeUnserved answers UnservedStreams with whatever the test set last, and records the
// served streams it was asked about.
type fakeUnserved struct {
	mu     sync.Mutex
	answer []store.UnservedStream
	err    error
	served [][]string
}

func (f *fakeUnserved) UnservedStreams(_ context.Context, served []string) ([]store.UnservedStream, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.served = append(f.served, served)
	return f.answer, f.err
}

func (f *fakeUnserved) set(answer []store.UnservedStream, err error) {
	f.mu.Lock()
	f.answer, f.err = answer, err
	f.mu.Unlock()
}

// logLines is a log sink that counts warnings and keeps every line.
type logLines struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logLines) count(msgPart string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), msgPart)
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

const unservedWarning = "pending rows of streams this replica does not serve"

func TestTheUnservedSamplerEmitsEverySampleAndNamesTheStreams(t *testing.T) {
	t.Parallel()
	st := &fakeUnserved{answer: []store.UnservedStream{
		{Stream: "ordres", Pending: 3, Oldest: 90 * time.Second},
		{Stream: "refunds\nX-Forged: 1", Pending: 2},
	}}
	rec := newRecorder()
	logs := &logLines{}
	s := unservedSampler([]string{"orders", "payments"}, time.Second, st, rec,
		slog.New(slog.NewJSONHandler(logs, nil)))
	must(t, s.Sample(context.Background()))

	e := rec.await(t, time.Second, "an UnservedStreams event", func(e events.Event) bool {
		_, ok := e.(events.UnservedStreams)
		return ok
	}).(events.UnservedStreams)
	if len(e.Streams) != 2 || e.Streams[0] != (events.UnservedStream{Stream: "ordres", Pending: 3, Oldest: 90 * time.Second}) {
		t.Fatalf("event: %+v", e)
	}
	if got := st.served[0]; len(got) != 2 || got[0] != "orders" || got[1] != "payments" {
		t.Fatalf("asked about served streams %q", got)
	}
	out := logs.String()
	for _, want := range []string{unservedWarning, `\"ordres\" (3 pending, oldest 1m30s)`, `refunds\\nX-Forged: 1`,
		`"unserved_streams":2`, `"unserved_messages":5`} {
		if !strings.Contains(out, want) {
			t.Errorf("the warning does not say %s:\n%s", want, out)
		}
	}
	if strings.Count(out, "\n") != 1 {
		t.Fatalf("a stream name holding a newline split the log line:\n%s", out)
	}
}

func TestTheUnservedSamplerEmitsAnEmptySampleSoGaugesReturnToZero(t *testing.T) {
	t.Parallel()
	rec := newRecorder()
	s := unservedSampler(nil, time.Second, &fakeUnserved{}, rec, nil)
	must(t, s.Sample(context.Background()))
	e := rec.await(t, time.Second, "an UnservedStreams event", func(e events.Event) bool {
		_, ok := e.(events.UnservedStreams)
		return ok
	}).(events.UnservedStreams)
	if len(e.Streams) != 0 {
		t.Fatalf("event: %+v", e)
	}
}

func TestTheUnservedWarningRepeatsOnlyForNewStreamsOrAfterAQuarterOfAnHour(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		st := &fakeUnserved{}
		logs := &logLines{}
		s := unservedSampler([]string{"orders"}, 10*time.Second, st, nil, slog.New(slog.NewJSONHandler(logs, nil)))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		after := func(d time.Duration) { time.Sleep(d); synctest.Wait() }

		after(time.Minute)
		if n := logs.count(unservedWarning); n != 0 {
			t.Fatalf("%d warnings with nothing unserved", n)
		}
		st.set([]store.UnservedStream{{Stream: "ordres", Pending: 1}}, nil)
		after(time.Minute)
		if n := logs.count(unservedWarning); n != 1 {
			t.Fatalf("%d warnings a minute after ordres appeared, want 1", n)
		}
		st.set([]store.UnservedStream{{Stream: "ordres", Pending: 7}}, nil) // same stream, more rows
		after(10 * time.Minute)
		if n := logs.count(unservedWarning); n != 1 {
			t.Fatalf("%d warnings after ten more minutes of the same stream, want still 1", n)
		}
		st.set([]store.UnservedStream{{Stream: "ordres", Pending: 7}, {Stream: "refunds", Pending: 1}}, nil)
		after(time.Minute)
		if n := logs.count(unservedWarning); n != 2 {
			t.Fatalf("%d warnings after refunds appeared, want 2", n)
		}
		after(16 * time.Minute)
		if n := logs.count(unservedWarning); n != 3 {
			t.Fatalf("%d warnings a quarter of an hour later, want the reminder (3)", n)
		}
		st.set(nil, nil)
		after(time.Minute)
		if n := logs.count("no pending rows of unserved streams are left"); n != 1 {
			t.Fatalf("%d all-clear messages, want 1\n%s", n, logs)
		}
		after(10 * time.Minute)
		if n := logs.count("no pending rows of unserved streams are left"); n != 1 {
			t.Fatalf("the all-clear repeated: %d", n)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

func TestAFailingUnservedSampleIsLoggedOnceAndRetried(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		st := &fakeUnserved{err: errors.New("connection refused")}
		logs := &logLines{}
		rec := newRecorder()
		s := unservedSampler(nil, 10*time.Second, st, rec, slog.New(slog.NewJSONHandler(logs, nil)))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := logs.count("unserved-stream sample failed"); n != 1 {
			t.Fatalf("%d failure lines for six failed samples, want 1", n)
		}
		st.set([]store.UnservedStream{{Stream: "x", Pending: 1}}, nil)
		time.Sleep(time.Minute)
		synctest.Wait()
		if rec.countUnserved() == 0 {
			t.Fatal("no sample emitted once the database answered again")
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

func (r *recorder) countUnserved() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if _, ok := e.(events.UnservedStreams); ok {
			n++
		}
	}
	return n
}

// unservedSampler is a sampler of the unserved-stream probe alone, logging to logger.
func unservedSampler(served []string, interval time.Duration, st dispatch.UnservedStore, emit dispatch.Emitter, logger *slog.Logger) *dispatch.Sampler {
	return dispatch.NewSampler(dispatch.SamplerConfig{Interval: interval,
		Probes: []dispatch.Probe{dispatch.UnservedProbe(served, st, logger)}}, emit, logger)
}
