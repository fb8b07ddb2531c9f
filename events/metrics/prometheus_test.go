package metrics_test

import (
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/outboxd/outboxd/events"
)

// quietQueries are the dashboard queries ("panel title / legend") this test's load
// leaves at zero, each with the reason. Every other query must show activity (a finite
// value above zero); every query, quiet or not, must return series. A new query must be
// active or be added here.
var quietQueries = map[string]string{
	"Oldest pending age / {{stream}} {{outbox}}":                        "the load drains before the last sample",
	"Retries, deferrals and releases / released {{stream}} {{outbox}}":  "nothing is shut down during the load",
	"Database errors / {{operation}}":                                   "no database failure is provoked",
	"Partitions created / dropped / created":                            "the test table is not partitioned",
	"Partitions created / dropped / dropped":                            "the test table is not partitioned",
	"Default-partition rows / rows":                                     "the test table is not partitioned",
	"Notification listener / reconnects":                                "the listener keeps its connection",
	"Event bus drops / {{subscriber}}":                                  "the dead-letter queue never fills",
	"Held back and order violations / violations {{stream}} {{outbox}}": "no broker of the load takes a message after refusing its predecessor",
	"Lease conflicts, reclaimed leases and broker duplicates / duplicates {{stream}} {{outbox}}": "no JetStream stream of the load is sent a message it already holds " +
		"(dispatch's TestARePublishTheStreamAlreadyHeldIsCountedAsADuplicateOfItsStream feeds the series)",
}

// firingAlerts are the rules this test's load makes true, so Prometheus must have them
// pending (or firing) once it has scraped the load.
var firingAlerts = []string{
	"OutboxdMessagesFailed",           // a permanent failure, flaky messages, max_defer
	"OutboxdLeaseConflicts",           // the stalled batch
	"OutboxdStreamPaused",             // ledger's broker is down
	"OutboxdDeadLetterForwardFailing", // ledger's dead letters go to the same broker
	"OutboxdOrderedKeyBlocked",        // sequence's key behind a message too large for NATS
}

