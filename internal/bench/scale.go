package bench

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/internal/app"
	"github.com/outboxd/outboxd/store"
)

// A/B drains (--baseline-binary) and the replicas mode (--replicas): drains whose
// dispatchers differ, compared within one run.

// benchAB is the A/B comparison: per driver, the baseline binary's drains (A) against
// the current one's (B), interleaved A, B, A, B….
type benchAB struct {
	Baseline string                    `json:"baseline"`
	Current  string                    `json:"current"`
	Rounds   int                       `json:"rounds"`
	Drivers  map[string]*benchABDriver `json:"drivers"`
}

type benchABDriver struct {
	A     benchABSide  `json:"a"`
	B     benchABSide  `json:"b"`
	Ratio benchABRatio `json:"ratio"`
}

// benchABSide holds one binary's medians over the rounds, and each round's msg/s.
type benchABSide struct {
	MsgsPerSec           float64   `json:"msgs_per_sec"`
	DispatcherCPUSeconds float64   `json:"dispatcher_cpu_seconds"`
	DispatcherPeakRSSMiB float64   `json:"dispatcher_peak_rss_mib"`
	DispatcherIdleRSSMiB float64   `json:"dispatcher_idle_rss_mib"`
	ReadyDispatchingMs   float64   `json:"ready_dispatching_ms"`
	ReadyzMs             float64   `json:"ready_readyz_ms"`
	RunsMsgsPerSec       []float64 `json:"runs_msgs_per_sec"`
}

// benchABRatio is B ÷ A of each median, and of each round's msg/s (B's run over the
// A run just before it), whose median is steadier than the ratio of medians when the
// machine's speed drifts.
type benchABRatio struct {
	MsgsPerSec           float64   `json:"msgs_per_sec"`
	RunsMsgsPerSec       []float64 `json:"runs_msgs_per_sec"`
	MedianOfRuns         float64   `json:"median_of_runs_msgs_per_sec"`
	DispatcherCPUSeconds float64   `json:"dispatcher_cpu_seconds"`
	DispatcherPeakRSSMiB float64   `json:"dispatcher_peak_rss_mib"`
	DispatcherIdleRSSMiB float64   `json:"dispatcher_idle_rss_mib"`
	ReadyDispatchingMs   float64   `json:"ready_dispatching_ms"`
	ReadyzMs             float64   `json:"ready_readyz_ms"`
}

// abDrains runs driver's drain rounds times with the baseline binary and with the
// current one, alternately, and returns the comparison and the current binary's drain
// of median throughput (the driver's drain in the report). Every other round runs the
// current binary first (A B, B A, A B, …), so that what drifts over a run weighs on
// both alike: an embedded Kafka-protocol broker, for one, keeps every drain's messages,
// and its later drains ran slower.
func (b *bench) abDrains(ctx context.Context, driver string) (*benchABDriver, benchDrain, error) {
	sides := [2][]benchDrain{} // A, B
	bins := [2]string{b.opt.set.BaselineBinary, b.opt.binary}
	for round := range b.opt.set.Rounds {
		for _, side := range abOrder(round) {
			d, err := b.drainWith(ctx, drainSpec{driver: driver, binary: bins[side], idle: true})
			if err != nil {
				return nil, benchDrain{}, err
			}
			b.noteMissing(fmt.Sprintf("%s (%s)", driver, bins[side]), d.Missing)
			sides[side] = append(sides[side], d.benchDrain)
		}
	}
	a, cur := sides[0], sides[1]
	r := &benchABDriver{A: abSide(a), B: abSide(cur)}
	ratio := func(x, y float64) float64 {
		if y == 0 {
			return 0
		}
		return round(x/y, 3)
	}
	r.Ratio = benchABRatio{MsgsPerSec: ratio(r.B.MsgsPerSec, r.A.MsgsPerSec),
		DispatcherCPUSeconds: ratio(r.B.DispatcherCPUSeconds, r.A.DispatcherCPUSeconds),
		DispatcherPeakRSSMiB: ratio(r.B.DispatcherPeakRSSMiB, r.A.DispatcherPeakRSSMiB),
		DispatcherIdleRSSMiB: ratio(r.B.DispatcherIdleRSSMiB, r.A.DispatcherIdleRSSMiB),
		ReadyDispatchingMs:   ratio(r.B.ReadyDispatchingMs, r.A.ReadyDispatchingMs),
		ReadyzMs:             ratio(r.B.ReadyzMs, r.A.ReadyzMs)}
	for i := range cur {
		r.Ratio.RunsMsgsPerSec = append(r.Ratio.RunsMsgsPerSec, ratio(cur[i].MsgsPerSec, a[i].MsgsPerSec))
	}
	r.Ratio.MedianOfRuns = median(r.Ratio.RunsMsgsPerSec)
	slices.SortFunc(cur, func(x, y benchDrain) int { return cmp.Compare(x.MsgsPerSec, y.MsgsPerSec) })
	return r, cur[(len(cur)-1)/2], nil
}

