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

// floorFigures are one floor's medians over its starts and outboxd ÷ each.
type floorFigures struct {
	starts                  int
	dispatching, readyz     float64
	dispatchingTo, readyzTo float64
}

// figures are f's medians over its starts and outboxd's (in ready) ÷ each.
func (f floor) figures(ready benchReady) floorFigures {
	ratio := func(outboxd, floor float64) float64 {
		if outboxd == 0 || floor == 0 {
			return 0
		}
		return round(outboxd/floor, 2)
	}
	m := readyFigures(f.starts)
	return floorFigures{starts: len(f.starts), dispatching: m.DispatchingMs, readyz: m.ReadyzMs,
		dispatchingTo: ratio(ready.DispatchingMs, m.DispatchingMs), readyzTo: ratio(ready.ReadyzMs, m.ReadyzMs)}
}

// withFloors adds to ready the floors' medians over their starts and outboxd ÷ each.
func (ready benchReady) withFloors(plain, linked floor) benchReady {
	p, l := plain.figures(ready), linked.figures(ready)
	ready.FloorStarts, ready.FloorDispatchingMs, ready.FloorReadyzMs = p.starts, p.dispatching, p.readyz
	ready.DispatchingToFloor, ready.ReadyzToFloor = p.dispatchingTo, p.readyzTo
	ready.FloorLinkedStarts, ready.FloorLinkedDispatchingMs, ready.FloorLinkedReadyzMs = l.starts, l.dispatching, l.readyz
	ready.DispatchingToFloorLinked, ready.ReadyzToFloorLinked = l.dispatchingTo, l.readyzTo
	ready.floorMissing, ready.floorLinkedMissing = plain.missing, linked.missing
	return ready
}

// printReady writes the exec → ready line and, under it, each floor's: its figures and
// outboxd ÷ floor, or once why there are none.
func printReady(w io.Writer, head string, r benchReady) {
	fmt.Fprintf(w, "%sexec → dispatching %.1f ms, exec → /readyz 200 %.1f ms (median of %d drains)\n",
		head, r.DispatchingMs, r.ReadyzMs, r.Drains)
	indent := fmt.Sprintf("%*s", len([]rune(head)), "")
	printFloor(w, indent, "floor ("+floorProgram+": one connection, /readyz by SELECT 1)", "floor", "floor", r.floorMissing,
		floorFigures{r.FloorStarts, r.FloorDispatchingMs, r.FloorReadyzMs, r.DispatchingToFloor, r.ReadyzToFloor})
	printFloor(w, indent, "floor with outboxd's packages linked ("+floorLinkedProgram+")", "it", "floor with outboxd's packages linked",
		r.floorLinkedMissing, floorFigures{r.FloorLinkedStarts, r.FloorLinkedDispatchingMs, r.FloorLinkedReadyzMs,
			r.DispatchingToFloorLinked, r.ReadyzToFloorLinked})
}

// printFloor writes one floor's line under printReady's: named, its figures and outboxd
// ÷ them (called it), or, when it was not measured, where it was looked for.
func printFloor(w io.Writer, indent, named, it, short, missing string, f floorFigures) {
	switch {
	case f.starts > 0:
		fmt.Fprintf(w, "%s%s %.1f ms, %.1f ms (median of %d starts); outboxd ÷ %s %.2f, %.2f\n",
			indent, named, f.dispatching, f.readyz, f.starts, it, f.dispatchingTo, f.readyzTo)
	case missing != "":
		fmt.Fprintf(w, "%s%s not measured: no %s (make build builds it beside outboxd)\n", indent, short, missing)
	}
}
