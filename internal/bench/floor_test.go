package bench

import (
	"bytes"
	"strings"
	"testing"
)

func TestTheFloorFiguresAreMediansAndOutboxdOverFloorIsZeroWhenASideIsMissing(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name           string
		drains         [][2]float64
		floors, linked [][2]float64
		want           benchReady
	}{
		{"both measured give medians and ratios to two decimals",
			[][2]float64{{60, 70}, {50, 80}, {70, 90}}, [][2]float64{{30, 35}, {33, 36}, {40, 41}},
			[][2]float64{{45, 50}, {40, 44}, {50, 60}},
			benchReady{Drains: 3, DispatchingMs: 60, ReadyzMs: 80, FloorStarts: 3, FloorDispatchingMs: 33, FloorReadyzMs: 36,
				DispatchingToFloor: 1.82, ReadyzToFloor: 2.22, FloorLinkedStarts: 3, FloorLinkedDispatchingMs: 45,
				FloorLinkedReadyzMs: 50, DispatchingToFloorLinked: 1.33, ReadyzToFloorLinked: 1.6}},
		{"no floor starts leave the floors and the ratios 0",
			[][2]float64{{60, 70}}, nil, nil,
			benchReady{Drains: 1, DispatchingMs: 60, ReadyzMs: 70}},
		{"an outboxd figure of 0 leaves its ratios 0",
			[][2]float64{{60, 0}}, [][2]float64{{30, 35}}, [][2]float64{{40, 45}},
			benchReady{Drains: 1, DispatchingMs: 60, FloorStarts: 1, FloorDispatchingMs: 30, FloorReadyzMs: 35, DispatchingToFloor: 2,
				FloorLinkedStarts: 1, FloorLinkedDispatchingMs: 40, FloorLinkedReadyzMs: 45, DispatchingToFloorLinked: 1.5}},
	} {
		if got := readyFigures(c.drains).withFloors(floor{starts: c.floors}, floor{starts: c.linked}); got != c.want {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestTheReportShowsTheFloorBesideOutboxdsStartOrSaysOnceWhyItIsMissing(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	printReady(&out, "ready: ", readyFigures([][2]float64{{60, 72}}).withFloors(floor{starts: [][2]float64{{30, 36}}},
		floor{starts: [][2]float64{{40, 48}}}))
	if got := out.String(); !strings.Contains(got, "30.0 ms, 36.0 ms (median of 1 starts); outboxd ÷ floor 2.00, 2.00") ||
		!strings.Contains(got, "linked (outboxd-floor-linked) 40.0 ms, 48.0 ms (median of 1 starts); outboxd ÷ it 1.50, 1.50") {
		t.Errorf("with both floors measured the report says:\n%s", got)
	}
	out.Reset()
	missing := readyFigures([][2]float64{{60, 72}, {61, 73}}).withFloors(floor{missing: "/opt/outboxd/outboxd-floor"},
		floor{missing: "/opt/outboxd/outboxd-floor-linked"})
	printReady(&out, "ready: ", missing)
	if got := out.String(); strings.Count(got, "floor not measured: no /opt/outboxd/outboxd-floor (") != 1 ||
		strings.Count(got, "linked not measured: no /opt/outboxd/outboxd-floor-linked") != 1 {
		t.Errorf("without the floor programs the report says:\n%s", got)
	}
}
