package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
)

// TestTheHTTPTargetCountsEveryMessageAndEveryCopyAtTheEndpoint runs the demo against its
// in-process HTTP endpoint, losing some answers: every committed message arrives, and
// the copies published again are counted, since an endpoint keeps them all.
func TestTheHTTPTargetCountsEveryMessageAndEveryCopyAtTheEndpoint(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	o := DefaultOptions()
	o.Driver, o.Messages, o.Producers, o.Batch, o.LoseAnswerEvery, o.JSON = "http", 1000, 2, 50, 2, true
	o.DatabaseURL, o.Stdout, o.Stderr, o.Timeout = testenv.EmptyDatabase(t), &out, &errOut, time.Minute
	if err := Run(context.Background(), o); err != nil {
		t.Fatalf("demo --driver http: %v\n%s", err, errOut.String())
	}
	var s demoSummary
	if err := json.Unmarshal(out.Bytes(), &s); err != nil {
		t.Fatalf("summary %q: %v", out.String(), err)
	}
	if s.Committed != 900 || s.Delivered != 900 || s.Lost != 0 || s.Phantoms != 0 {
		t.Fatalf("summary: %+v", s)
	}
	if s.Duplicates == 0 {
		t.Errorf("no copies counted, though every second batch's answer was lost: %+v", s)
	}
}
