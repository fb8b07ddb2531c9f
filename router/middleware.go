package router

import "context"

// Sender publishes a batch and answers one error per message, in order: a driver's
// Publish, or a middleware around it.
type Sender func(ctx context.Context, msgs []Message) []error

// Destination names what a Publisher sends: the messages of Stream, or its dead letters
// (DeadLetter), through the driver configured as Driver.
type Destination struct {
	Stream     string
	Driver     string
	DeadLetter bool
}

// Middleware decorates the sending of one destination's messages: it returns a Sender
// that does its work around next (tracing, timing, confirmations), once per publisher
// when the router is built. It sees the messages bound for their destination (topic
// prefix applied) and sits under PublishOrdered's chunking, so a middleware only ever
// implements one batch publish and ordered streams keep their ordering. A middleware
// must hand next's answer on, one error per message, and must not edit the messages
// it is given (copy them to change them); returning nil leaves next undecorated.
type Middleware func(to Destination, next Sender) Sender

// WithMiddleware installs middlewares on every publisher of the router, dead-letter
// ones included. The first given is the outermost: it sees a batch first and its
// answer last.
func WithMiddleware(m ...Middleware) Option {
	return func(s *settings) { s.middleware = append(s.middleware, m...) }
}
