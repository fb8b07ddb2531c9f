// Package drivers lists the destinations this build of outboxd can publish to. It is
// internal to outboxd.
//
// Invariant: this list is the one place a driver type is made known. The configuration
// decodes a drivers.<name> section into the options its registration gives, and the
// composition root builds the driver through the same registration, so adding a
// destination is its own package plus one line here.
package drivers

import (
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/discard"
	"github.com/outboxd/outboxd/router/jetstream"
	"github.com/outboxd/outboxd/router/kafka"
	"github.com/outboxd/outboxd/router/nats"
	"github.com/outboxd/outboxd/router/postgres"
	"github.com/outboxd/outboxd/router/rabbitmq"
	"github.com/outboxd/outboxd/router/redis"
	"github.com/outboxd/outboxd/router/webhook"
)

// All returns every registered driver type, in the order they are documented.
func All() router.Registry {
	return router.Registry{
		router.Register(kafka.Type, kafka.DefaultOptions, kafka.New),
		router.Register(nats.Type, nats.DefaultOptions, nats.New),
		router.Register(jetstream.Type, jetstream.DefaultOptions, jetstream.New),
		router.Register(webhook.Type, webhook.DefaultOptions, webhook.New),
		router.Register(redis.Type, redis.DefaultOptions, redis.New),
		router.Register(rabbitmq.Type, rabbitmq.DefaultOptions, rabbitmq.New),
		router.Register(postgres.Type, postgres.DefaultOptions, postgres.New),
		router.Register(discard.Type, discard.DefaultOptions, discard.New),
	}
}
