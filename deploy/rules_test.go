package deploy_test

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// TestTheAlertRulesPassTheirUnitTests runs promtool's unit tests of the alert rules
// (prometheus/alerts_test.yml): each tested alert fires on the series that should make
// it fire, after its `for`, and stays quiet otherwise.
func TestTheAlertRulesPassTheirUnitTests(t *testing.T) {
	t.Parallel()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found on PATH: this test runs promtool's rule unit tests.\n" +
			"Install it with: sudo apt-get install -y --no-install-recommends prometheus\n" +
			"(scripts/test.sh installs it when run as root)")
	}
	cmd := exec.Command(promtool, "test", "rules", "alerts_test.yml")
	cmd.Dir = filepath.Join("prometheus")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules prometheus/alerts_test.yml: %v\n%s", err, out)
	}
}
