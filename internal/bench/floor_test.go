package bench

import (
	"bytes"
	"strings"
	"testing"
)

func TestTheFloorFiguresAreMediansAndOutboxdOverFloorIsZeroWhenASideIsMissing(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		drains [][2]float64
		floors [][2]float64
		want   benchReady
	}{
		{"both measured give medians and ratios to two decimals",
			[][2]float64{{60, 70}, {50, 80}, {70, 90}}, [][2]float64{{30, 35}, {33, 36}, {40, 41}},
			benchReady{Drains: 3, DispatchingMs: 60, ReadyzMs: 80, FloorStarts: 3, FloorDispatchingMs: 33, FloorReadyzMs: 36,
				DispatchingToFloor: 1.82, ReadyzToFloor: 2.22}},
		{"no floor starts leave the floor and the ratios 0",
			[][2]float64{{60, 70}}, nil,
			benchReady{Drains: 1, DispatchingMs: 60, ReadyzMs: 70}},
		{"an outboxd figure of 0 leaves its ratio 0",
			[][2]float64{{60, 0}}, [][2]float64{{30, 35}},
			benchReady{Drains: 1, DispatchingMs: 60, FloorStarts: 1, FloorDispatchingMs: 30, FloorReadyzMs: 35, DispatchingToFloor: 2}},
	} {
		if got := readyFigures(c.drains).withFloor(c.floors); got != c.want {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestTheReportShowsTheFloorBesideOutboxdsStartOrSaysOnceWhyItIsMissing(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	printReady(&out, "ready: ", readyFigures([][2]float64{{60, 72}}).withFloor([][2]float64{{30, 36}}))
	if got := out.String(); !strings.Contains(got, "30.0 ms, 36.0 ms (median of 1 starts); outboxd ÷ floor 2.00, 2.00") {
		t.Errorf("with a floor measured the report says:\n%s", got)
	}
	out.Reset()
	missing := benchReady{Drains: 2, floorMissing: "/opt/outboxd/outboxd-floor"}
	printReady(&out, "ready: ", missing)
	if got := out.String(); strings.Count(got, "floor not measured: no /opt/outboxd/outboxd-floor") != 1 {
		t.Errorf("without outboxd-floor the report says:\n%s", got)
	}
}
