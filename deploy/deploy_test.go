// Package deploy_test holds deploy/ to what outboxd actually is: the compose stack, the
// Kubernetes manifests and the systemd unit must parse, point their probes at the admin
// API (/healthz and /readyz on port 9600), carry configurations that outboxd accepts, and
// build the binary the Makefile builds. No Docker engine or cluster is needed.
//
// Package deploy_test is internal to outboxd, with no compatibility promise: its exported
// names serve outboxd's own packages and may change in any release.
package deploy_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/drivers"
	"github.com/outboxd/outboxd/router/jetstream"
	"github.com/outboxd/outboxd/router/kafka"
	"github.com/outboxd/outboxd/router/nats"
)

// The admin API every probe and scrape must reach.
const (
	adminPort = 9600
	healthz   = "/healthz"
	readyz    = "/readyz"
)

// repoRoot is the repository, seen from this package's directory.
const repoRoot = ".."

// decodeYAML reads every document of a YAML file into a value of type T each.
func decodeYAML[T any](t *testing.T, path string) []T {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []T
	for {
		var doc T
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", path, len(docs)+1, err)
		}
		docs = append(docs, doc)
	}
}

// loadConfig validates a configuration the way outboxd does: the YAML text as the
// configuration file ("" for none) and environ as the process environment.
func loadConfig(t *testing.T, file string, environ []string) *config.Config {
	t.Helper()
	path := ""
	if file != "" {
		path = filepath.Join(t.TempDir(), "outboxd.yaml")
		if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := config.Load(path, environ, drivers.All())
	if err != nil {
		t.Fatalf("outboxd refuses this configuration:\n%v", err)
	}
	return cfg
}

// checkAdminAddr fails unless addr makes the admin API reachable from outside its
// container on port 9600.
func checkAdminAddr(t *testing.T, where, addr string) {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port != "9600" || (host != "" && host != "0.0.0.0" && host != "::") {
		t.Errorf("%s: http.addr %q, want every interface on port %d (\":%d\") so probes and Prometheus reach it", where, addr, adminPort, adminPort)
	}
}

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image string `yaml:"image"`
	Build *struct {
		Context    string            `yaml:"context"`
		Dockerfile string            `yaml:"dockerfile"`
		Args       map[string]string `yaml:"args"`
	} `yaml:"build"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	Volumes     []string          `yaml:"volumes"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
	ReadOnly bool     `yaml:"read_only"`
	CapDrop  []string `yaml:"cap_drop"`
}

func compose(t *testing.T) composeFile {
	t.Helper()
	docs := decodeYAML[composeFile](t, "compose.yaml")
	if len(docs) != 1 {
		t.Fatalf("compose.yaml holds %d documents, want 1", len(docs))
	}
	return docs[0]
}

// mount is one bind mount of a compose service: source relative to deploy/, target in
// the container.
type mount struct{ source, target string }

func bindMounts(s composeService) []mount {
	var out []mount
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && (strings.HasPrefix(parts[0], "./") || strings.HasPrefix(parts[0], "../")) {
			out = append(out, mount{source: parts[0], target: parts[1]})
		}
	}
	return out
}

func TestComposeRunsTheWholeStack(t *testing.T) {
	t.Parallel()
	c := compose(t)
	for _, name := range []string{"postgres", "nats", "kafka", "outboxd", "prometheus", "grafana"} {
		if _, ok := c.Services[name]; !ok {
			t.Errorf("service %s is missing", name)
		}
	}
	if img := c.Services["postgres"].Image; img != "postgres:15" && !strings.HasPrefix(img, "postgres:15.") {
		t.Errorf("postgres image %q, want PostgreSQL 15", img)
	}
	if !slices.Contains(c.Services["nats"].Command, "-js") {
		t.Errorf("nats command %q does not turn JetStream on (-js)", c.Services["nats"].Command)
	}
	kafka := c.Services["kafka"]
	roles := kafka.Environment["KAFKA_PROCESS_ROLES"]
	if !strings.HasPrefix(kafka.Image, "apache/kafka:") || !strings.Contains(roles, "broker") || !strings.Contains(roles, "controller") {
		t.Errorf("kafka: image %q with process roles %q, want apache/kafka as broker and controller (KRaft)", kafka.Image, roles)
	}
	if _, zk := kafka.Environment["KAFKA_ZOOKEEPER_CONNECT"]; zk {
		t.Error("kafka is configured with ZooKeeper, want KRaft alone")
	}

	for name, s := range c.Services {
		// Long-running dependencies report health so that what depends on them waits;
		// outboxd's image has no shell or HTTP client to probe itself with (Prometheus
		// watches it), and one-shot setup jobs report by exiting.
		oneShot := strings.HasSuffix(name, "-setup")
		if !oneShot && name != "outboxd" && (s.Healthcheck == nil || len(s.Healthcheck.Test) == 0) {
			t.Errorf("service %s has no healthcheck", name)
		}
		for dep, d := range s.DependsOn {
			target, ok := c.Services[dep]
			switch {
			case !ok:
				t.Errorf("service %s depends on %s, which does not exist", name, dep)
			case d.Condition == "service_healthy" && target.Healthcheck == nil:
				t.Errorf("service %s waits for %s to be healthy, but %s has no healthcheck", name, dep, dep)
			case d.Condition == "service_completed_successfully" && !strings.HasSuffix(dep, "-setup"):
				t.Errorf("service %s waits for %s to complete, but %s is not a one-shot job", name, dep, dep)
			}
		}
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			if strings.HasPrefix(src, ".") || strings.HasPrefix(src, "/") {
				continue
			}
			if _, ok := c.Volumes[src]; !ok {
				t.Errorf("service %s mounts the volume %q, which is not declared", name, src)
			}
		}
	}
	for _, m := range []string{"postgres", "kafka-setup", "nats-setup"} {
		if d, ok := c.Services["outboxd"].DependsOn[m]; !ok || d.Condition == "service_started" {
			t.Errorf("outboxd does not wait for %s to be ready", m)
		}
	}
}

