package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

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

// readyz runs, for each outbox, the built-in checks (database reachable, schema at this
// build's migration) and the configured ones. Brokers are deliberately not among them:
// one unreachable broker pauses its own streams, and taking the replica out of service
// would not help the others. With several outboxes each check is named
// <outbox>.<check>, so the answer says which outbox is down; ?outbox= checks one.
func (s *server) readyz(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	list := s.outboxes
	if q.Has("outbox") {
		o, err := s.pickAny(q.Get("outbox"))
		if err != nil {
			s.fail(w, r, err)
			return
		}
		list = []served{o}
	}
	res := Readiness{Ready: true, Checks: []CheckResult{}}
	for _, o := range list {
		prefix := ""
		if s.multi {
			prefix = o.Name + "."
		}
		var checks []Check
		if o.Store == nil {
			checks = []Check{{Name: "database", Probe: func(context.Context) error { return o.waiting() }}}
		} else {
			checks = append(databaseAndSchema(o.Store), o.Ready...)
		}
		for _, c := range checks {
			ctx, cancel := context.WithTimeout(r.Context(), checkTimeout)
			err := c.Probe(ctx)
			cancel()
			cr := CheckResult{Name: prefix + c.Name, OK: err == nil}
			if err != nil {
				cr.Error = err.Error()
				res.Ready = false
			}
			res.Checks = append(res.Checks, cr)
		}
	}
	status := http.StatusOK
	if !res.Ready {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, res)
}

// pickAny finds the outbox named name, connected or not.
func (s *server) pickAny(name string) (served, error) {
	for _, o := range s.outboxes {
		if o.Name == name {
			return o, nil
		}
	}
	_, err := s.pick(name, "") // the same refusal as the API's
	return served{}, err
}

// databaseAndSchema are the built-in checks, both answered by one question, in this
// order: reading the table's schema version reaches the database too, so a probe costs
// one round trip. The database check fails when the server gave no answer (a PostgreSQL
// error is an answer); the schema check fails unless the table's recorded migration is
// this build's latest.
func databaseAndSchema(st Store) []Check {
	var version uint
	var dirty bool
	var err error
	return []Check{
		{Name: "database", Probe: func(ctx context.Context) error {
			version, dirty, err = st.SchemaVersion(ctx)
			var pg *pgconn.PgError
			if err != nil && !errors.As(err, &pg) {
				return err
			}
			return nil
		}},
		{Name: "schema", Probe: func(context.Context) error {
			var pg *pgconn.PgError
			want := migrations.Latest()
			switch {
			case err != nil && !errors.As(err, &pg):
				return errors.New("not checked: the database did not answer")
			case err != nil:
				return err
			case dirty:
				return fmt.Errorf("%s: schema version %d is dirty (a migration failed half-way)", st.Table(), version)
			case version != want:
				return fmt.Errorf("%s: schema is at version %d, this build needs %d (outboxd migrate up)", st.Table(), version, want)
			}
			return nil
		}},
	}
}
