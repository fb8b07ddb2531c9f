package main

import (
	"strings"
	"testing"
)

// allVerbs is every verb outboxd answers itself; TestHelpCoversEveryVerb holds it and
// siblingVerbs, those outboxd-bench answers (forward_test.go), to main's table.
var allVerbs = []string{"config", "help", "messages", "migrate", "replay", "requeue", "run", "skip", "stats", "version"}

func TestEveryVerbAnswersHelpAndRefusesUnknownFlags(t *testing.T) {
	t.Parallel()
	for _, verb := range allVerbs {
		t.Run(verb, func(t *testing.T) {
			t.Parallel()
			want := "Usage: outboxd " + verb
			for _, args := range [][]string{{"help", verb}, {verb, "--help"}, {verb, "-h"}} {
				code, out, errOut := outboxd(t, nil, args...)
				if code != 0 || !strings.HasPrefix(out, want) || errOut != "" {
					t.Errorf("outboxd %s: exit %d, stdout %q, stderr %q; want exit 0 and stdout starting %q, nothing on stderr",
						strings.Join(args, " "), code, out, errOut, want)
				}
			}
			code, out, errOut := outboxd(t, nil, verb, "--no-such-flag")
			lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
			hint := "Run 'outboxd " + verb + " --help' for usage."
			if code != 2 || out != "" || len(lines) != 2 || !strings.HasPrefix(lines[0], "outboxd: ") || lines[1] != hint {
				t.Errorf("outboxd %s --no-such-flag: exit %d, stdout %q, stderr %q; want exit 2, one line then %q on stderr",
					verb, code, out, errOut, hint)
			}
		})
	}
}

func TestTopLevelHelpAndUnknownVerbs(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		code, out, errOut := outboxd(t, nil, args...)
		if code != 0 || !strings.HasPrefix(out, "outboxd delivers") || errOut != "" {
			t.Errorf("outboxd %s: exit %d, stdout %q, stderr %q; want the usage on stdout", strings.Join(args, " "), code, out, errOut)
		}
	}
	for _, args := range [][]string{{"frobnicate"}, {"--frobnicate"}, {"help", "frobnicate"}, {}} {
		code, out, errOut := outboxd(t, nil, args...)
		lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
		if code != 2 || out != "" || len(lines) != 2 || !strings.HasPrefix(lines[1], "Run 'outboxd ") {
			t.Errorf("outboxd %s: exit %d, stdout %q, stderr %q; want exit 2, one line and the usage hint on stderr",
				strings.Join(args, " "), code, out, errOut)
		}
	}
}
