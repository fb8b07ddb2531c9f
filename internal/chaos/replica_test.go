//go:build linux

package chaos_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// replica is one outboxd process. A slot ("r2") keeps its name across restarts; each
// process in it has its own replica id ("r2", then "r2.2", …) because running
// replicas must not share one.
type replica struct {
	slot string
	id   string
	cmd  *exec.Cmd
	log  string // the file its stdout and stderr go to

	mu       sync.Mutex
	admin    string // host:port of its admin endpoints, from its log
	adminSet chan struct{}
	last     metricsSample // the latest successful scrape
	exited   chan struct{}
	exitErr  error
	ending   bool // we killed it or asked it to stop: its exit is expected
	stopped  bool // SIGSTOPped and not yet continued
}

// replicaSpec says how to start one process.
type replicaSpec struct {
	bin, config, slot, id, dir string
	databaseURL                string // overrides the file's, naming the replica to PostgreSQL
	migrate                    bool
	gate                       string // a FIFO to wait on before exec, so several start at one instant
}

func startReplica(spec replicaSpec) (*replica, error) {
	args := []string{"run", "--config", spec.config}
	if spec.migrate {
		args = append(args, "--migrate")
	}
	var cmd *exec.Cmd
	if spec.gate != "" {
		// The shell blocks opening the FIFO until the harness opens it for writing,
		// which releases every waiting replica at the same instant; exec keeps the pid.
		script := `read _ < "$1"; shift; exec "$@"`
		cmd = exec.Command("/bin/sh", append([]string{"-c", script, "sh", spec.gate, spec.bin}, args...)...)
	} else {
		cmd = exec.Command(spec.bin, args...)
	}
	cmd.Env = append(outboxdFreeEnv(), "OUTBOXD_REPLICA_ID="+spec.id)
	if spec.databaseURL != "" {
		cmd.Env = append(cmd.Env, "OUTBOXD_DATABASE_URL="+spec.databaseURL)
	}
	cmd.Dir = spec.dir
	// A replica must not outlive a test process that died.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	r := &replica{slot: spec.slot, id: spec.id, cmd: cmd, adminSet: make(chan struct{}), exited: make(chan struct{}),
		log: filepath.Join(spec.dir, spec.id+".log")}
	f, err := os.Create(r.log)
	if err != nil {
		return nil, err
	}
	sink := &logSink{w: f, line: r.sawLine}
	cmd.Stdout, cmd.Stderr = sink, sink
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start replica %s: %w", spec.id, err)
	}
	go func() {
		err := cmd.Wait()
		sink.flush()
		f.Close()
		r.mu.Lock()
		r.exitErr = err
		r.mu.Unlock()
		close(r.exited)
	}()
	return r, nil
}

// outboxdFreeEnv is this process's environment without OUTBOXD_ variables: a replica
// is configured by its file and its replica id only.
func outboxdFreeEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OUTBOXD_") {
			env = append(env, kv)
		}
	}
	return env
}

// sawLine learns the admin address from the line outboxd logs when it listens.
func (r *replica) sawLine(line []byte) {
	if !bytes.Contains(line, []byte("admin endpoints listening")) {
		return
	}
	var rec struct {
		Addr string `json:"addr"`
	}
	if json.Unmarshal(line, &rec) != nil || rec.Addr == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.admin == "" {
		r.admin = rec.Addr
		close(r.adminSet)
	}
}

// pid is the process id.
func (r *replica) pid() int { return r.cmd.Process.Pid }

// alive reports whether the process has not exited.
func (r *replica) alive() bool {
	select {
	case <-r.exited:
		return false
	default:
		return true
	}
}

// waitReady waits until the replica answers /readyz with 200.
func (r *replica) waitReady(ctx context.Context) error {
	select {
	case <-r.adminSet:
	case <-r.exited:
		return fmt.Errorf("replica %s exited before it listened: %v\n%s", r.id, r.exitErr, r.tail(15)) //nolint:errorlint // exitErr is nil after a clean exit
	case <-ctx.Done():
		return fmt.Errorf("replica %s never logged its admin address: %w\n%s", r.id, ctx.Err(), r.tail(15))
	}
	for {
		code, _, err := r.get(ctx, "/readyz")
		if err == nil && code == http.StatusOK {
			return nil
		}
		select {
		case <-r.exited:
			return fmt.Errorf("replica %s exited before it was ready: %v\n%s", r.id, r.exitErr, r.tail(15)) //nolint:errorlint // exitErr is nil after a clean exit
		case <-ctx.Done():
			return fmt.Errorf("replica %s not ready (last: %d %v): %w\n%s", r.id, code, err, ctx.Err(), r.tail(15)) //nolint:errorlint // err is nil when the last answer was a status
		case <-time.After(50 * time.Millisecond):
		}
	}
}

var httpClient = &http.Client{Timeout: 10 * time.Second}

