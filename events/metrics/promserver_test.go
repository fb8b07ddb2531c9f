package metrics_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// requireTool finds a binary of the Debian prometheus package, failing t with what to
// install when it is missing: this test never skips.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found on PATH: this test runs the real Prometheus server and promtool.\n"+
			"Install the Debian package that provides both (/usr/bin/prometheus, /usr/bin/promtool):\n"+
			"    sudo apt-get install -y --no-install-recommends prometheus\n"+
			"`make test` installs it when run as root. The package may start a system service; this "+
			"test does not need it (it starts its own server on a free port).", name)
	}
	return path
}

// prometheusServer is a real Prometheus started for one test, scraping one target every
// second and evaluating one rule file every second.
type prometheusServer struct {
	base string
	cmd  *exec.Cmd
	logs *lockedBuffer
	http *http.Client
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startPrometheus starts Prometheus scraping target (host:port) as job "outboxd" with
// rules loaded, and waits until it is ready. It stops when t ends.
func startPrometheus(t *testing.T, target, rules string) *prometheusServer {
	t.Helper()
	bin := requireTool(t, "prometheus")
	rulesAbs, err := filepath.Abs(rules)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - %q
scrape_configs:
  - job_name: outboxd
    static_configs:
      - targets: [%q]
`, rulesAbs, target)
	configPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(configPath, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	p := &prometheusServer{base: "http://" + addr, logs: &lockedBuffer{}, http: &http.Client{Timeout: 5 * time.Second}}
	p.cmd = exec.Command(bin,
		"--config.file="+configPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--log.level=warn",
	)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited: //nolint:errcheck // how it ended after our interrupt says nothing
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-exited //nolint:errcheck // killed: the error only says so
		}
		if t.Failed() {
			t.Logf("prometheus output:\n%s", p.logs.String())
		}
	})
	p.await(t, 20*time.Second, "Prometheus to be ready", func() (bool, error) {
		select {
		case err := <-exited:
			exited <- err
			return false, fmt.Errorf("prometheus exited: %v\n%s", err, p.logs.String()) //nolint:errorlint // err is nil after exit status 0
		default:
		}
		resp, err := p.http.Get(p.base + "/-/ready")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	return p
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// await polls cond (Prometheus is another process: there is no event to wait on) until
// it holds, failing t when cond fails or timeout passes.
func (p *prometheusServer) await(t *testing.T, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	if !p.poll(t, timeout, what, cond) {
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}

// poll is await that reports a timeout instead of failing, for waits whose checks follow.
func (p *prometheusServer) poll(t *testing.T, timeout time.Duration, what string, cond func() (bool, error)) bool {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok || time.Now().After(deadline) {
			return ok
		}
		<-tick.C
	}
}

// apiResponse is the envelope of every Prometheus HTTP API answer.
type apiResponse struct {
	Status    string          `json:"status"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
	Data      json.RawMessage `json:"data"`
}

func (p *prometheusServer) get(ctx context.Context, path string, params url.Values) (apiResponse, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+path+"?"+params.Encode(), nil)
	if err != nil {
		return apiResponse{}, err
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return apiResponse{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return apiResponse{}, err
	}
	var r apiResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return apiResponse{}, fmt.Errorf("%s: HTTP %d: %s", path, resp.StatusCode, body)
	}
	return r, nil
}

// sample is one element of an instant vector.
type sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

func (s sample) float() float64 {
	str, _ := s.Value[1].(string)
	f, err := strconv.ParseFloat(str, 64)
	if err != nil {
		return math.NaN()
	}
	return f
}

// query evaluates expr now. A Prometheus error (an invalid expression) is returned as err.
func (p *prometheusServer) query(ctx context.Context, expr string) ([]sample, error) {
	r, err := p.get(ctx, "/api/v1/query", url.Values{"query": {expr}})
	if err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s: %s", r.ErrorType, r.Error)
	}
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(r.Data, &data); err != nil {
		return nil, err
	}
	switch data.ResultType {
	case "vector":
		var v []sample
		err := json.Unmarshal(data.Result, &v)
		return v, err
	case "scalar":
		var v [2]any
		err := json.Unmarshal(data.Result, &v)
		return []sample{{Value: v}}, err
	}
	return nil, fmt.Errorf("result type %s, want an instant vector", data.ResultType)
}

// labelValues answers a Grafana label_values(selector, label) variable query.
func (p *prometheusServer) labelValues(ctx context.Context, selector, label string) ([]string, error) {
	r, err := p.get(ctx, "/api/v1/label/"+url.PathEscape(label)+"/values", url.Values{"match[]": {selector}})
	if err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s: %s", r.ErrorType, r.Error)
	}
	var values []string
	err = json.Unmarshal(r.Data, &values)
	return values, err
}

// loadedRule is one rule as Prometheus loaded and evaluated it.
type loadedRule struct {
	Name           string    `json:"name"`
	Query          string    `json:"query"`
	Health         string    `json:"health"`
	LastError      string    `json:"lastError"`
	State          string    `json:"state"` // inactive, pending, firing
	LastEvaluation time.Time `json:"lastEvaluation"`
}

func (p *prometheusServer) rules(ctx context.Context) ([]loadedRule, error) {
	r, err := p.get(ctx, "/api/v1/rules", url.Values{"type": {"alert"}})
	if err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s: %s", r.ErrorType, r.Error)
	}
	var data struct {
		Groups []struct {
			Rules []loadedRule `json:"rules"`
		} `json:"groups"`
	}
	if err := json.Unmarshal(r.Data, &data); err != nil {
		return nil, err
	}
	var out []loadedRule
	for _, g := range data.Groups {
		out = append(out, g.Rules...)
	}
	return out, nil
}

// promtool runs promtool with args and stdin, failing t with its output unless it exits 0.
func promtool(t *testing.T, stdin []byte, args ...string) {
	t.Helper()
	cmd := exec.Command(requireTool(t, "promtool"), args...)
	cmd.Stdin = bytes.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}
