package bench

import (
	"flag"
	"strings"
)

// Register declares outboxd bench's flags on fs, each filling its field of o; o's
// values when called are the defaults shown. The caller parses fs and records which
// flags were given in o.Given.
func (o *Options) Register(fs *flag.FlagSet) {
	drivers := strings.Join(DriverTypes(), ", ")
	fs.IntVar(&o.Messages, "messages", o.Messages, "backlog size of the SQL ceiling and of each drain")
	fs.IntVar(&o.PayloadBytes, "payload", o.PayloadBytes, "payload bytes per message")
	fs.IntVar(&o.Keys, "keys", o.Keys, "distinct message keys")
	fs.BoolVar(&o.Ordered, "ordered", o.Ordered, "make the streams ordered (per-key FIFO, docs/ordering.md); --keys 1 is a single hot key")
	fs.IntVar(&o.Retained, "retained", o.Retained, "delivered rows kept in the table through every phase (e.g. 10000000)")
	fs.BoolVar(&o.Flow, "flow", o.Flow, "let pipelines flow under a high producer rate (streams.<name>.flow); --flow=false keeps every insert notifying")
	fs.BoolVar(&o.Alone, "alone", o.Alone, "after the discard, jetstream and kafka drains, move the same backlog with one claimer process doing only their claims and commits and, for jetstream and kafka, the least publish of each row: the drains' limits on this machine")
	fs.StringVar(&o.Ack, "ack", o.Ack, "write-back of a confirmed message: update (mark delivered, run's default) or delete (as with janitor.retention 0)")
	fs.IntVar(&o.Streams, "streams", o.Streams, "streams the backlog is spread over, one pipeline each")
	fs.IntVar(&o.BatchSize, "batch", o.BatchSize, "rows per claim (batch_size); default: what outboxd run uses")
	fs.IntVar(&o.Concurrency, "concurrency", o.Concurrency, "batches in flight per stream (concurrency); default: what outboxd run uses")
	fs.IntVar(&o.Rate, "rate", o.Rate, "offered rate of the latency phase, messages/s")
	fs.DurationVar(&o.LatencyDuration, "latency-duration", o.LatencyDuration, "how long the offered-rate latency phase runs")
	fs.IntVar(&o.IdleSamples, "idle-samples", o.IdleSamples, "messages sent one at a time through an idle pipeline")
	fs.StringVar(&o.Drivers, "drivers", o.Drivers, "drivers to measure, comma-separated: "+drivers)
	fs.StringVar(&o.DatabaseURL, "database-url", "", "PostgreSQL to measure (default $OUTBOXD_DATABASE_URL or postgres://postgres@127.0.0.1:5432/postgres); the bench uses schema "+Schema+" only")
	fs.StringVar(&o.NATSURL, "nats-url", "", "use this NATS server (JetStream enabled for the jetstream driver) instead of an embedded one")
	fs.StringVar(&o.KafkaBrokers, "kafka-brokers", "", "use these Kafka brokers (host:port,...) instead of an embedded Kafka-protocol broker")
	fs.StringVar(&o.RedisAddr, "redis-addr", o.RedisAddr, "the Redis server (host:port) the redis driver publishes to, in database 0, stream "+benchRedisKey+" (deleted before each drain and at the end)")
	fs.StringVar(&o.RabbitMQURL, "rabbitmq-url", DefaultRabbitMQURL, "RabbitMQ for the rabbitmq driver (not started by the bench); it declares the exchange and durable queue "+benchRabbitQueue+" there and deletes them at the end")
	fs.BoolVar(&o.JSON, "json", false, "print one JSON object with every figure instead of the table, and no progress")
	fs.BoolVar(&o.Quick, "quick", false, "small sizes, for tests and CI (flags given explicitly still win)")
	fs.StringVar(&o.Binary, "dispatcher-binary", "", "outboxd binary run as the drain's dispatcher process (default: the outboxd beside this executable)")
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "give up on a phase after this long")
	fs.StringVar(&o.BaselineBinary, "baseline-binary", "", "A/B mode: run each drain with this outboxd (A) and with the current one (B), interleaved (A B, B A, …), --rounds times")
	fs.IntVar(&o.Rounds, "rounds", o.Rounds, "A/B pairs per driver with --baseline-binary")
	fs.StringVar(&o.Replicas, "replicas", "", "scale mode: drain one backlog with each of these numbers of dispatcher processes, e.g. 1,2,4")
	fs.StringVar(&o.ManyStreams, "many-streams", "", "scale mode: configure each of these numbers of streams, e.g. 100,1000, all idle but a few busy ones")
	fs.DurationVar(&o.IdleWindow, "idle-window", o.IdleWindow, "how long --many-streams watches the idle dispatcher")
	fs.StringVar(&o.Payloads, "payloads", "", "scale mode: drain big payloads of each of these sizes, e.g. 64KiB,256KiB,1MiB")
	fs.IntVar(&o.Backlog, "backlog", 0, "scale mode: a backlog of this many pending rows (e.g. 10000000), its drain rate over --backlog-sample messages")
	fs.IntVar(&o.BacklogSample, "backlog-sample", o.BacklogSample, "messages over which --backlog measures the drain rate")
}
