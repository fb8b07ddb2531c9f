package app

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/router/drivers"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestAStreamWithFlowOffRunsAPipelineThatNeverFlows(t *testing.T) {
	t.Parallel()
	for value, noFlow := range map[string]bool{"false": true, "true": false} {
		cfg, err := config.Load("", []string{"OUTBOXD_DRIVERS__SINK__TYPE=discard", "OUTBOXD_STREAMS__ORDERS__DRIVER=sink",
			"OUTBOXD_STREAMS__ORDERS__FLOW=" + value}, drivers.All())
		if err != nil {
			t.Fatal(err)
		}
		if got := pipelineConfig("orders", cfg.Streams["orders"], "r").NoFlow; got != noFlow {
			t.Errorf("streams.orders.flow %s: the pipeline's NoFlow is %v, want %v", value, got, noFlow)
		}
	}
}

func TestAStreamsFlowRateReachesItsPipeline(t *testing.T) {
	t.Parallel()
	for value, want := range map[string]int{"": 500, "20": 20} {
		env := []string{"OUTBOXD_DRIVERS__SINK__TYPE=discard", "OUTBOXD_STREAMS__ORDERS__DRIVER=sink"}
		if value != "" {
			env = append(env, "OUTBOXD_STREAMS__ORDERS__FLOW_RATE="+value)
		}
		cfg, err := config.Load("", env, drivers.All())
		if err != nil {
			t.Fatal(err)
		}
		if got := pipelineConfig("orders", cfg.Streams["orders"], "r").FlowRate; got != want {
			t.Errorf("streams.orders.flow_rate %q: the pipeline's FlowRate is %d, want %d", value, got, want)
		}
	}
}

// TestThePipelinesCommitWithoutWaitingForTheirFlushAndNothingElseDoes: the pipelines'
// sessions run with synchronous_commit off, the rest keep the server's setting, and a
// database_url that sets it is obeyed.
func TestThePipelinesCommitWithoutWaitingForTheirFlushAndNothingElseDoes(t *testing.T) {
	t.Parallel()
	dsn := testenv.SharedDatabase(t)
	streams := map[string]config.Stream{"orders": {Concurrency: 3}, "payments": {Concurrency: 1}}
	setting := func(c *pgxpool.Config) string {
		t.Helper()
		pool, err := pgxpool.NewWithConfig(t.Context(), c)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		var v string
		if err := pool.QueryRow(t.Context(), "SHOW synchronous_commit").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	base, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	server := setting(base)
	pipes := pipelineSessions(base, config.Database{}, streams, false)
	if got := setting(pipes); got != "off" || pipes.MaxConns != 3+2+1+2 {
		t.Errorf("pipelines' sessions: synchronous_commit %s, %d connections; want off, 8", got, pipes.MaxConns)
	}
	if got := setting(base); got != server {
		t.Errorf("the other sessions: synchronous_commit %s, want the server's %s", got, server)
	}
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	given, err := pgxpool.ParseConfig(dsn + sep + "synchronous_commit=remote_write")
	if err != nil {
		t.Fatal(err)
	}
	if got := setting(pipelineSessions(given, config.Database{}, streams, false)); got != "remote_write" {
		t.Errorf("with synchronous_commit=remote_write in database_url, the pipelines' sessions have %s", got)
	}
}

// TestThePipelinesPoolIsBoundedByItsSettingNotByTheStreams: a thousand streams get no
// more connections than a few; database.max_conns sets the bound; idle ones are closed.
func TestThePipelinesPoolIsBoundedByItsSettingNotByTheStreams(t *testing.T) {
	t.Parallel()
	streams := map[string]config.Stream{}
	for i := range 1000 {
		streams[fmt.Sprintf("s%d", i)] = config.Stream{Concurrency: 2}
	}
	base, err := pgxpool.ParseConfig("postgres://127.0.0.1/x")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		db      config.Database
		streams map[string]config.Stream
		want    int32
		burst   int // connections kept open: the busiest stream's concurrency + 2
	}{
		{"A thousand streams get a few connections per CPU.", config.Database{}, streams, int32(max(10, 4*runtime.GOMAXPROCS(0))), 4},
		{"Two streams get what they can use at once.", config.Database{}, map[string]config.Stream{"a": {Concurrency: 1}, "b": {Concurrency: 2}}, 7, 4},
		{"database.max_conns sets the bound.", config.Database{MaxConns: 6}, streams, 6, 4},
		{"A bound under a stream's burst keeps the whole pool open.", config.Database{MaxConns: 3}, streams, 3, 4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := pipelineSessions(base, c.db, c.streams, false)
			if got.MaxConns != c.want {
				t.Errorf("MaxConns %d, want %d", got.MaxConns, c.want)
			}
			if want := min(c.want, int32(c.burst)); got.MinConns != want {
				t.Errorf("MinConns %d; want %d, a stream's burst, kept open", got.MinConns, want)
			}
			if got.MaxConnIdleTime > pipelineIdle {
				t.Errorf("idle connections beyond those live %s, want at most %s", got.MaxConnIdleTime, pipelineIdle)
			}
		})
	}
}

// TestThePipelinesPoolIsOpenForAStreamsBurstBeforeAnyClaimNeedsIt: a claim that finds
// no connection idle while the pool could grow waits for a new one's handshake, so the
// pool opens what a stream's burst takes up front and reopens one it loses.
func TestThePipelinesPoolIsOpenForAStreamsBurstBeforeAnyClaimNeedsIt(t *testing.T) {
	t.Parallel()
	base, err := pgxpool.ParseConfig(testenv.SharedDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(t.Context(), pipelineSessions(base, config.Database{}, map[string]config.Stream{"s": {Concurrency: 2}}, false))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	open := func(what string) {
		t.Helper()
		deadline := time.Now().Add(3 * pipelineRefill)
		for pool.Stat().IdleConns() < 2+2 { // concurrency 2, a claim, a flow lock
			if time.Now().After(deadline) {
				s := pool.Stat()
				t.Fatalf("%s: %d idle of %d connections after %v; want 4 idle", what, s.IdleConns(), s.TotalConns(), 3*pipelineRefill)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	open("a new pool")
	conn, err := pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Conn().Close(t.Context()); err != nil { // lost, as a killed session would be
		t.Fatal(err)
	}
	conn.Release()
	open("after losing a connection")
}
