package bench

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
)

// printAB prints the A/B comparison, if there was one.
func printAB(w io.Writer, ab *benchAB) {
	if ab == nil {
		return
	}
	fmt.Fprintf(w, "\nA/B, %d rounds interleaved, medians: A %s, B %s\n", ab.Rounds, ab.Baseline, ab.Current)
	fmt.Fprintf(w, "%-12s %12s %12s %8s %10s %10s %8s %10s %10s %8s\n", "driver", "A msg/s", "B msg/s", "B÷A",
		"A CPU s", "B CPU s", "B÷A", "A RSS MiB", "B RSS MiB", "B÷A")
	for _, d := range slices.Sorted(maps.Keys(ab.Drivers)) {
		x := ab.Drivers[d]
		fmt.Fprintf(w, "%-12s %12s %12s %8.3f %10.2f %10.2f %8.3f %10.1f %10.1f %8.3f\n", d,
			thousands(x.A.MsgsPerSec), thousands(x.B.MsgsPerSec), x.Ratio.MsgsPerSec,
			x.A.DispatcherCPUSeconds, x.B.DispatcherCPUSeconds, x.Ratio.DispatcherCPUSeconds,
			x.A.DispatcherPeakRSSMiB, x.B.DispatcherPeakRSSMiB, x.Ratio.DispatcherPeakRSSMiB)
	}
	fmt.Fprintf(w, "%-12s %10s %10s %8s %10s %10s %8s %10s %10s %8s\n", "driver", "A idle MiB", "B idle MiB", "B÷A",
		"A disp ms", "B disp ms", "B÷A", "A ready ms", "B ready ms", "B÷A")
	for _, d := range slices.Sorted(maps.Keys(ab.Drivers)) {
		x := ab.Drivers[d]
		fmt.Fprintf(w, "%-12s %10.1f %10.1f %8.3f %10.1f %10.1f %8.3f %10.1f %10.1f %8.3f\n", d,
			x.A.DispatcherIdleRSSMiB, x.B.DispatcherIdleRSSMiB, x.Ratio.DispatcherIdleRSSMiB,
			x.A.ReadyDispatchingMs, x.B.ReadyDispatchingMs, x.Ratio.ReadyDispatchingMs,
			x.A.ReadyzMs, x.B.ReadyzMs, x.Ratio.ReadyzMs)
	}
	for _, d := range slices.Sorted(maps.Keys(ab.Drivers)) {
		x := ab.Drivers[d]
		fmt.Fprintf(w, "%-12s B÷A msg/s per round %v, median %.3f\n", d, x.Ratio.RunsMsgsPerSec, x.Ratio.MedianOfRuns)
	}
}