// TestPrometheusScrapesOutboxdUnderLoadAndEvaluatesEveryPanelAndRule runs the real
// Prometheus server (Debian package prometheus) against a dispatcher delivering a few
// thousand rows from real PostgreSQL to real NATS, then evaluates every dashboard query
// and every alert rule through Prometheus' HTTP API. A renamed metric leaves a panel or
// a rule without data, and fails here.
func TestPrometheusScrapesOutboxdUnderLoadAndEvaluatesEveryPanelAndRule(t *testing.T) {
	t.Parallel()
	requireTool(t, "prometheus")
	requireTool(t, "promtool")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	d := newDispatcher(t, reg)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	t.Cleanup(srv.Close)
	target, _ := strings.CutPrefix(srv.URL, "http://")
	prom := startPrometheus(t, target, alertsPath)

	// Prometheus must see the counters at zero before the load, or rate() has nothing
	// to compare with.
	prom.await(t, 20*time.Second, "a first scrape of outboxd", func() (bool, error) {
		v, err := prom.query(ctx, `up{job="outboxd"} == 1`)
		return err == nil && len(v) == 1, err
	})

	d.start(t)
	d.insert(t, ctx, "orders", topicStall, 1, 10)
	for range 30 {
		d.insert(t, ctx, "orders", "orders.created", 100, 200) // 30 commits, 30 notifications
	}
	d.insert(t, ctx, "orders", topicFlaky, 3, 10)
	d.insert(t, ctx, "orders", "orders.huge", 1, 2<<20) // above NATS max_payload: permanent
	d.insertExpired(t, ctx, "orders", 4)
	d.probe.await(t, 60*time.Second, "the orders stream's every outcome", func(p *probe) bool {
		return p.published["orders"] >= 3001 && p.failed["permanent"] >= 1 && p.failed["attempts_exhausted"] >= 3 &&
			p.leaseConflicts >= 1 && p.reclaimedRows >= 1 && p.retentionDeleted > 0 &&
			p.deadLetter[events.DeadLetterForwardedOK] >= 3 && p.deadLetter[events.DeadLetterGaveUp] >= 1 &&
			p.expired["orders"] >= 4
	})
	// Only now the ledger: the forwarder handles dead letters one at a time, and the
	// ledger's, bound for the broker that is down, would hold up the orders' ones.
	d.insert(t, ctx, "ledger", "ledger.entry", 5, 10)
	d.insertBlockedKey(t, ctx, "sequence", 3)
	d.probe.await(t, 30*time.Second, "the ledger and sequence streams' every outcome", func(p *probe) bool {
		return p.failed["max_defer"] >= 1 && p.breakerOpened["ledger"] && p.deadLetter[events.DeadLetterRetried] >= 1 &&
			p.heldBack["sequence"] >= 3 && p.blocked["sequence"] == (events.BlockedKeys{Stream: "sequence", Keys: 1, Waiting: 3})
	})
	// The backlog gauges hold the last sample, and a slow sample spaces the next out
	// (the sampler's 5 % rule: a 600 ms sample on a loaded CI machine waits 12 s), so
	// wait for a sample that saw the sequence stream's waiting messages.
	d.probe.await(t, 30*time.Second, "a backlog sample taken after the load", func(p *probe) bool {
		return p.backlog["sequence"].Pending >= 3
	})
	if d.listener.Received() == 0 {
		t.Errorf("the listener received no notification for 34 commits")
	}
	loaded := float64(time.Now().UnixMilli()) / 1000

	// Wait for a scrape taken after the load, then for the rules it makes true.
	prom.await(t, 20*time.Second, "a scrape after the load", func() (bool, error) {
		v, err := prom.query(ctx, `timestamp(up{job="outboxd"})`)
		return err == nil && len(v) == 1 && v[0].float() > loaded, err
	})
	// The checks below say which alert stayed inactive, if one does.
	prom.poll(t, 10*time.Second, "the alerts the load makes true", func() (bool, error) {
		rules, err := prom.rules(ctx)
		if err != nil {
			return false, err
		}
		active := 0
		for _, r := range rules {
			if slices.Contains(firingAlerts, r.Name) && r.State != "inactive" {
				active++
			}
		}
		return active == len(firingAlerts), nil
	})

	t.Run("every dashboard panel returns data", func(t *testing.T) {
		panels, variables := dashboardQueries(t)
		keys := map[string]bool{}
		for _, q := range panels {
			if keys[q.key()] {
				t.Errorf("two queries are named %q: give them distinct legends", q.key())
			}
			keys[q.key()] = true
		}
		for key := range quietQueries {
			if !keys[key] {
				t.Errorf("quietQueries names %q, which the dashboard does not have", key)
			}
		}
		for _, q := range panels {
			expr := grafanaExpr(q.Expr)
			v, err := prom.query(ctx, expr)
			switch {
			case err != nil:
				t.Errorf("%s: %s: %v", q.key(), expr, err)
				continue
			case len(v) == 0:
				t.Errorf("%s returns no series: %s", q.key(), expr)
				continue
			}
			if _, quiet := quietQueries[q.key()]; quiet {
				continue
			}
			active := false
			for _, s := range v {
				if f := s.float(); f > 0 && !math.IsInf(f, 0) {
					active = true
				}
			}
			if !active {
				t.Errorf("%s shows nothing above zero after the load (a metric not fed? or add it to quietQueries with the reason): %s",
					q.key(), expr)
			}
		}
		labelValues := regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_]\w*)\)$`)
		for _, q := range variables {
			m := labelValues.FindStringSubmatch(strings.TrimSpace(q.Expr))
			if m == nil {
				t.Errorf("variable %s: %q is not label_values(selector, label)", q.Panel, q.Expr)
				continue
			}
			values, err := prom.labelValues(ctx, m[1], m[2])
			if err != nil {
				t.Errorf("variable %s: %v", q.Panel, err)
			}
			if m[2] != "stream" {
				// $outbox: the dispatcher scraped here serves no outboxes list, so it has
				// no value to offer; the query must still run, and "All" (.*) matches
				// series without the label.
				continue
			}
			for _, want := range []string{"audit", "ledger", "orders", "sequence"} {
				if !slices.Contains(values, want) {
					t.Errorf("variable %s offers %v, missing configured stream %s", q.Panel, values, want)
				}
			}
		}
	})

	t.Run("every alert rule is valid and reads exported series", func(t *testing.T) {
		loaded, err := prom.rules(ctx)
		if err != nil {
			t.Fatal(err)
		}
		byName := map[string]loadedRule{}
		for _, r := range loaded {
			byName[r.Name] = r
		}
		for _, r := range alertRules(t) {
			got, ok := byName[r.Alert]
			switch {
			case !ok:
				t.Errorf("alert %s: not loaded by Prometheus", r.Alert)
			case got.Health != "ok" || got.LastError != "":
				t.Errorf("alert %s: health %q, error %q", r.Alert, got.Health, got.LastError)
			case got.LastEvaluation.IsZero():
				t.Errorf("alert %s: never evaluated", r.Alert)
			}
			if _, err := prom.query(ctx, r.Expr); err != nil {
				t.Errorf("alert %s: %s: %v", r.Alert, r.Expr, err)
			}
			for _, name := range metricNames(r.Expr) {
				v, err := prom.query(ctx, "count("+name+")")
				if err != nil || len(v) == 0 {
					t.Errorf("alert %s reads %s, which Prometheus has no series of (%v)", r.Alert, name, err)
				}
			}
			if slices.Contains(firingAlerts, r.Alert) && got.State == "inactive" {
				t.Errorf("alert %s is inactive after a load that makes it true", r.Alert)
			}
		}
	})

	t.Run("the queries in docs/metrics.md return data", func(t *testing.T) {
		for _, expr := range docsQueries(t) {
			v, err := prom.query(ctx, expr)
			if err != nil || len(v) == 0 {
				t.Errorf("docs query %s: %d series, error %v", expr, len(v), err)
			}
		}
	})

	t.Run("promtool accepts the rules and the scraped metrics", func(t *testing.T) {
		promtool(t, nil, "check", "rules", alertsPath)
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		promtool(t, body, "check", "metrics")
	})
}

// grafanaExpr replaces the dashboard's variables the way Grafana would with every stream
// selected and a one-minute interval.
func grafanaExpr(expr string) string {
	return strings.NewReplacer(
		"$__rate_interval", "1m", "${__rate_interval}", "1m",
		"$__interval", "1m", "${__interval}", "1m",
		"$__range", "5m", "${__range}", "5m",
		"${stream}", ".*", "$stream", ".*", "${outbox}", ".*", "$outbox", ".*",
	).Replace(expr)
}

// docsQueries returns the PromQL lines of docs/metrics.md's promql blocks.
func docsQueries(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(docsPath)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	in := false
	for line := range strings.Lines(string(raw)) {
		line = strings.TrimSpace(line)
		switch {
		case line == "```promql":
			in = true
		case line == "```":
			in = false
		case in && line != "" && !strings.HasPrefix(line, "#"):
			out = append(out, line)
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s has no promql block", docsPath)
	}
	return out
}
