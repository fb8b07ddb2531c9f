package bench

import (
	"context"
	"fmt"
	"io"

	"github.com/outboxd/outboxd/internal/cli"
)

// floorProgram is cmd/outboxd-floor: one pgx connection, an HTTP listener and /readyz
// by SELECT 1 on that connection, the least any dispatcher's start must do. Timed from
// exec as outboxd run is, it is the machine's floor under the ready_ms figures.
// floorLinkedProgram is the same program built with every package outboxd links
// (-tags linked): it pays outboxd's process start (the runtime's set-up of a binary
// that size, every package's init) before that least, and so is the floor under any
// start of a binary with outboxd's dependencies.
const (
	floorProgram       = "outboxd-floor"
	floorLinkedProgram = "outboxd-floor-linked"
)

// floor is one of the two floor programs as the bench finds it beside the dispatcher
// binary: path, or missing naming where it was looked for; starts holds the exec →
// ready of each of its starts.
type floor struct {
	path, missing string
	starts        [][2]float64
}

// floorBeside is the program named name in the directory of the dispatcher binary
// (symbolic links resolved).
func floorBeside(dispatcher, name string) floor {
	path, err := cli.Beside(dispatcher, name)
	if err != nil {
		return floor{missing: path}
	}
	return floor{path: path}
}

// floorStarts starts each floor program there is with environ (the idle start's),
// waits for its "dispatching" line and its /readyz 200, stops it and records its exec
// → ready. A program not beside the dispatcher is left out: its figures stay 0 and the
// report says why.
func (b *bench) floorStarts(ctx context.Context, environ []string) error {
	for _, f := range []*floor{&b.floor, &b.floorLinked} {
		if f.path == "" {
			continue
		}
		child, err := startDispatcher(ctx, f.path, environ)
		if err != nil {
			return err
		}
		err = awaitStart(ctx, child, child.dispatching, "dispatching")
		if err == nil {
			err = awaitStart(ctx, child, child.ready, "/readyz 200")
		}
		if err == nil {
			err = child.stop()
		}
		child.kill()
		if err != nil {
			return err
		}
		dispatchingMs, readyzMs := child.readiness()
		f.starts = append(f.starts, [2]float64{dispatchingMs, readyzMs})
	}
	return nil
}

// withFloors adds to ready the floors' medians over their starts and outboxd ÷ each.
func (ready benchReady) withFloors(plain, linked floor) benchReady {
	ratio := func(outboxd, floor float64) float64 {
		if outboxd == 0 || floor == 0 {
			return 0
		}
		return round(outboxd/floor, 2)
	}
	f := readyFigures(plain.starts)
	ready.FloorStarts, ready.FloorDispatchingMs, ready.FloorReadyzMs = len(plain.starts), f.DispatchingMs, f.ReadyzMs
	ready.DispatchingToFloor = ratio(ready.DispatchingMs, ready.FloorDispatchingMs)
	ready.ReadyzToFloor = ratio(ready.ReadyzMs, ready.FloorReadyzMs)
	l := readyFigures(linked.starts)
	ready.FloorLinkedStarts, ready.FloorLinkedDispatchingMs, ready.FloorLinkedReadyzMs = len(linked.starts), l.DispatchingMs, l.ReadyzMs
	ready.DispatchingToFloorLinked = ratio(ready.DispatchingMs, ready.FloorLinkedDispatchingMs)
	ready.ReadyzToFloorLinked = ratio(ready.ReadyzMs, ready.FloorLinkedReadyzMs)
	ready.floorMissing, ready.floorLinkedMissing = plain.missing, linked.missing
	return ready
}

// printReady writes the exec → ready line and, under it, each floor's: its figures and
// outboxd ÷ floor, or once why there are none.
func printReady(w io.Writer, head string, r benchReady) {
	fmt.Fprintf(w, "%sexec → dispatching %.1f ms, exec → /readyz 200 %.1f ms (median of %d drains)\n",
		head, r.DispatchingMs, r.ReadyzMs, r.Drains)
	indent := fmt.Sprintf("%*s", len([]rune(head)), "")
	switch {
	case r.FloorStarts > 0:
		fmt.Fprintf(w, "%sfloor (%s: one connection, /readyz by SELECT 1) %.1f ms, %.1f ms (median of %d starts); outboxd ÷ floor %.2f, %.2f\n",
			indent, floorProgram, r.FloorDispatchingMs, r.FloorReadyzMs, r.FloorStarts, r.DispatchingToFloor, r.ReadyzToFloor)
	case r.floorMissing != "":
		fmt.Fprintf(w, "%sfloor not measured: no %s (make build builds it beside outboxd)\n", indent, r.floorMissing)
	}
	switch {
	case r.FloorLinkedStarts > 0:
		fmt.Fprintf(w, "%sfloor with outboxd's packages linked (%s) %.1f ms, %.1f ms (median of %d starts); outboxd ÷ it %.2f, %.2f\n",
			indent, floorLinkedProgram, r.FloorLinkedDispatchingMs, r.FloorLinkedReadyzMs, r.FloorLinkedStarts,
			r.DispatchingToFloorLinked, r.ReadyzToFloorLinked)
	case r.floorLinkedMissing != "":
		fmt.Fprintf(w, "%sfloor with outboxd's packages linked not measured: no %s (make build builds it beside outboxd)\n",
			indent, r.floorLinkedMissing)
	}
}
