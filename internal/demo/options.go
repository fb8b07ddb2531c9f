package demo

import (
	"io"
	"time"
)

// Options are outboxd demo's command line, as cmd/outboxd-bench's flags fill them; each
// field's flag is named in its comment. DefaultOptions gives every default.
type Options struct {
	Messages        int           // --messages: messages to produce
	Producers       int           // --producers: concurrent producer goroutines
	Batch           int           // --batch: messages per producer transaction
	RollbackEvery   int           // --rollback-every: roll back every Nth transaction (0: never)
	LoseAnswerEvery int           // --lose-answer-every: lose the answer to every Nth batch (0: never)
	JSON            bool          // --json: the summary as one JSON object, alone on stdout
	Timeout         time.Duration // --timeout: give up waiting for delivery after this long
	Driver          string        // --driver: the destination's driver type (target.go)
	RedisAddr       string        // --redis-addr: the Redis server of --driver redis, host:port
	RabbitMQURL     string        // --rabbitmq-url: the broker of --driver rabbitmq
	// DatabaseURL is the PostgreSQL the demo writes to, in its own schema ("": the
	// configuration's default).
	DatabaseURL    string
	Stdout, Stderr io.Writer
}

// DefaultOptions are the demo's defaults: 100,000 messages from 8 producers.
func DefaultOptions() Options {
	return Options{Messages: 100000, Producers: 8, Batch: 50, RollbackEvery: 10, Timeout: 5 * time.Minute, Driver: targets[0].typ,
		RedisAddr:   DefaultRedisAddr,
		RabbitMQURL: DefaultRabbitMQURL}
}

// OptionError is a mistake in the options, as a command line's usage error.
type OptionError string

func (e OptionError) Error() string { return string(e) }