// printScale prints the scale modes of a run that measured only them.
func printScale(w io.Writer, r *benchReport) {
	if len(r.Replicas) > 0 {
		fmt.Fprintf(w, "replicas: one backlog drained by N `outboxd run` processes; then the database alone, the SQL\n"+
			"ceiling claimed by N replicas' worth of claimers (own sessions, own resume points)\n")
		fmt.Fprintf(w, "%-10s %4s %10s %8s %10s %10s %8s %10s %6s %8s %12s %10s %8s %10s\n", "driver", "N", "msg/s", "÷ N=1",
			"disp CPU s", "db CPU s", "conns", "conflicts", "dups", "missing", "db alone", "db CPU s", "÷ N=1", "÷ db's")
		for _, x := range r.Replicas {
			db, alone := serverSeconds(x.DatabaseCPUSeconds), serverSeconds(x.SQLCeilingDatabaseCPUSeconds)
			fmt.Fprintf(w, "%-10s %4d %10s %8.3f %10.2f %10s %8d %10d %6d %8d %12s %10s %8.3f %10.3f\n", x.Driver, x.Replicas, thousands(x.MsgsPerSec),
				x.RatioToOne, x.DispatcherCPUSeconds, db, x.PeakConnections, x.LeaseConflicts, x.Duplicates, x.Missing,
				thousands(x.SQLCeilingMsgsPerSec), alone, x.SQLCeilingRatioToOne, x.RatioToSQLCeilingRatio)
		}
		fmt.Fprintf(w, "the database alone in N processes of their own, each one replica's claimers\n")
		fmt.Fprintf(w, "%-10s %4s %12s %10s %12s %8s %10s\n", "driver", "N", "msg/s", "db CPU s", "claimers CPU", "÷ N=1", "÷ theirs")
		for _, x := range r.Replicas {
			fmt.Fprintf(w, "%-10s %4d %12s %10s %12.2f %8.3f %10.3f\n", x.Driver, x.Replicas, thousands(x.ProcsMsgsPerSec),
				serverSeconds(x.ProcsDatabaseCPUSeconds), x.ProcsCPUSeconds, x.ProcsRatioToOne, x.RatioToProcsRatio)
		}
		fmt.Fprintln(w)
	}
	if m := r.ManyStreams; m != nil {
		fmt.Fprintf(w, "many streams (%s): %d busy at %s msg/s; the busy streams alone: p50 %.2f ms, p99 %.2f ms\n", m.Driver,
			m.BusyStreams, thousands(m.BusyAlone.OfferedPerSec), m.BusyAlone.P50Ms, m.BusyAlone.P99Ms)
		fmt.Fprintf(w, "%8s %12s %8s %10s %10s %10s %10s %10s %8s %8s\n", "streams", "idle % core", "conns", "idle tx/s",
			"RSS MiB", "readyz ms", "busy p50", "busy p99", "÷ p50", "÷ p99")
		for _, x := range m.Runs {
			fmt.Fprintf(w, "%8d %12.2f %8d %10.1f %10.1f %10.1f %10.2f %10.2f %8.3f %8.3f\n", x.Streams, x.IdleCPUPercent,
				x.IdleConnections, x.IdleTransactionsPerSec, x.IdlePeakRSSMiB, x.ReadyzMs, x.Busy.P50Ms, x.Busy.P99Ms, x.RatioP50, x.RatioP99)
			if x.BusyError != "" {
				fmt.Fprintf(w, "%8s busy streams not measured: %s\n", "", x.BusyError)
			}
		}
		fmt.Fprintln(w)
	}
	if len(r.Payloads) > 0 {
		fmt.Fprintf(w, "payloads\n%-10s %10s %8s %10s %10s %10s %10s %8s %8s\n", "driver", "payload", "msgs", "msg/s", "MB/s", "RSS MiB", "CPU s", "failed", "missing")
		for _, x := range r.Payloads {
			fmt.Fprintf(w, "%-10s %10s %8d %10s %10.2f %10.1f %10.2f %8d %8d\n", x.Driver, thousands(float64(x.PayloadBytes)), x.Messages,
				thousands(x.MsgsPerSec), x.MBPerSec, x.PeakRSSMiB, x.CPUSeconds, x.Failed, x.Missing)
		}
		fmt.Fprintln(w)
	}
	if bl := r.Backlog; bl != nil {
		fmt.Fprintf(w, "backlog (%s): drain rate over the first messages, and exec → first message out;\n"+
			"the SQL ceiling over as many rows just before\n", bl.Driver)
		for _, x := range []benchBacklogRun{bl.Small, bl.Large} {
			fmt.Fprintf(w, "  %12s pending (filled in %.1fs): %s msg/s over %s messages, first out after %.1f ms, %d missing\n",
				thousands(float64(x.Pending)), x.FillSeconds, thousands(x.MsgsPerSec), thousands(float64(x.Measured)), x.FirstOutMs, x.Missing)
			fmt.Fprintf(w, "  %12s SQL ceiling %s msg/s, drain ÷ SQL ceiling %.3f\n", "", thousands(x.SQLCeilingMsgsPerSec), x.RatioToSQLCeiling)
		}
		fmt.Fprintf(w, "  large ÷ small: drain %.3f, SQL ceiling %.3f\n\n", bl.RatioToSmall, bl.SQLCeilingRatioToSmall)
	}
	printReady(w, "ready: ", r.ReadyMs)
	printVerdict(w, r)
}

// serverSeconds prints a database server's CPU seconds, n/a when the server is not on
// this machine (nil).
func serverSeconds(s *float64) string {
	if s == nil {
		return "n/a"
	}
	return strconv.FormatFloat(*s, 'f', 2, 64)
}
