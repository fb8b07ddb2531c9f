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
const floorProgram = "outboxd-floor"

// floorBeside is the outboxd-floor in the directory of the dispatcher binary (symbolic
// links resolved), found is false when it is not there; path names where it was looked
// for either way.
func floorBeside(dispatcher string) (path string, found bool) {
	path, err := cli.Beside(dispatcher, floorProgram)
	return path, err == nil
}

// floorStart starts outboxd-floor with environ (the idle start's), waits for its
// "dispatching" line and its /readyz 200, stops it and records its exec → ready in
// b.floors. Without the program beside the dispatcher it does nothing: the floor
// figures stay 0 and the report says why.
func (b *bench) floorStart(ctx context.Context, environ []string) error {
	if b.floor == "" {
		return nil
	}
	child, err := startDispatcher(ctx, b.floor, environ)
	if err != nil {
		return err
	}
	defer child.kill()
	if err := awaitStart(ctx, child, child.dispatching, "dispatching"); err != nil {
		return err
	}
	if err := awaitStart(ctx, child, child.ready, "/readyz 200"); err != nil {
		return err
	}
	if err := child.stop(); err != nil {
		return err
	}
	dispatchingMs, readyzMs := child.readiness()
	b.floors = append(b.floors, [2]float64{dispatchingMs, readyzMs})
	return nil
}

// withFloor adds to ready the floor's medians over starts and outboxd ÷ floor of each.
func (ready benchReady) withFloor(starts [][2]float64) benchReady {
	floor := readyFigures(starts)
	ready.FloorStarts, ready.FloorDispatchingMs, ready.FloorReadyzMs = len(starts), floor.DispatchingMs, floor.ReadyzMs
	ratio := func(outboxd, floor float64) float64 {
		if outboxd == 0 || floor == 0 {
			return 0
		}
		return round(outboxd/floor, 2)
	}
	ready.DispatchingToFloor = ratio(ready.DispatchingMs, ready.FloorDispatchingMs)
	ready.ReadyzToFloor = ratio(ready.ReadyzMs, ready.FloorReadyzMs)
	return ready
}

// printReady writes the exec → ready line and, under it, the floor's: its figures and
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
}
