package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/testenv"
	pgdrv "github.com/outboxd/outboxd/router/postgres"
	"github.com/outboxd/outboxd/table"
)

func TestConfigCheckConnectSaysWhichStreamHasNoDestinationAndWhatToDo(t *testing.T) {
	t.Parallel()
	pg := testenv.NewPG(t)
	srv := testenv.NewNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	environ := []string{
		"OUTBOXD_DATABASE_URL=" + pg.DSN, "OUTBOXD_SCHEMA=" + pg.Table.Schema, "OUTBOXD_TABLE=" + pg.Table.Table,
		"OUTBOXD_DRIVERS__EVENTS__TYPE=jetstream", "OUTBOXD_DRIVERS__EVENTS__URL=" + srv.URL(),
		"OUTBOXD_STREAMS__ORDERS__DRIVER=events", "OUTBOXD_STREAMS__ORDERS__TOPIC_PREFIX=shop.orders.",
		"OUTBOXD_STREAMS__CARTS__DRIVER=events", "OUTBOXD_STREAMS__CARTS__TOPIC_PREFIX=shop.carts.",
	}
	check := func() (int, string, string) {
		var out, errOut bytes.Buffer
		code := run(ctx, env{args: []string{"config", "check", "--connect"}, environ: environ, stdout: &out, stderr: &errOut})
		return code, out.String(), errOut.String()
	}

	// No stream captures either prefix: one line per stream, each saying what to do.
	code, out, errOut := check()
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	if code != 1 || len(lines) != 2 {
		t.Fatalf("exit %d, stderr:\n%s\nstdout:\n%s\nwant exit 1 and two lines", code, errOut, out)
	}
	for i, stream := range []string{"carts", "orders"} {
		want := `stream "` + stream + `": no JetStream stream captures subject "shop.` + stream + `.>" on ` + srv.URL() +
			": create a stream capturing it, or set drivers.events.provision.enabled: true"
		if lines[i] != want {
			t.Fatalf("line %d:\n%s\nwant\n%s", i+1, lines[i], want)
		}
	}

	// Once a stream captures both, the check passes with a summary.
	nc, err := natsgo.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "SHOP", Subjects: []string{"shop.>"}}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = check()
	if code != 0 || errOut != "" || !strings.HasPrefix(out, "OK: ") || !strings.Contains(out, `stream "orders": subject "shop.orders.>" exists on driver "events"`) {
		t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s\nwant exit 0 and an OK summary", code, out, errOut)
	}

	// An unreachable server is one line too, naming the driver.
	srv.Stop()
	code, _, errOut = check()
	if code != 1 || !strings.HasPrefix(errOut, `driver "events": cannot reach `) || strings.Count(errOut, "\n") != 1 {
		t.Fatalf("with the server stopped: exit %d, stderr:\n%s", code, errOut)
	}
}

func TestConfigCheckConnectNeverPrintsSecrets(t *testing.T) {
	t.Parallel()
	pg := testenv.NewPG(t)
	srv := testenv.NewNATS(t)
	addr := strings.TrimPrefix(srv.URL(), "nats://")
	srv.Stop() // the failure lines are where a secret could leak
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dsn := strings.Replace(pg.DSN, "postgres://postgres@", "postgres://postgres:db-s3cret@", 1)
	if dsn == pg.DSN {
		t.Skipf("the test DSN %q has no user to put a password beside", config.RedactDSN(pg.DSN))
	}
	environ := []string{
		"OUTBOXD_DATABASE_URL=" + dsn, "OUTBOXD_SCHEMA=nowhere",
		"OUTBOXD_DRIVERS__EVENTS__TYPE=jetstream", "OUTBOXD_DRIVERS__EVENTS__URL=nats://app:nats-s3cret@" + addr,
		"OUTBOXD_DRIVERS__BUS__TYPE=nats", "OUTBOXD_DRIVERS__BUS__URL=nats://" + addr, "OUTBOXD_DRIVERS__BUS__TOKEN=tok-s3cret",
		"OUTBOXD_STREAMS__ORDERS__DRIVER=events", "OUTBOXD_STREAMS__ORDERS__TOPIC_PREFIX=shop.orders.",
	}
	var out, errOut bytes.Buffer
	code := run(ctx, env{args: []string{"config", "check", "--connect"}, environ: environ, stdout: &out, stderr: &errOut})
	if code != 1 || strings.Count(errOut.String(), "\n") != 3 {
		t.Fatalf("exit %d, stderr:\n%s\nwant exit 1 and three lines (schema, two drivers)", code, errOut.String())
	}
	if all := out.String() + errOut.String(); strings.Contains(all, "s3cret") {
		t.Fatalf("a secret was printed:\n%s", all)
	}
}

