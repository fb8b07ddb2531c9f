package metrics_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/outboxd/outboxd/events/metrics"
)

// The files that must stay paired with the metrics, relative to this package.
var (
	dashboardPath = filepath.Join("..", "..", "deploy", "grafana", "outboxd.json")
	alertsPath    = filepath.Join("..", "..", "deploy", "prometheus", "alerts.yml")
	docsPath      = filepath.Join("..", "..", "docs", "metrics.md")
)

// panelQuery is one query of one dashboard panel (or of a template variable).
type panelQuery struct {
	Panel  string
	Legend string // the target's legendFormat
	Expr   string
}

// key names the query as "panel title / legend".
func (q panelQuery) key() string { return q.Panel + " / " + q.Legend }

type dashboard struct {
	Panels     []dashboardPanel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type dashboardPanel struct {
	Title   string           `json:"title"`
	Type    string           `json:"type"`
	Panels  []dashboardPanel `json:"panels"` // a collapsed row's
	Targets []struct {
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
	} `json:"targets"`
}

// dashboardQueries returns every panel query of the dashboard, and the variable queries.
func dashboardQueries(t *testing.T) (panels []panelQuery, variables []panelQuery) {
	t.Helper()
	raw, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	var walk func([]dashboardPanel)
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			walk(p.Panels)
			for _, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("%s: panel %q has a target without an expression", dashboardPath, p.Title)
					continue
				}
				panels = append(panels, panelQuery{Panel: p.Title, Legend: tg.LegendFormat, Expr: tg.Expr})
			}
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("%s: panel %q has no query", dashboardPath, p.Title)
			}
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var s string
			if err := json.Unmarshal(v.Query, &s); err != nil {
				t.Fatalf("%s: variable %s: query is neither an object nor a string", dashboardPath, v.Name)
			}
			q.Query = s
		}
		variables = append(variables, panelQuery{Panel: "$" + v.Name, Expr: q.Query})
	}
	if len(panels) == 0 {
		t.Fatalf("%s: no panel queries found", dashboardPath)
	}
	return panels, variables
}

// alertRule is one rule of alerts.yml.
type alertRule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func alertRules(t *testing.T) []alertRule {
	t.Helper()
	raw, err := os.ReadFile(alertsPath)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Name  string      `yaml:"name"`
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &file); err != nil {
		t.Fatalf("%s: %v", alertsPath, err)
	}
	var rules []alertRule
	for _, g := range file.Groups {
		rules = append(rules, g.Rules...)
	}
	if len(rules) == 0 {
		t.Fatalf("%s: no rules found", alertsPath)
	}
	return rules
}

var (
	metricName     = regexp.MustCompile(`outboxd_[a-z_]+`)
	groupsByStream = regexp.MustCompile(`by \([^)]*\bstream\b`)
)

// metricNames returns the metric families expr reads: every outboxd_ name with a
// histogram's _bucket, _sum or _count suffix removed.
func metricNames(expr string) []string {
	var out []string
	for _, n := range metricName.FindAllString(expr, -1) {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(n, suffix); ok {
				n = base
				break
			}
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// registeredFamilies is every family a fully wired Metrics registers, by name.
func registeredFamilies(t *testing.T) map[string]string {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, map[string]string{"orders": "bus"}, map[string]string{"bus": "kafka"}, metrics.BuildInfo{})
	m.ObserveListener(&listener{})
	m.ObserveBus(busCounters{}, "deadletter")
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, mf := range families {
		out[mf.GetName()] = mf.GetType().String()
	}
	return out
}

func TestEveryMetricTheDashboardAndTheAlertsReadExists(t *testing.T) {
	registered := registeredFamilies(t)
	check := func(where, expr string) {
		names := metricNames(expr)
		if len(names) == 0 {
			t.Errorf("%s: %q reads no outboxd metric", where, expr)
		}
		for _, n := range names {
			if _, ok := registered[n]; !ok {
				t.Errorf("%s reads %s, which outboxd does not export (renamed or removed?)", where, n)
			}
		}
	}
	panels, variables := dashboardQueries(t)
	for _, q := range append(panels, variables...) {
		check(dashboardPath+" panel "+q.Panel, q.Expr)
	}
	for _, r := range alertRules(t) {
		check(alertsPath+" alert "+r.Alert, r.Expr)
	}
}

func TestEveryAlertRuleSaysHowLongHowBadAndWhat(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range alertRules(t) {
		switch {
		case r.Alert == "":
			t.Errorf("a rule without an alert name: %q", r.Expr)
		case seen[r.Alert]:
			t.Errorf("alert %s defined twice", r.Alert)
		}
		seen[r.Alert] = true
		if r.For == "" {
			t.Errorf("alert %s has no for: duration", r.Alert)
		}
		if s := r.Labels["severity"]; s != "warning" && s != "critical" {
			t.Errorf("alert %s: severity %q, want warning or critical", r.Alert, s)
		}
		if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
			t.Errorf("alert %s needs a summary and a description", r.Alert)
		}
	}
}