func TestComposeOutboxdIsTheImageRunningAValidConfiguration(t *testing.T) {
	t.Parallel()
	c := compose(t)
	o := c.Services["outboxd"]
	if o.Build == nil {
		t.Fatal("outboxd is not built from the repository")
	}
	if ctx := filepath.Clean(o.Build.Context); ctx != filepath.Clean(repoRoot) {
		t.Errorf("outboxd build context %q, want the repository root %q", o.Build.Context, repoRoot)
	}
	if df := filepath.Join(o.Build.Context, o.Build.Dockerfile); filepath.Clean(df) != filepath.Join(repoRoot, "deploy", "Dockerfile") {
		t.Errorf("outboxd is built from %s, want deploy/Dockerfile", df)
	}
	if !slices.Equal(o.Command, []string{"run", "--migrate"}) {
		t.Errorf("outboxd command %q, want run --migrate", o.Command)
	}
	if !slices.Contains(o.Ports, "9600:9600") {
		t.Errorf("outboxd ports %q do not publish the admin API (9600:9600)", o.Ports)
	}
	if !o.ReadOnly || !slices.Contains(o.CapDrop, "ALL") {
		t.Errorf("outboxd: read_only %v, cap_drop %q; want a read-only root and no capabilities", o.ReadOnly, o.CapDrop)
	}

	var environ []string
	for k, v := range o.Environment {
		environ = append(environ, k+"="+v)
	}
	cfg := loadConfig(t, "", environ)
	checkAdminAddr(t, "compose outboxd", cfg.HTTP.Addr)

	types := map[string]string{} // stream → driver type
	for name, s := range cfg.Streams {
		d := cfg.Drivers[s.Driver]
		types[name] = d.Type
		switch o := d.Options.(type) {
		case kafka.Options:
			for _, b := range o.Brokers {
				host, port, _ := net.SplitHostPort(b)
				if _, ok := c.Services[host]; !ok || !strings.Contains(c.Services[host].Environment["KAFKA_ADVERTISED_LISTENERS"], "://"+b) {
					t.Errorf("stream %s: broker %s is not a listener the %s service advertises (port %s)", name, b, host, port)
				}
			}
		case jetstream.Options, nats.Options:
			nc := o.(router.Summarizer).Summary().Servers[0]
			u, err := url.Parse(nc)
			if err != nil || c.Services[u.Hostname()].Image == "" || u.Port() != "4222" {
				t.Errorf("stream %s: NATS URL %q does not name the compose NATS service on 4222", name, nc)
			}
		}
	}
	kinds := slices.Sorted(func(yield func(string) bool) {
		for _, v := range types {
			if !yield(v) {
				return
			}
		}
	})
	if len(cfg.Streams) != 2 || !slices.Equal(kinds, []string{jetstream.Type, kafka.Type}) {
		t.Errorf("outboxd streams → driver types %v, want two streams: one kafka, one jetstream", types)
	}
}

