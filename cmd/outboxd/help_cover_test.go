package main

import (
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
	if strings.Join(dispatched, " ") != strings.Join(allVerbs, " ") {
		t.Fatalf("main dispatches %v but the help test covers %v", dispatched, allVerbs)
	}
	if got := verbNames(); strings.Join(got, " ") != strings.Join(allVerbs, " ") {
		t.Fatalf("verbs with help %v, verbs dispatched %v", got, allVerbs)
	}
	for _, v := range allVerbs {
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
