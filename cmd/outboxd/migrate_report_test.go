package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/migrations"
)

// TestMigrateUpNamesWhatItAppliedAndStatusShowsWhatIsPending derives every expectation
// from the embedded files, so it holds for any number of migrations.
func TestMigrateUpNamesWhatItAppliedAndStatusShowsWhatIsPending(t *testing.T) {
	t.Parallel()
	all, err := migrations.Plain.Migrations()
	if err != nil || len(all) < 2 {
		t.Fatalf("migrations: %v %v; this test needs at least two", all, err)
	}
	latest, last := migrations.Latest(), all[len(all)-1]
	names := func(ms []migrations.Migration) string {
		s := make([]string, len(ms))
		for i, m := range ms {
			s[i] = m.String()
		}
		return strings.Join(s, ", ")
	}
	applied := func(ms []migrations.Migration) string {
		var b strings.Builder
		for _, m := range ms {
			fmt.Fprintf(&b, "billing.events: applied %s\n", m)
		}
		return b.String()
	}
	environ := []string{"OUTBOXD_DATABASE_URL=" + testenv.EmptyDatabase(t), "OUTBOXD_SCHEMA=billing", "OUTBOXD_TABLE=events"}
	steps := []struct {
		name string
		args []string
		want string
	}{
		{"status on a fresh database lists every migration as pending", []string{"migrate", "status"},
			fmt.Sprintf("table:   billing.events\nlayout:  plain (janitor.partitions.enabled)\nversion: 0 of %d (clean)\npending: %s\n", latest, names(all))},
		{"up names each migration it applied and the version it ended at", []string{"migrate", "up"},
			applied(all) + fmt.Sprintf("billing.events: schema version %d of %d (clean)\n", latest, latest)},
		{"up with nothing pending says so", []string{"migrate", "up"},
			fmt.Sprintf("billing.events: no migration pending\nbilling.events: schema version %d of %d (clean)\n", latest, latest)},
		{"status at the latest version has nothing pending", []string{"migrate", "status"},
			fmt.Sprintf("table:   billing.events\nlayout:  plain (janitor.partitions.enabled)\nversion: %d of %d (clean)\npending: none\n", latest, latest)},
		{"down one step", []string{"migrate", "down", "1"},
			fmt.Sprintf("billing.events: schema version %d of %d (clean)\n", all[len(all)-2].Version, latest)},
		{"status after a step down lists the reverted migration", []string{"migrate", "status"},
			fmt.Sprintf("table:   billing.events\nlayout:  plain (janitor.partitions.enabled)\nversion: %d of %d (clean)\npending: %s\n", all[len(all)-2].Version, latest, last)},
		{"up applies only the reverted migration", []string{"migrate", "up"},
			applied([]migrations.Migration{last}) + fmt.Sprintf("billing.events: schema version %d of %d (clean)\n", latest, latest)},
	}
	for _, s := range steps {
		code, out, errOut := outboxd(t, environ, s.args...)
		if code != 0 || out != s.want {
			t.Fatalf("%s: outboxd %s: exit %d, stderr %q\nstdout:\n%s\nwant:\n%s", s.name, strings.Join(s.args, " "), code, errOut, out, s.want)
		}
	}
}
