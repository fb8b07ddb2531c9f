package router

import "context"

// Prober is implemented by drivers that can tell, before anything is published,
// whether the broker has a destination that takes dest (a Kafka topic, a JetStream
// subject or subject pattern), so that a missing one is found before the first message
// fails on it (outboxd config check --connect).
type Prober interface {
	// Probe returns nil when the broker would take a message to dest, a
	// *NoDestinationError when it is reachable and has nothing for dest, and another
	// error when it could not be asked. An empty dest asks whether the broker is
	// reachable and, for a driver whose own settings name a destination (a RabbitMQ
	// exchange), whether that exists.
	Probe(ctx context.Context, dest string) error
}

// NoDestinationError says that a reachable broker has no destination for a probe's
// dest; Reason is a sentence naming it.
type NoDestinationError struct{ Reason string }

func (e *NoDestinationError) Error() string { return e.Reason }
