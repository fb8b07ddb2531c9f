package jetstream

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/natsconn"
)

// handingSpy records, each time the driver hands the connection a message, how many
// earlier messages still awaited their PubAck. before, when set, runs then, with the
// message's number (from 0).
type handingSpy struct {
	before func(n int)
	mu     sync.Mutex
	worst  int
}

func (s *handingSpy) install(d *Driver) {
	d.handing = func(n, inFlight int) {
		s.mu.Lock()
		s.worst = max(s.worst, inFlight)
		s.mu.Unlock()
		if s.before != nil {
			s.before(n)
		}
	}
}

// withStream starts a server holding stream W, capturing w.>, and returns it with a
// connection of the test's own.
func withStream(t *testing.T, ctx context.Context) (*testenv.NATSServer, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	srv := testenv.NewNATS(t)
	nc, err := nats.Connect(srv.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	admin, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CreateStream(ctx, jetstream.StreamConfig{Name: "W", Subjects: []string{"w.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	return srv, nc, admin
}

func TestTheWindowBoundsTheMessagesAwaitingAPubAckAcrossConcurrentBatches(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, _, _ := withStream(t, ctx)

	const window = 8
	d, err := New("window", Options{Options: natsconn.Options{URL: srv.URL(), PublishTimeout: 5 * time.Second}, MaxInFlight: window}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	spy := &handingSpy{}
	spy.install(d)

	const workers, per = 4, 250
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			msgs := make([]router.Message, per)
			for i := range msgs {
				msgs[i] = router.Message{ID: int64(w*per + i), Stream: "w", Topic: "w." + strconv.Itoa(w), Payload: []byte("x")}
			}
			for i, err := range d.Publish(ctx, msgs) {
				if err != nil {
					t.Errorf("worker %d message %d: %v", w, i, err)
				}
			}
		})
	}
	wg.Wait()
	if spy.worst >= window {
		t.Fatalf("%d messages awaited their PubAck when another was handed over (window %d)", spy.worst, window)
	}
	if spy.worst == 0 {
		t.Fatal("no message was ever handed over while another awaited its PubAck: not pipelined")
	}
	t.Logf("at most %d of %d awaited their PubAck when the next was handed over", spy.worst, window)
}

func TestAServerLostMidBatchConfirmsOnlyWhatItStored(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, nc, admin := withStream(t, ctx)

	d, err := New("lost", Options{Options: natsconn.Options{URL: srv.URL(), PublishTimeout: 10 * time.Second}, MaxInFlight: 64}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	const n, stopAt = 400, 200
	(&handingSpy{before: func(i int) {
		if i == stopAt {
			srv.Stop() // messages before this one are stored, in flight or lost with the connection
		}
	}}).install(d)
	msgs := make([]router.Message, n)
	for i := range msgs {
		msgs[i] = router.Message{ID: int64(i), Stream: "w", Topic: "w.lost", Payload: []byte("x")}
	}
	start := time.Now()
	errs := d.Publish(ctx, msgs)
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Fatalf("losing the server took %v to report", elapsed)
	}
	confirmed := map[string]bool{}
	for i, err := range errs {
		switch {
		case err == nil:
			confirmed[strconv.Itoa(i)] = true
		case router.KindOf(err) != router.KindUnreachable:
			// Unreachable also covers messages lost in flight: stored or not, publishing
			// them again is safe.
			t.Fatalf("message %d: kind %s (%v), want unreachable or nil", i, router.KindOf(err), err)
		}
	}
	if errs[stopAt] == nil || errs[n-1] == nil {
		t.Fatal("messages published after the server stopped were confirmed")
	}

	srv.Start()
	WaitConnected(t, nc)
	stored := map[string]bool{}
	s, err := admin.Stream(ctx, "W")
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for uint64(len(stored)) < info.State.Msgs {
		batch, err := c.Fetch(int(info.State.Msgs)-len(stored), jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			stored[m.Headers().Get(router.HeaderID)] = true
		}
	}
	for id := range confirmed {
		if !stored[id] {
			t.Fatalf("message %s was confirmed but the stream does not hold it", id)
		}
	}
	t.Logf("%d confirmed, %d stored, %d unreachable", len(confirmed), len(stored), n-len(confirmed))
}

func TestClosingMidBatchFailsEveryUnconfirmedMessageAsClosed(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, _, _ := withStream(t, ctx)

	d, err := New("closing", Options{Options: natsconn.Options{URL: srv.URL(), PublishTimeout: 10 * time.Second}, MaxInFlight: 64}, nil)
	if err != nil {
		t.Fatal(err)
	}
	const n, closeAt = 300, 150
	(&handingSpy{before: func(i int) {
		if i == closeAt {
			if err := d.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		}
	}}).install(d)
	msgs := make([]router.Message, n)
	for i := range msgs {
		msgs[i] = router.Message{ID: int64(i), Stream: "w", Topic: "w.closing", Payload: []byte("x")}
	}
	start := time.Now()
	errs := d.Publish(ctx, msgs)
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Fatalf("Publish took %v to notice Close", elapsed)
	}
	for i, err := range errs {
		switch {
		case err == nil && i >= closeAt:
			t.Fatalf("message %d, handed over after Close, was confirmed", i)
		case err != nil && !errors.Is(err, router.ErrClosed):
			t.Fatalf("message %d: %v, want an error wrapping router.ErrClosed", i, err)
		case err != nil && router.KindOf(err) != router.KindUnreachable:
			t.Fatalf("message %d: kind %s, want unreachable", i, router.KindOf(err))
		}
	}
}

func TestACancelledContextMidBatchCancelsEveryMessageWithoutAPubAck(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, _, admin := withStream(t, ctx)

	d, err := New("cancel", Options{Options: natsconn.Options{URL: srv.URL(), PublishTimeout: 10 * time.Second}, MaxInFlight: 64}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	pubCtx, pubCancel := context.WithCancel(ctx)
	const n, cancelAt = 300, 100
	(&handingSpy{before: func(i int) {
		if i == cancelAt {
			pubCancel()
		}
	}}).install(d)
	msgs := make([]router.Message, n)
	for i := range msgs {
		msgs[i] = router.Message{ID: int64(i), Stream: "w", Topic: "w.cancel", Payload: []byte("x")}
	}
	errs := d.Publish(pubCtx, msgs)
	confirmed := 0
	for i, err := range errs {
		switch {
		case err == nil && i > cancelAt:
			t.Fatalf("message %d, never handed over, was confirmed", i)
		case err == nil:
			confirmed++
		case router.KindOf(err) != router.KindCanceled || !errors.Is(err, context.Canceled):
			t.Fatalf("message %d: %v, want canceled by the caller's context", i, err)
		}
	}
	s, err := admin.Stream(ctx, "W")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs < uint64(confirmed) {
		t.Fatalf("%d messages confirmed, %d stored", confirmed, info.State.Msgs)
	}
	// The driver still works, and the window came back.
	for i := range msgs {
		msgs[i].ID += n
	}
	for i, err := range d.Publish(ctx, msgs) {
		if err != nil {
			t.Fatalf("after the cancelled batch, message %d: %v", i, err)
		}
	}
}
