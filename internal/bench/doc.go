// Package bench is outboxd bench, internal to outboxd. It measures, in one run, what a
// dispatcher on this machine and database can do: the SQL ceiling of the claim and
// write-back statements, the drain of a backlog through the discard driver and each
// real driver (the dispatcher running as a child `outboxd run`), commit → confirmation
// latency, the producer's cost and the dispatcher's CPU, memory and start-up; on request,
// drains of two builds interleaved (A/B) and the scale modes (several replicas, many
// streams, big payloads, a large backlog: scale.go, shapes.go). docs/benchmarks.md
// describes every figure and the JSON field names. cmd/outboxd-bench fills Options from
// its flags and calls Run; the SQL it runs is store's (store/benchsql.go).
//
// Invariant: the bench writes to its own schema only (Schema, dropped and recreated at
// every start), never to an application's outbox, and leaves nothing on brokers it is
// pointed at; a run that loses a committed message fails.
//
// Embedded brokers. Without --nats-url and --kafka-brokers the bench starts an embedded
// NATS server and an embedded Kafka-protocol broker (kfake); the demo embeds the same
// NATS server (StartEmbeddedNATS). Nothing else in outboxd needs them, so the bench and
// the demo live in their own command, outboxd-bench, which make build builds beside
// outboxd and which `outboxd bench` and `outboxd demo` exec: the outboxd deployments run
// links neither the brokers nor franz-go (cmd/outboxd's tests hold it to that). Its drains
// run the outboxd beside it (dispatcherBinary). The noembed build tag still leaves the
// brokers out of outboxd-bench (`go build -tags noembed ./cmd/outboxd-bench`), whose demo
// and bench then say so (the bench still runs against brokers it is given). Measured on
// the 2-core dev VM with make build's flags: one outboxd with every verb 50.8 MB and
// 30.7 MiB RSS idle in `outboxd run`; outboxd without bench and demo 34.6 MB and 25.8 MiB.
package bench
