// Package app is outboxd's composition root, internal to outboxd: it builds a
// Dispatcher from a validated config.Config (pools, store, drivers, router, one pipeline
// per stream, listener, janitor, samplers, event bus, dead-letter forwarder), runs it,
// and carries the bodies of the verbs that wire those parts together: run (tracing,
// metrics, the admin endpoints, waiting for PostgreSQL), migrate and config check
// --connect. cmd/outboxd parses the command line and calls in here; demo and bench build
// their dispatchers here too.
//
// Run serves every outbox table of the configuration (config.Served): one Dispatcher per
// outbox, each waiting for its own database and sharing nothing with the others but the
// process, the metrics registry (its series under an outbox label) and the admin
// listener, so that a database that is down or slow holds back only its own outbox.
//
// Invariant: everything Run or NewDispatcher starts is stopped, in reverse order of
// starting: a NewDispatcher that fails closes what it had opened; Dispatcher.Run stops the
// pipelines first (they write back and release their leases), then the background loops,
// then drains the event bus while the drivers are still open, and closes drivers and
// pools last; Run's admin endpoints, started first, stop after the dispatcher.
package app