func TestComposeMountsExistAndAgreeWithEachOther(t *testing.T) {
	t.Parallel()
	c := compose(t)
	targets := map[string]string{} // container path → source, for prometheus and grafana
	for name, s := range c.Services {
		for _, m := range bindMounts(s) {
			if _, err := os.Stat(m.source); err != nil {
				t.Errorf("service %s mounts %s, which does not exist: %v", name, m.source, err)
			}
			targets[name+":"+m.target] = m.source
		}
	}

	// Prometheus: its configuration loads the mounted rules and scrapes outboxd's port.
	type promConfig struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			MetricsPath   string `yaml:"metrics_path"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	promFile := targets["prometheus:/etc/prometheus/prometheus.yml"]
	if promFile == "" {
		t.Fatal("prometheus does not mount its configuration at /etc/prometheus/prometheus.yml")
	}
	prom := decodeYAML[promConfig](t, promFile)[0]
	for _, rf := range prom.RuleFiles {
		in := rf
		if !filepath.IsAbs(in) {
			in = filepath.Join("/etc/prometheus", rf)
		}
		if _, ok := targets["prometheus:"+in]; !ok {
			t.Errorf("prometheus loads rules from %s, which compose does not mount", in)
		}
	}
	scraped := false
	for _, sc := range prom.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			if slices.Contains(st.Targets, "outboxd:9600") && (sc.MetricsPath == "" || sc.MetricsPath == "/metrics") {
				scraped = true
			}
		}
	}
	if !scraped {
		t.Error("prometheus does not scrape outboxd:9600/metrics")
	}

	// Grafana: the provisioned datasource is the compose Prometheus, the dashboard
	// provider reads the directory the dashboard is mounted into, and the dashboard's
	// datasource references resolve.
	var provisioning string
	dashboards := map[string]string{} // container path → source
	for target, src := range targets {
		switch {
		case target == "grafana:/etc/grafana/provisioning":
			provisioning = src
		case strings.HasPrefix(target, "grafana:") && strings.HasSuffix(target, ".json"):
			dashboards[strings.TrimPrefix(target, "grafana:")] = src
		}
	}
	if provisioning == "" || len(dashboards) == 0 {
		t.Fatalf("grafana mounts provisioning %q and dashboards %v, want both", provisioning, dashboards)
	}
	type datasources struct {
		Datasources []struct {
			UID       string `yaml:"uid"`
			Type      string `yaml:"type"`
			URL       string `yaml:"url"`
			IsDefault bool   `yaml:"isDefault"`
		} `yaml:"datasources"`
	}
	ds := decodeYAML[datasources](t, filepath.Join(provisioning, "datasources", "prometheus.yaml"))[0].Datasources
	if len(ds) != 1 || ds[0].Type != "prometheus" || ds[0].URL != "http://prometheus:9090" || !ds[0].IsDefault {
		t.Errorf("grafana datasources %+v, want one default prometheus at http://prometheus:9090", ds)
	}
	type providers struct {
		Providers []struct {
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	ps := decodeYAML[providers](t, filepath.Join(provisioning, "dashboards", "outboxd.yaml"))[0].Providers
	for in, src := range dashboards {
		if len(ps) != 1 || ps[0].Options.Path != filepath.Dir(in) {
			t.Errorf("dashboard mounted at %s, but the dashboard provider reads %+v", in, ps)
		}
		checkDashboardDatasources(t, src, ds[0].UID)
	}
	if home := c.Services["grafana"].Environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]; home != "" && dashboards[home] == "" {
		t.Errorf("grafana's home dashboard %s is not a mounted dashboard", home)
	}
}

// checkDashboardDatasources fails unless every datasource the dashboard names is the
// provisioned one (by uid) or its own datasource variable of type prometheus.
func checkDashboardDatasources(t *testing.T, path, uid string) {
	t.Helper()
	var dash struct {
		Templating struct {
			List []struct {
				Name  string `yaml:"name"`
				Type  string `yaml:"type"`
				Query any    `yaml:"query"`
			} `yaml:"list"`
		} `yaml:"templating"`
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &dash); err != nil { // JSON is YAML
		t.Fatalf("%s: %v", path, err)
	}
	vars := map[string]bool{}
	for _, v := range dash.Templating.List {
		if v.Type == "datasource" && v.Query == "prometheus" {
			vars["${"+v.Name+"}"], vars["$"+v.Name] = true, true
		}
	}
	var refs []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if k == "datasource" {
					switch d := x.(type) {
					case map[string]any:
						u, _ := d["uid"].(string)
						refs = append(refs, u)
					case string:
						refs = append(refs, d)
					}
					continue
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	var doc any
	_ = yaml.Unmarshal(data, &doc)
	walk(doc)
	for _, r := range refs {
		if r != uid && !vars[r] && r != "-- Grafana --" && r != "grafana" {
			t.Errorf("%s refers to datasource %q: neither the provisioned uid %q nor a prometheus datasource variable", path, r, uid)
		}
	}
}