// abOrder is the order of the sides (0 for A, 1 for B) in round, counted from 0.
func abOrder(round int) [2]int {
	if round%2 == 1 {
		return [2]int{1, 0}
	}
	return [2]int{0, 1}
}

func abSide(runs []benchDrain) benchABSide {
	pick := func(f func(benchDrain) float64) float64 {
		v := make([]float64, len(runs))
		for i, r := range runs {
			v[i] = f(r)
		}
		return median(v)
	}
	s := benchABSide{
		MsgsPerSec:           pick(func(d benchDrain) float64 { return d.MsgsPerSec }),
		DispatcherCPUSeconds: pick(func(d benchDrain) float64 { return d.DispatcherCPUSeconds }),
		DispatcherPeakRSSMiB: pick(func(d benchDrain) float64 { return d.DispatcherPeakRSSMiB }),
		DispatcherIdleRSSMiB: pick(func(d benchDrain) float64 { return d.DispatcherIdleRSSMiB }),
		ReadyDispatchingMs:   pick(func(d benchDrain) float64 { return d.ReadyDispatchingMs }),
		ReadyzMs:             pick(func(d benchDrain) float64 { return d.ReadyzMs }),
	}
	for _, r := range runs {
		s.RunsMsgsPerSec = append(s.RunsMsgsPerSec, r.MsgsPerSec)
	}
	return s
}

// benchReplicaRun is one drain of the replicas mode: replicas dispatcher processes,
// each `outboxd run` with its own replica_id, on one backlog.
type benchReplicaRun struct {
	Driver               string  `json:"driver"`
	Replicas             int     `json:"replicas"`
	Messages             int64   `json:"messages"`
	MsgsPerSec           float64 `json:"msgs_per_sec"`
	RatioToOne           float64 `json:"ratio_to_one"`
	DispatcherCPUSeconds float64 `json:"dispatcher_cpu_seconds"`
	// DatabaseCPUSeconds is nil (null) when the server is not on this machine.
	DatabaseCPUSeconds *float64 `json:"database_cpu_seconds"`
	PeakConnections    int      `json:"peak_connections"`
	LeaseConflicts     int64    `json:"lease_conflicts"`
	Duplicates         int64    `json:"duplicates"`
	Missing            int64    `json:"missing"`
	// The database alone as N replicas use it: the SQL ceiling's claims and
	// acknowledgements, in transactions as the drain's dispatchers hold them, by N
	// replicas' worth of claimers (claimAck), on a fresh backlog of as many messages,
	// right after the drain; its rate, that rate ÷ its own at one replica, and the
	// drain's RatioToOne ÷ that: how much of what the database itself keeps with N
	// replicas the dispatchers keep; and the server's CPU over it (nil when the server
	// is not on this machine).
	SQLCeilingMsgsPerSec         float64  `json:"sql_ceiling_msgs_per_sec"`
	SQLCeilingDatabaseCPUSeconds *float64 `json:"sql_ceiling_database_cpu_seconds"`
	SQLCeilingRatioToOne         float64  `json:"sql_ceiling_ratio_to_one"`
	RatioToSQLCeilingRatio       float64  `json:"ratio_to_sql_ceiling_ratio"`
	// The same in N processes of the bench's own (databaseAloneProcesses), each with
	// one replica's claimers on sessions of its own, started together: what N replica
	// processes leave on this machine with no dispatcher's work; the claimer processes'
	// own CPU seconds over it.
	ProcsMsgsPerSec         float64  `json:"sql_ceiling_processes_msgs_per_sec"`
	ProcsDatabaseCPUSeconds *float64 `json:"sql_ceiling_processes_database_cpu_seconds"`
	ProcsCPUSeconds         float64  `json:"sql_ceiling_processes_cpu_seconds"`
	ProcsRatioToOne         float64  `json:"sql_ceiling_processes_ratio_to_one"`
	RatioToProcsRatio       float64  `json:"ratio_to_sql_ceiling_processes_ratio"`
}