func TestConfigCheckConnectReportsAMissingRabbitMQExchange(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQURL(t)
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	pg := testenv.NewPG(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	exchange := fmt.Sprintf("outboxd-test-check-%d", time.Now().UnixNano())
	environ := []string{
		"OUTBOXD_DATABASE_URL=" + pg.DSN, "OUTBOXD_SCHEMA=" + pg.Table.Schema, "OUTBOXD_TABLE=" + pg.Table.Table,
		"OUTBOXD_DRIVERS__BUS__TYPE=rabbitmq", "OUTBOXD_DRIVERS__BUS__URL=" + url, "OUTBOXD_DRIVERS__BUS__EXCHANGE=" + exchange,
		"OUTBOXD_STREAMS__ORDERS__DRIVER=bus",
	}
	check := func() (int, string, string) {
		var out, errOut bytes.Buffer
		code := run(ctx, env{args: []string{"config", "check", "--connect"}, environ: environ, stdout: &out, stderr: &errOut})
		return code, out.String(), errOut.String()
	}

	code, out, errOut := check()
	want := `driver "bus": exchange "` + exchange + `" does not exist in vhost "/" on ` + config.RedactDSN(url) +
		": create it, or fix drivers.bus\n"
	if code != 1 || errOut != want {
		t.Fatalf("exit %d, stderr:\n%s\nstdout:\n%s\nwant exit 1 and\n%s", code, errOut, out, want)
	}

	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare(exchange, "topic", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	defer ch.ExchangeDelete(exchange, false, false) //nolint:errcheck // best effort; auto-delete besides
	code, out, errOut = check()
	if code != 0 || errOut != "" || !strings.Contains(out, `driver "bus": reached `) {
		t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s\nwant exit 0 and an OK summary", code, out, errOut)
	}
}

func TestConfigCheckConnectFindsAMissingInboxAndSaysHowToCreateIt(t *testing.T) {
	t.Parallel()
	pg := testenv.NewPG(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	inbox := table.Name{Schema: pg.Table.Schema, Table: "inbox"} // dropped with the test's schema
	environ := []string{
		"OUTBOXD_DATABASE_URL=" + pg.DSN, "OUTBOXD_SCHEMA=" + pg.Table.Schema, "OUTBOXD_TABLE=" + pg.Table.Table,
		"OUTBOXD_DRIVERS__INBOX__TYPE=postgres", "OUTBOXD_DRIVERS__INBOX__URL=" + pg.DSN, "OUTBOXD_DRIVERS__INBOX__TABLE=" + inbox.String(),
		"OUTBOXD_STREAMS__ORDERS__DRIVER=inbox",
	}
	check := func() (int, string, string) {
		var out, errOut bytes.Buffer
		code := run(ctx, env{args: []string{"config", "check", "--connect"}, environ: environ, stdout: &out, stderr: &errOut})
		return code, out.String(), errOut.String()
	}

	code, out, errOut := check()
	want := `driver "inbox": inbox table ` + inbox.String() + " does not exist: create it with docs/sql/inbox.sql on " +
		config.RedactDSN(pg.DSN) + ": create it, or fix drivers.inbox\n"
	if code != 1 || errOut != want {
		t.Fatalf("exit %d, stderr:\n%s\nstdout:\n%s\nwant exit 1 and\n%s", code, errOut, out, want)
	}

	if _, err := pg.Pool.Exec(ctx, pgdrv.InboxSQL(inbox)); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = check()
	if code != 0 || errOut != "" || !strings.Contains(out, `driver "inbox": reached `) {
		t.Fatalf("with the inbox created: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

func TestTheDiscardDriverTypeIsAcceptedAndTakesNoTLS(t *testing.T) {
	t.Parallel()
	environ := []string{"OUTBOXD_DRIVERS__SINK__TYPE=discard", "OUTBOXD_STREAMS__ORDERS__DRIVER=sink"}
	if code, out, errOut := outboxd(t, environ, "config", "check"); code != 0 || !strings.Contains(out, "type: discard") {
		t.Fatalf("config check: exit %d, %q, %q", code, out, errOut)
	}
	environ = append(environ, "OUTBOXD_DRIVERS__SINK__TLS__ENABLED=true", "OUTBOXD_DRIVERS__SINK__URL=nats://n:4222")
	code, _, errOut := outboxd(t, environ, "config", "check")
	if code != 1 || !strings.Contains(errOut, "drivers.sink.tls.enabled: only valid for types kafka, nats, jetstream, http, redis and rabbitmq") || !strings.Contains(errOut, "drivers.sink.url: only valid") {
		t.Fatalf("config check with TLS and a URL on a discard driver: exit %d, %q", code, errOut)
	}
}
