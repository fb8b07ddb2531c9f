// Package bench is outboxd bench, internal to outboxd. It measures, in one run, what a
// dispatcher on this machine and database can do: the SQL ceiling of the claim and
// write-back statements, the drain of a backlog through the discard driver and each
// real driver (the dispatcher running as a child `outboxd run`), commit → confirmation
// latency, the producer's cost and the dispatcher's CPU, memory and start-up; on request,
// drains of two builds interleaved (A/B) and the scale modes (several replicas, many
// streams, big payloads, a large backlog: scale.go, shapes.go). docs/benchmarks.md
// describes every figure and the JSON field names. cmd/outboxd fills Options from its
// flags and calls Run; the SQL it runs is store's (store/benchsql.go).
//
// Invariant: the bench writes to its own schema only (Schema, dropped and recreated at
// every start), never to an application's outbox, and leaves nothing on brokers it is
// pointed at; a run that loses a committed message fails.
//
// Embedded brokers. Without --nats-url and --kafka-brokers the bench starts an embedded
// NATS server and an embedded Kafka-protocol broker (kfake); the demo embeds the same
// NATS server (StartEmbeddedNATS). Nothing else in outboxd needs them, so they sit
// behind a build tag: the default build links them, and every documented command works
// from any build (make build, the container image, make demo, `bin/outboxd bench`);
// `go build -tags noembed ./cmd/outboxd` leaves them out, for a deployment that wants a
// smaller binary with fewer dependencies, and its demo and bench say so (the bench
// still runs against brokers it is given). Measured on linux/amd64 with Go 1.26,
// `CGO_ENABLED=0 go build -trimpath -ldflags "-s -w"` (make build's flags): 41,083,042
// bytes with the brokers, 29,417,634 without (-11.7 MB, -28 %); without -s -w,
// 59,058,863 and 42,424,978. One binary, brokers in by default, was chosen over a
// separate demo binary and over a tag that adds them because the README's and
// docs/benchmarks.md's commands build outboxd plainly and then run demo or bench.
package bench
