package dispatch_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxd/outboxd/dispatch"
	"github.com/outboxd/outboxd/events"
)

// A probe whose samples are slow, as a count of a million-row backlog is, is sampled
// less often than the interval asks: a sample of 20 ms at an interval of 10 ms would
// otherwise keep the database counting two thirds of the time on every replica.
func TestASlowProbeIsSampledLessOftenThanItsInterval(t *testing.T) {
	t.Parallel()
	var samples atomic.Int64
	slow := dispatch.Probe{Name: "slow", Sample: func(ctx context.Context) ([]events.Event, error) {
		samples.Add(1)
		time.Sleep(20 * time.Millisecond)
		return nil, nil
	}}
	s := dispatch.NewSampler(dispatch.SamplerConfig{Interval: 10 * time.Millisecond, Probes: []dispatch.Probe{slow}}, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if err := s.Run(ctx); err != nil {
		t.Fatal(err)
	}
	// At most 5 % of the time sampling: 20 ms, then at least 400 ms of rest.
	if n := samples.Load(); n < 2 || n > 5 {
		t.Fatalf("%d samples of 20 ms in 1.5 s at an interval of 10 ms; want 2 to 5 (at most 5 %% of the time sampling)", n)
	}
}
