package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/dispatch"
	"github.com/outboxd/outboxd/events/tracing"
	"github.com/outboxd/outboxd/router"
)

// The documents deploy/ points operators to must not drift from what they describe: the
// runbook from the alert rules and metric names, the contract from the headers and
// attributes the code sends.

func readDoc(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "docs", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestTheRunbookSaysWhatToDoForEveryAlert(t *testing.T) {
	t.Parallel()
	type rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	var alerts []string
	for _, g := range decodeYAML[rules](t, filepath.Join("prometheus", "alerts.yml"))[0].Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				alerts = append(alerts, r.Alert)
			}
		}
	}
	if len(alerts) == 0 {
		t.Fatal("prometheus/alerts.yml holds no alert")
	}
	ops := readDoc(t, "operations.md")
	headings := regexp.MustCompile(`(?m)^### (\S+)\s*$`).FindAllStringSubmatch(ops, -1)
	var documented []string
	for _, h := range headings {
		documented = append(documented, h[1])
	}
	for _, a := range alerts {
		if !slices.Contains(documented, a) {
			t.Errorf("alert %s has no section \"### %s\" in docs/operations.md", a, a)
		}
	}
	for _, d := range documented {
		if strings.HasPrefix(d, "Outboxd") && !slices.Contains(alerts, d) {
			t.Errorf("docs/operations.md has a section for %s, which is not an alert in prometheus/alerts.yml", d)
		}
	}
}

func TestTheRunbookNamesOnlyMetricsThatExist(t *testing.T) {
	t.Parallel()
	metrics := readDoc(t, "metrics.md")
	for _, doc := range []string{"operations.md", "contract.md"} {
		for _, name := range regexp.MustCompile("`(outboxd_[a-z_]+)").FindAllStringSubmatch(readDoc(t, doc), -1) {
			if !strings.Contains(metrics, "`"+name[1]+"`") {
				t.Errorf("docs/%s names the metric %s, which docs/metrics.md does not list", doc, name[1])
			}
		}
	}
}

func TestTheContractNamesEveryHeaderAndAttributeOutboxdSends(t *testing.T) {
	t.Parallel()
	contract := readDoc(t, "contract.md")
	sent := []string{
		router.HeaderID, router.HeaderStream, router.HeaderKey, router.HeaderMessageID, "Nats-Msg-Id",
		dispatch.HeaderDeadLetterStream, dispatch.HeaderDeadLetterTopic, dispatch.HeaderDeadLetterAttempts,
		dispatch.HeaderDeadLetterReason, dispatch.HeaderDeadLetterError,
		"traceparent", "tracestate",
		string(tracing.AttrStream), string(tracing.AttrAttempts), string(tracing.AttrWaitMS),
		"messaging.system", "messaging.destination.name", "messaging.message.id", "error.type",
	}
	for _, k := range []router.Kind{router.KindRetryable, router.KindPermanent, router.KindUnreachable, router.KindCanceled, router.KindHeldBack} {
		sent = append(sent, k.String())
	}
	for _, s := range sent {
		if !strings.Contains(contract, "`"+s+"`") {
			t.Errorf("docs/contract.md does not name `%s`", s)
		}
	}
}
