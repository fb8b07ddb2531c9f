package admin

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/outboxd/outboxd/migrations"
)

// checkTimeout bounds each readiness check.
const checkTimeout = 3 * time.Second

type health struct {
	Status string `json:"status"`
}

// Readiness is the answer of GET /readyz: 200 when every check passes, 503 otherwise.
type Readiness struct {
	Ready  bool          `json:"ready"`
	Checks []CheckResult `json:"checks"`
}

// CheckResult is one readiness check's state.
type CheckResult struct {
	Name  string `json:"name"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// healthz answers while the process can serve HTTP at all: liveness, nothing else.
func (s *server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, health{Status: "alive"})
}

// readyz runs the built-in checks (database reachable, schema at this build's
// migration) and the configured ones. Brokers are deliberately not among them: one
// unreachable broker pauses its own streams, and taking the replica out of service
// would not help the others.
func (s *server) readyz(w http.ResponseWriter, r *http.Request) {
	checks := append([]Check{
		{Name: "database", Probe: s.opt.Store.Ping},
		{Name: "schema", Probe: s.schemaCurrent},
	}, s.opt.Ready...)
	res := Readiness{Ready: true, Checks: make([]CheckResult, 0, len(checks))}
	for _, c := range checks {
		ctx, cancel := context.WithTimeout(r.Context(), checkTimeout)
		err := c.Probe(ctx)
		cancel()
		cr := CheckResult{Name: c.Name, OK: err == nil}
		if err != nil {
			cr.Error = err.Error()
			res.Ready = false
		}
		res.Checks = append(res.Checks, cr)
	}
	status := http.StatusOK
	if !res.Ready {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, res)
}

// schemaCurrent fails unless the table's recorded migration is this build's latest.
func (s *server) schemaCurrent(ctx context.Context) error {
	v, dirty, err := s.opt.Store.SchemaVersion(ctx)
	if err != nil {
		return err
	}
	want := migrations.Latest()
	switch {
	case dirty:
		return fmt.Errorf("%s: schema version %d is dirty (a migration failed half-way)", s.opt.Store.Table(), v)
	case v != want:
		return fmt.Errorf("%s: schema is at version %d, this build needs %d (outboxd migrate up)", s.opt.Store.Table(), v, want)
	}
	return nil
}