// TestTheMetricsReferenceDocumentsEveryMetricAndEveryAlert holds docs/metrics.md to the
// registry and to alerts.yml, both ways.
func TestTheMetricsReferenceDocumentsEveryMetricAndEveryAlert(t *testing.T) {
	raw, err := os.ReadFile(docsPath)
	if err != nil {
		t.Fatal(err)
	}
	docs := string(raw)
	registered := registeredFamilies(t)
	for name := range registered {
		if !strings.Contains(docs, "`"+name+"`") {
			t.Errorf("%s does not document %s", docsPath, name)
		}
	}
	for _, n := range metricNames(docs) {
		if _, ok := registered[n]; !ok {
			t.Errorf("%s mentions %s, which outboxd does not export", docsPath, n)
		}
	}
	for _, r := range alertRules(t) {
		if !strings.Contains(docs, r.Alert) {
			t.Errorf("%s has no runbook entry for alert %s", docsPath, r.Alert)
		}
	}
}

func TestMetricNamesAreReadOutOfExpressions(t *testing.T) {
	cases := []struct {
		name string
		expr string
		want []string
	}{
		{"a histogram's bucket, sum and count are its family", `histogram_quantile(0.9, rate(outboxd_delivery_lag_seconds_bucket[1m])) + outboxd_delivery_lag_seconds_sum / outboxd_delivery_lag_seconds_count`,
			[]string{"outboxd_delivery_lag_seconds"}},
		{"label values and other metrics are not outboxd names", `sum by (stream) (rate(outboxd_messages_published_total{stream=~"$stream"}[5m])) / up`,
			[]string{"outboxd_messages_published_total"}},
		{"two names are both found", `outboxd_stream_paused == 1 and outboxd_listener_connected`,
			[]string{"outboxd_stream_paused", "outboxd_listener_connected"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := metricNames(c.expr); !slices.Equal(got, c.want) {
				t.Errorf("metricNames(%q) = %v, want %v", c.expr, got, c.want)
			}
		})
	}
}

func TestTheDashboardIsProvisionableAndFiltersByStream(t *testing.T) {
	raw, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID           string `json:"uid"`
		SchemaVersion int    `json:"schemaVersion"`
		Panels        []struct {
			ID         int    `json:"id"`
			Title      string `json:"title"`
			Type       string `json:"type"`
			Datasource *struct {
				UID string `json:"uid"`
			} `json:"datasource"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name string `json:"name"`
				Type string `json:"type"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || d.SchemaVersion < 36 {
		t.Errorf("uid %q, schemaVersion %d: want a fixed uid and schemaVersion ≥ 36", d.UID, d.SchemaVersion)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
	}
	if vars["datasource"] != "datasource" || vars["stream"] != "query" || vars["outbox"] != "query" {
		t.Errorf("variables %v: want datasource (a data source picker), stream and outbox (queries)", vars)
	}
	ids := map[int]string{}
	for _, p := range d.Panels {
		if other, dup := ids[p.ID]; dup {
			t.Errorf("panels %q and %q share id %d", p.Title, other, p.ID)
		}
		ids[p.ID] = p.Title
		if p.Type == "row" {
			continue
		}
		// A provisioned dashboard has no import step to resolve ${DS_…} inputs: panels
		// must follow the data source variable.
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q does not use the ${datasource} variable", p.Title)
		}
		for _, tg := range p.Targets {
			if groupsByStream.MatchString(tg.Expr) && !strings.Contains(tg.Expr, `outbox=~"$outbox",stream=~"$stream"`) {
				t.Errorf("panel %q shows streams without following the $outbox and $stream variables: %s", p.Title, tg.Expr)
			}
		}
	}
}