// replicas drains a fresh backlog once per replica count, for each driver.
func (b *bench) replicas(ctx context.Context) ([]benchReplicaRun, error) {
	var out []benchReplicaRun
	for _, driver := range b.opt.set.Drivers {
		var one, oneCeiling, oneProcs float64
		for _, n := range b.opt.set.Replicas {
			d, err := b.drainWith(ctx, drainSpec{driver: driver, replicas: n, sampleConnections: true})
			if err != nil {
				return out, err
			}
			b.noteMissing(fmt.Sprintf("%s with %d replicas", driver, n), d.Missing)
			r := benchReplicaRun{Driver: driver, Replicas: n, Messages: d.Messages, MsgsPerSec: d.MsgsPerSec,
				DispatcherCPUSeconds: d.DispatcherCPUSeconds, PeakConnections: d.peakConnections,
				LeaseConflicts: d.leaseConflicts, Duplicates: d.DuplicatesAtBroker, Missing: d.Missing}
			if d.serverCPU >= 0 {
				r.DatabaseCPUSeconds = &d.serverCPU
			}
			ceiling, cpu, err := b.databaseAlone(ctx, n)
			if err != nil {
				return out, err
			}
			r.SQLCeilingMsgsPerSec, r.SQLCeilingDatabaseCPUSeconds = ceiling.MsgsPerSec, cpu
			procs, err := b.databaseAloneProcesses(ctx, n)
			if err != nil {
				return out, err
			}
			r.ProcsMsgsPerSec, r.ProcsDatabaseCPUSeconds, r.ProcsCPUSeconds = procs.MsgsPerSec, procs.serverCPU, procs.claimersCPU
			if n == 1 {
				one, oneCeiling, oneProcs = d.MsgsPerSec, ceiling.MsgsPerSec, procs.MsgsPerSec
			}
			r.ProcsRatioToOne = ratioOf(procs.MsgsPerSec, oneProcs)
			r.RatioToOne = ratioOf(d.MsgsPerSec, one)
			r.SQLCeilingRatioToOne = ratioOf(ceiling.MsgsPerSec, oneCeiling)
			r.RatioToSQLCeilingRatio = ratioOf(r.RatioToOne, r.SQLCeilingRatioToOne)
			r.RatioToProcsRatio = ratioOf(r.RatioToOne, r.ProcsRatioToOne)
			out = append(out, r)
		}
	}
	return out, nil
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return round((s[len(s)/2-1]+s[len(s)/2])/2, 3)
}

// databaseAlone fills a backlog of --messages rows and moves it with the SQL ceiling's
// held claims and commits from n replicas' worth of claimers, and returns the rate and
// the local server's CPU seconds over it (nil when the server is not on this machine).
// The replicas' sessions are opened before either is measured.
func (b *bench) databaseAlone(ctx context.Context, n int) (benchThroughput, *float64, error) {
	phase := fmt.Sprintf("SQL ceiling, %d replicas", n)
	if err := b.fill(ctx, phase, b.opt.set.Messages); err != nil {
		return benchThroughput{}, nil, err
	}
	stores, closeStores, err := b.replicaStores(ctx, n)
	if err != nil {
		return benchThroughput{}, nil, fmt.Errorf("bench: %s: %w", phase, err)
	}
	defer closeStores()
	postmaster, local, err := b.localServer(ctx)
	if err != nil {
		return benchThroughput{}, nil, fmt.Errorf("bench: %s: %w", phase, err)
	}
	var before float64
	if local {
		before = serverCPU(postmaster)
	}
	t, err := b.claimAck(ctx, phase, b.opt.set.Messages, true, stores)
	if err != nil || !local {
		return t, nil, err
	}
	cpu := round(serverCPU(postmaster)-before, 2)
	return t, &cpu, nil
}

// replicaStores is one store per replica for claimAck: the bench's own for one, else
// each on a pool of its own, sized and set up as a dispatcher's claims would have it
// (benchPoolConfig), and acknowledging as the bench's store does. Their
// sessions are open when it returns, as the bench's own pool's are.
func (b *bench) replicaStores(ctx context.Context, replicas int) (stores []*store.Store, _ func(), err error) {
	if replicas <= 1 {
		return []*store.Store{b.store}, func() {}, nil
	}
	var pools []*pgxpool.Pool
	closeAll := func() {
		for _, p := range pools {
			p.Close()
		}
	}
	defer func() { // the returns below give no way to close what they opened
		if err != nil {
			closeAll()
		}
	}()
	for range replicas {
		var cfg *pgxpool.Config
		if cfg, err = benchPoolConfig(b.opt.dsn); err != nil {
			return nil, nil, err
		}
		cfg.MaxConns = int32(b.opt.set.Streams*b.opt.set.Concurrency + 1)
		var pool *pgxpool.Pool
		if pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
			return nil, nil, err
		}
		pools = append(pools, pool)
		if err = warm(ctx, pool, int(cfg.MaxConns)-1); err != nil {
			return nil, nil, err
		}
		var st *store.Store
		if st, err = store.New(pool, benchTable, app.StoreOptions(benchJanitor(b.opt.set))...); err != nil {
			return nil, nil, err
		}
		stores = append(stores, st)
	}
	return stores, closeAll, nil
}

// benchPoolConfig is the configuration of a pool of the bench's on dsn: its sessions run
// with JIT off, as the dispatcher's pool does, so that its statements plan alike.
func benchPoolConfig(dsn string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.RuntimeParams["jit"] = "off"
	return cfg, nil
}

// warm opens n sessions of pool and hands them back to it.
func warm(ctx context.Context, pool *pgxpool.Pool, n int) error {
	conns := make([]*pgxpool.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range n {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		conns = append(conns, c)
	}
	return nil
}
