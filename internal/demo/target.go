package demo

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/app"
)

// target is a destination the demo publishes to and reads back: the demo's numbers are
// counted where the messages arrived, never from the dispatcher's own bookkeeping.
type target interface {
	// driver returns the driver section the demo's stream is routed to, and the
	// stream's topic prefix.
	driver() (config.Driver, string)
	// consume starts reading what arrives at the destination and calls receive with
	// each arrived message's Outbox-Message-Id, every copy (duplicates included), from
	// any goroutine, until stop is called. It returns once reading has begun.
	consume(ctx context.Context, receive func(messageID string)) (stop func(), err error)
	// absorbed returns a counter of the re-publishes the destination itself dropped as
	// duplicates, which no consumer sees (JetStream's de-duplication window, an inbox's
	// primary key); 0 where the destination keeps every copy. It is called once the
	// dispatcher is built, before it runs (its drivers are gone once it has stopped),
	// and the counter is read after it stopped.
	absorbed(d *app.Dispatcher) func() int64
	// close releases what open started or connected to.
	close()
}

// targetEnv is what a target may use: the demo's database (a pool to it and its
// connection string) and schema, which Run has just dropped and recreated.
type targetEnv struct {
	pool   *pgxpool.Pool
	dsn    string
	schema string
}

// targetSpec opens one kind of target, by the driver type --driver names.
//
// Adding a destination to the demo is a file of its own (target_<type>.go) holding its
// target and open function, one line in targets, and, when it needs an address, a flag
// on Options (flags.go) with the machine's usual address as default.
type targetSpec struct {
	typ string
	// embedded says the target runs on the embedded brokers, which a build with the
	// noembed tag lacks: the demo then refuses before touching anything.
	embedded bool
	// title names the destination in the summary's heading; confirmed says what the
	// driver's confirmation is, in the latency line.
	title, confirmed string
	// open starts (an embedded server, an in-process sink) or connects to the
	// destination, and prepares what its messages go to (a stream, a queue, a table).
	// A destination that cannot be reached fails here, naming the flag that points
	// elsewhere.
	open func(ctx context.Context, o Options, env targetEnv) (target, error)
}

// targets are the destinations the demo can be pointed at; the first is the default.
var targets = []targetSpec{
	{typ: "jetstream", embedded: true, open: openJetStream, title: "embedded NATS JetStream", confirmed: "JetStream PubAck"},
	{typ: "http", open: openHTTP, title: "HTTP endpoint in this process", confirmed: "the endpoint answered 2xx"},
	{typ: "redis", open: openRedis, title: "Redis stream", confirmed: "XADD replied with the entry id"},
	{typ: "rabbitmq", open: openRabbitMQ, title: "RabbitMQ exchange and queue", confirmed: "publisher confirm"},
	{typ: "postgres", open: openPostgres, title: "PostgreSQL inbox table", confirmed: "the inbox insert committed"},
}

// TargetTypes lists the driver types --driver accepts, the default first.
func TargetTypes() []string {
	types := make([]string, len(targets))
	for i, t := range targets {
		types[i] = t.typ
	}
	return types
}

// targetOf finds the target --driver names.
func targetOf(typ string) (targetSpec, error) {
	i := slices.IndexFunc(targets, func(t targetSpec) bool { return t.typ == typ })
	if i < 0 {
		return targetSpec{}, OptionError(fmt.Sprintf("demo: --driver: unknown driver %q; want one of %s", typ, strings.Join(TargetTypes(), ", ")))
	}
	return targets[i], nil
}
