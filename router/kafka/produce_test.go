package kafka

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/router"
)

// A broker whose answer leaves a partition out has not said the partition's records are
// stored: those messages fail retryable, after the driver's own attempts, and say why.
func TestAPartitionTheBrokersAnswerLeavesOutIsRetryableAndNamed(t *testing.T) {
	t.Parallel()
	k := testenv.NewKafka(t, 1, "events")
	d := newDriver(t, testConfig(k.Addr()))
	var hits atomic.Int32
	cluster := k.Cluster()
	cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		hits.Add(1)
		return req.(*kmsg.ProduceRequest).ResponseKind(), nil, true // an answer naming no partition
	})
	for i, err := range d.Publish(testCtx(t), numbered("events", 5, "a")) {
		if err == nil || router.KindOf(err) != router.KindRetryable || !strings.Contains(err.Error(), "left out partition 0") {
			t.Fatalf("message %d: %v (%s), want retryable, naming the partition left out", i, err, router.KindOf(err))
		}
	}
	if n := hits.Load(); n != writeAttempts {
		t.Fatalf("%d produce requests, want %d (the driver's attempts)", n, writeAttempts)
	}
}

// Refusals that last past write_timeout end the call with it: the messages fail
// retryable (the broker refused them: an attempt is spent), naming the timeout, not as
// if the broker could not be reached.
func TestRefusalsThatOutlastTheWriteTimeoutFailRetryableAndSaySo(t *testing.T) {
	t.Parallel()
	k := testenv.NewKafka(t, 1, "events")
	cfg := testConfig(k.Addr())
	cfg.WriteTimeout = 150 * time.Millisecond // the second pause (200 ms) outlasts it
	d := newDriver(t, cfg)
	if errs := d.Publish(testCtx(t), numbered("events", 1, "a")); errs[0] != nil {
		t.Fatalf("first publish, before any refusal: %v", errs[0]) // metadata in place
	}
	hits := refuseProduce(k.Cluster(), func(string, int32, []byte) int16 { return kerr.NotEnoughReplicas.Code })
	start := time.Now()
	errs := d.Publish(testCtx(t), numbered("events", 5, "a"))
	elapsed := time.Since(start)
	for i, err := range errs {
		if err == nil || router.KindOf(err) != router.KindRetryable || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "write_timeout") {
			t.Fatalf("message %d: %v (%s), want retryable, naming write_timeout", i, err, router.KindOf(err))
		}
	}
	if elapsed > cfg.WriteTimeout+time.Second { // a bound against a hang, not a timing
		t.Fatalf("the call took %v with a write timeout of %v", elapsed, cfg.WriteTimeout)
	}
	if n := hits.Load(); n != 2 {
		t.Fatalf("%d produce requests refused, want 2 (the third attempt would start after the timeout)", n)
	}
}
