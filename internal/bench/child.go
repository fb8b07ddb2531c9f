package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/outboxd/outboxd/router/discard"
)

// dispatcherProcess is `outboxd run` as a child process, its JSON log read line by line.
type dispatcherProcess struct {
	cmd         *exec.Cmd
	dispatching chan struct{} // closed at the "dispatching" line
	exited      chan struct{} // closed once the process has been waited for
	waitErr     error         // valid once exited is closed

	mu        sync.Mutex
	tail      []string // the last lines of its log
	discarded int64    // the discard driver's total, -1 until its closing line

	peakRSSKiB int64 // VmHWM read just before SIGTERM; 0 where not available

	// execAt is when the process was started; dispatchingAt when its "dispatching" line
	// was read, readyAt when its /readyz first answered 200 (zero until then), addr
	// its admin endpoints' address once logged.
	execAt, dispatchingAt, readyAt time.Time
	addr                           string
	ready                          chan struct{} // closed once readyAt is set
}

// adminListening is the log line of `outboxd run` that gives its admin endpoints' address.
const adminListening = "admin endpoints listening"

// readyPoll is how often the bench asks a starting dispatcher's /readyz.
const readyPoll = time.Millisecond

// pollReady asks http://addr/readyz every readyPoll until it answers 200, and notes
// when. A dispatcher that exits first leaves readyAt zero.
func (p *dispatcherProcess) pollReady(addr string) {
	client := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(readyPoll)
	defer tick.Stop()
	for {
		resp, err := client.Get("http://" + addr + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				p.mu.Lock()
				p.readyAt = time.Now()
				p.mu.Unlock()
				close(p.ready)
				return
			}
		}
		select {
		case <-p.exited:
			return
		case <-tick.C:
		}
	}
}

// readiness is exec → "dispatching" and exec → /readyz 200, in ms; 0 for one not seen.
func (p *dispatcherProcess) readiness() (dispatchingMs, readyzMs float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ms := func(at time.Time) float64 {
		if at.IsZero() {
			return 0
		}
		return round(float64(at.Sub(p.execAt).Microseconds())/1000, 2)
	}
	return ms(p.dispatchingAt), ms(p.readyAt)
}

// metric sums every series of the counter or gauge name on the dispatcher's /metrics
// (Prometheus text format): -1 when it cannot be read.
func (p *dispatcherProcess) metric(ctx context.Context, name string) float64 {
	p.mu.Lock()
	addr := p.addr
	p.mu.Unlock()
	if addr == "" {
		return -1
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return -1
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		if i := strings.LastIndexByte(rest, ' '); i >= 0 {
			v, err := strconv.ParseFloat(rest[i+1:], 64)
			if err == nil {
				sum += v
			}
		}
	}
	return sum
}

// cpuNow is the running dispatcher's CPU time so far, from /proc; -1 where not available.
func (p *dispatcherProcess) cpuNow() float64 {
	if _, cpu, ok := procStat(p.cmd.Process.Pid); ok {
		return cpu
	}
	return -1
}

// usage is the dispatcher's CPU time (user + system) and peak resident set.
func (p *dispatcherProcess) usage() (cpuSeconds, peakRSSMiB float64) {
	cpuSeconds, peakRSSMiB = processUsage(p.cmd.ProcessState)
	if p.peakRSSKiB > 0 {
		peakRSSMiB = float64(p.peakRSSKiB) / 1024
	}
	return cpuSeconds, peakRSSMiB
}

// readPeakRSS returns the peak resident set of a running process in KiB from
// /proc/<pid>/status (VmHWM), or 0 where there is no such file.
func readPeakRSS(pid int) int64 { return procStatus(pid)["VmHWM"] }

// awaitStart waits until ch closes (a child's "dispatching" or its /readyz 200), failing
// when the child exits first, within 30s, or when ctx ends.
func awaitStart(ctx context.Context, child *dispatcherProcess, ch <-chan struct{}, what string) error {
	select {
	case <-ch:
		return nil
	case <-child.exited:
		return child.failure("exited before " + what)
	case <-time.After(30 * time.Second):
		return child.failure("did not reach " + what + " within 30s")
	case <-ctx.Done():
		return ctx.Err()
	}
}

func startDispatcher(ctx context.Context, binary string, environ []string) (*dispatcherProcess, error) {
	p := &dispatcherProcess{dispatching: make(chan struct{}), exited: make(chan struct{}), ready: make(chan struct{}), discarded: -1}
	p.cmd = exec.CommandContext(ctx, binary, "run")
	p.cmd.Env = environ
	p.cmd.Cancel = func() error { return terminate(p.cmd.Process) }
	p.cmd.WaitDelay = 30 * time.Second
	logs, err := p.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	p.execAt = time.Now()
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start the dispatcher %s: %w", binary, err)
	}
	go func() {
		var once sync.Once
		sc := bufio.NewScanner(logs)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			var rec struct {
				Msg      string `json:"msg"`
				Messages *int64 `json:"messages"`
				Addr     string `json:"addr"`
			}
			_ = json.Unmarshal([]byte(line), &rec)
			p.mu.Lock()
			p.tail = append(p.tail, line)
			if len(p.tail) > 20 {
				p.tail = p.tail[1:]
			}
			if rec.Msg == discard.ClosedMessage && rec.Messages != nil {
				p.discarded = *rec.Messages
			}
			p.mu.Unlock()
			if rec.Msg == "dispatching" {
				once.Do(func() {
					p.mu.Lock()
					p.dispatchingAt = time.Now()
					p.mu.Unlock()
					close(p.dispatching)
				})
			}
			if rec.Msg == adminListening && rec.Addr != "" {
				p.mu.Lock()
				first := p.addr == ""
				p.addr = rec.Addr
				p.mu.Unlock()
				if first {
					go p.pollReady(rec.Addr)
				}
			}
		}
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// stop sends SIGTERM and waits for the dispatcher to finish its shutdown. Just before,
// it reads the process's peak resident set where the system shows it (Linux): the
// rusage of a child is no good for that there, because exec carries the parent's peak
// over into the child's (the process forked from this one, holding the embedded brokers
// and their messages).
func (p *dispatcherProcess) stop() error {
	p.peakRSSKiB = readPeakRSS(p.cmd.Process.Pid)
	if err := terminate(p.cmd.Process); err != nil {
		return fmt.Errorf("bench: stop the dispatcher: %w", err)
	}
	select {
	case <-p.exited:
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return p.failure("did not stop within a minute of SIGTERM")
	}
	if p.waitErr != nil {
		return p.failure("stopped with " + p.waitErr.Error())
	}
	return nil
}

// kill ends a dispatcher still running (after a failed phase) and waits for it.
func (p *dispatcherProcess) kill() {
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// failure is an error naming what went wrong with the dispatcher, with its last log lines.
func (p *dispatcherProcess) failure(what string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Errorf("bench: the dispatcher process (%s run) %s; its last log lines:\n  %s",
		p.cmd.Path, what, strings.Join(p.tail, "\n  "))
}

func (p *dispatcherProcess) discardTotal() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.discarded
}
