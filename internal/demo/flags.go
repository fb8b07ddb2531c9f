package demo

import (
	"flag"
	"strings"
)

// Register declares outboxd demo's flags on fs, each filling its field of o; o's values
// when called are the defaults shown.
func (o *Options) Register(fs *flag.FlagSet) {
	fs.IntVar(&o.Messages, "messages", o.Messages, "messages to produce")
	fs.IntVar(&o.Producers, "producers", o.Producers, "concurrent producer goroutines, each committing transactions")
	fs.IntVar(&o.Batch, "batch", o.Batch, "messages per producer transaction")
	fs.IntVar(&o.RollbackEvery, "rollback-every", o.RollbackEvery, "roll back every Nth transaction on purpose (0: never)")
	fs.IntVar(&o.LoseAnswerEvery, "lose-answer-every", o.LoseAnswerEvery, "lose the destination's answer to every Nth publish of a batch, as a dropped connection would: the dispatcher publishes it again (JetStream's de-duplication drops the copies; elsewhere the consumer counts them as duplicates) (0: never)")
	fs.BoolVar(&o.JSON, "json", o.JSON, "print the summary as one JSON object on stdout, and nothing else there")
	fs.StringVar(&o.Driver, "driver", o.Driver, "the destination to publish to and count at: "+strings.Join(TargetTypes(), ", "))
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "give up waiting for delivery after this long")
	fs.StringVar(&o.RedisAddr, "redis-addr", o.RedisAddr, "with --driver redis: the Redis server (host:port); the demo adds to a stream of its own in database 0, "+demoRedisPrefix+"<random>.orders, deleted when it ends")
	fs.StringVar(&o.RabbitMQURL, "rabbitmq-url", o.RabbitMQURL, "with --driver rabbitmq: the broker to publish to (the demo starts none); it declares the exchange "+demoRabbitExchange+" and a queue of its own there")
}
