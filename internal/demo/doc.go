// Package demo is outboxd demo, internal to outboxd: a destination (target.go; by
// default an embedded NATS server with JetStream), a dispatcher built by internal/app, concurrent producers committing (and
// on purpose rolling back) transactions and a consumer, ending with a summary of what
// was produced, delivered, duplicated, lost and delivered though rolled back.
// cmd/outboxd-bench fills Options from its flags and calls Run; its SQL is store's.
//
// Invariant: the demo writes to its own schema only (outboxd_demo, dropped and
// recreated at every start), never to an application's outbox; it fails when a
// committed message is lost or a rolled-back one arrives.
//
// The embedded NATS server comes from internal/bench (StartEmbeddedNATS) and is left
// out of a build with the noembed tag, where the demo refuses to start and says why;
// the default build of outboxd-bench, which make demo and make build use, links it. The
// bench's package doc says why the demo lives in outboxd-bench and not in outboxd.
package demo
