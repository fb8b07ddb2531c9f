package drivers_test

import (
	"os"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/discard"
	"github.com/outboxd/outboxd/router/drivers"
	"github.com/outboxd/outboxd/router/jetstream"
	"github.com/outboxd/outboxd/router/kafka"
	"github.com/outboxd/outboxd/router/nats"
	"github.com/outboxd/outboxd/router/postgres"
	"github.com/outboxd/outboxd/router/rabbitmq"
	"github.com/outboxd/outboxd/router/redis"
	"github.com/outboxd/outboxd/router/webhook"
)

// bindings is each driver type's CloudEvents binding; EventHeader reads no field, so a
// nil driver answers.
var bindings = map[string]router.EventBinding{
	kafka.Type:     (*kafka.Driver)(nil),
	nats.Type:      (*nats.Driver)(nil),
	jetstream.Type: (*jetstream.Driver)(nil),
	webhook.Type:   (*webhook.Driver)(nil),
	redis.Type:     (*redis.Driver)(nil),
	rabbitmq.Type:  (*rabbitmq.Driver)(nil),
	postgres.Type:  (*postgres.Driver)(nil),
	discard.Type:   (*discard.Driver)(nil),
}

// The CloudEvents table of docs/contract.md lists every registered driver type, with
// the header names its binding gives.
func TestTheContractListsEachDriversCloudEventsHeaders(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../docs/contract.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	start := strings.Index(doc, "\n## CloudEvents\n")
	if start < 0 {
		t.Fatal("docs/contract.md has no CloudEvents section")
	}
	section := doc[start+1:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	rows := map[string][]string{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) != 5 || !strings.HasPrefix(line, "| `") {
			continue
		}
		for i := range cells {
			cells[i] = strings.Trim(strings.TrimSpace(cells[i]), "`")
		}
		rows[cells[0]] = cells
	}
	for _, typ := range drivers.All().Types() {
		b, ok := bindings[typ]
		if !ok {
			t.Errorf("driver type %s: no CloudEvents binding known to this test", typ)
			continue
		}
		row, ok := rows[typ]
		if !ok {
			t.Errorf("docs/contract.md: the CloudEvents table has no row for driver type %s", typ)
			continue
		}
		if want := strings.Replace(row[2], "<attr>", "type", 1); b.EventHeader("type") != want {
			t.Errorf("docs/contract.md: %s carries type as %q, the driver as %q", typ, want, b.EventHeader("type"))
		}
		if b.EventHeader("datacontenttype") != row[3] {
			t.Errorf("docs/contract.md: %s carries datacontenttype as %q, the driver as %q", typ, row[3], b.EventHeader("datacontenttype"))
		}
	}
}