func (r *replica) get(ctx context.Context, path string) (int, []byte, error) {
	r.mu.Lock()
	addr := r.admin
	r.mu.Unlock()
	if addr == "" {
		return 0, nil, errors.New("no admin address yet")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return 0, nil, err
	}
	res, err := httpClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	return res.StatusCode, body, err
}

// scrape reads the replica's /metrics and keeps the sample as its latest.
func (r *replica) scrape(ctx context.Context) (metricsSample, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	code, body, err := r.get(ctx, "/metrics")
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", r.id, err)
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: status %d", r.id, code)
	}
	m := parseMetrics(body)
	r.mu.Lock()
	r.last = m
	r.mu.Unlock()
	return m, nil
}

// lastSample is the latest successful scrape (nil before the first).
func (r *replica) lastSample() metricsSample {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

func (r *replica) signal(sig syscall.Signal) error {
	r.mu.Lock()
	switch sig {
	case syscall.SIGSTOP:
		r.stopped = true
	case syscall.SIGCONT:
		r.stopped = false
	case syscall.SIGKILL, syscall.SIGTERM:
		r.ending, r.stopped = true, false
	}
	r.mu.Unlock()
	if err := r.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %v to %s: %w", sig, r.id, err)
	}
	return nil
}

// kill sends SIGKILL and waits until the process is gone.
func (r *replica) kill() error {
	if err := r.signal(syscall.SIGKILL); err != nil && r.alive() {
		return err
	}
	select {
	case <-r.exited:
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("replica %s still runs 30s after SIGKILL", r.id)
	}
}

// terminate asks the replica to stop (SIGTERM) and waits; it reports a replica that
// needed SIGKILL or exited with an error.
func (r *replica) terminate() error {
	if !r.alive() {
		return r.exitError()
	}
	r.mu.Lock()
	stopped := r.stopped
	r.mu.Unlock()
	if stopped {
		_ = r.signal(syscall.SIGCONT)
	}
	if err := r.signal(syscall.SIGTERM); err != nil && r.alive() {
		return err
	}
	select {
	case <-r.exited:
		return r.exitError()
	case <-time.After(45 * time.Second):
		_ = r.kill()
		return fmt.Errorf("replica %s did not stop within 45s of SIGTERM; killed", r.id)
	}
}

func (r *replica) exitError() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.exitErr != nil {
		return fmt.Errorf("replica %s exited: %w", r.id, r.exitErr)
	}
	return nil
}

// unexpectedExit reports a replica that died although nobody signalled it.
func (r *replica) unexpectedExit() error {
	if r.alive() {
		return nil
	}
	r.mu.Lock()
	ending, err := r.ending, r.exitErr
	r.mu.Unlock()
	if ending {
		return nil
	}
	return fmt.Errorf("replica %s exited on its own (%v); its log ends:\n%s", r.id, err, r.tail(20)) //nolint:errorlint // err is nil after exit status 0
}

// rss reads the process's resident set size from /proc, in bytes.
func (r *replica) rss() (int64, error) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(r.pid()) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				return kb << 10, err
			}
		}
	}
	return 0, errors.New("no VmRSS line")
}

// tail returns the last n lines of the replica's log.
func (r *replica) tail(n int) string {
	raw, err := os.ReadFile(r.log)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}

// logSink writes a process's output to a file and hands each complete line to line.
type logSink struct {
	mu   sync.Mutex
	w    io.Writer
	buf  []byte
	line func([]byte)
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.w.Write(p); err != nil {
		return 0, err
	}
	s.buf = append(s.buf, p...)
	for {
		i := bytes.IndexByte(s.buf, '\n')
		if i < 0 {
			break
		}
		s.line(s.buf[:i])
		s.buf = s.buf[i+1:]
	}
	if len(s.buf) > 1<<20 { // a line without end: keep the file, drop the parse buffer
		s.buf = s.buf[:0]
	}
	return len(p), nil
}

func (s *logSink) flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.buf) > 0 {
		s.line(s.buf)
		s.buf = nil
	}
}

// metricsSample is one scrape: each series' value by its name and labels as exposed,
// e.g. `outboxd_lease_conflicts_total{stream="orders"}`.
type metricsSample map[string]float64

// parseMetrics reads Prometheus text exposition; comments and malformed lines are
// skipped.
func parseMetrics(body []byte) metricsSample {
	m := metricsSample{}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		m[line[:i]] = v
	}
	return m
}

// sum adds every series of the metric name whose labels hold all of match (each a
// `key="value"` pair).
func (m metricsSample) sum(name string, match ...string) float64 {
	var total float64
	for series, v := range m {
		base, labels, _ := strings.Cut(series, "{")
		if base != name {
			continue
		}
		ok := true
		for _, want := range match {
			if !strings.Contains(labels, want) {
				ok = false
			}
		}
		if ok {
			total += v
		}
	}
	return total
}
