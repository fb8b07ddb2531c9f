package bench

import (
	"cmp"
	"context"
	"fmt"
	"slices"
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
// of median throughput (the driver's drain in the report).
func (b *bench) abDrains(ctx context.Context, driver string) (*benchABDriver, benchDrain, error) {
	var a, cur []benchDrain
	for range b.opt.set.Rounds {
		for _, bin := range []string{b.opt.set.BaselineBinary, b.opt.binary} {
			d, err := b.drainWith(ctx, drainSpec{driver: driver, binary: bin, idle: true})
			if err != nil {
				return nil, benchDrain{}, err
			}
			b.noteMissing(fmt.Sprintf("%s (%s)", driver, bin), d.Missing)
			if bin == b.opt.set.BaselineBinary {
				a = append(a, d.benchDrain)
			} else {
				cur = append(cur, d.benchDrain)
			}
		}
	}
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
}

// replicas drains a fresh backlog once per replica count, for each driver.
func (b *bench) replicas(ctx context.Context) ([]benchReplicaRun, error) {
	var out []benchReplicaRun
	for _, driver := range b.opt.set.Drivers {
		var one float64
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
			if n == 1 {
				one = d.MsgsPerSec
			}
			if one > 0 {
				r.RatioToOne = round(d.MsgsPerSec/one, 3)
			}
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
