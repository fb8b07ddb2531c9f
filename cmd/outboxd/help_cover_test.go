package main

import (
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"
)

func TestHelpCoversEveryVerb(t *testing.T) {
	t.Parallel()
	var dispatched []string
	for v := range commands {
		dispatched = append(dispatched, v)
	}
	sort.Strings(dispatched)
	covered := slices.Sorted(slices.Values(append(slices.Collect(maps.Keys(siblingVerbs)), allVerbs...)))
	if strings.Join(dispatched, " ") != strings.Join(covered, " ") {
		t.Fatalf("main dispatches %v but the help tests cover %v", dispatched, covered)
	}
	if got := verbNames(); strings.Join(got, " ") != strings.Join(allVerbs, " ") {
		t.Fatalf("verbs with help %v, verbs outboxd answers itself %v", got, allVerbs)
	}
	for _, v := range covered {
		if !strings.Contains(usage, "\n  "+v) {
			t.Errorf("the usage does not list %q", v)
		}
	}
}

// verbNames lists the verbs with help, sorted, for tests and messages.
func verbNames() []string {
	names := make([]string, 0, len(verbHelp))
	for v := range verbHelp {
		names = append(names, v)
	}
	sort.Strings(names)
	return names
}
