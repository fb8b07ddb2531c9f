package bench

import (
	"context"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/driveropt"
	rabbitdrv "github.com/outboxd/outboxd/router/rabbitmq"
)

// DefaultRabbitMQURL is --rabbitmq-url's default: a local broker. A URL without user
// info logs in as RabbitMQ's local guest account.
const DefaultRabbitMQURL = "amqp://127.0.0.1:5672/"

// The bench's RabbitMQ exchange and queue: a topic exchange routing outboxd-bench.# to
// one durable queue, so that a confirm means the message was written to disk as
// production would have it. The queue is a classic queue of version 2, the storage
// RabbitMQ 4 keeps for every classic queue; on 3.x it stores persistent messages with
// about half the broker's CPU of version 1, which bounds the drain on a small machine.
const (
	benchRabbitExchange = "outboxd-bench"
	benchRabbitQueue    = "outboxd-bench"
)

var rabbitDest = benchDest{
	typ: rabbitdrv.Type,
	environ: func(o router.Options) map[string]string {
		r := o.(rabbitdrv.Options)
		return map[string]string{"URL": r.URL, "EXCHANGE": r.Exchange}
	},
	options: func(o benchOptions) router.Options {
		r := rabbitdrv.DefaultOptions()
		r.URL, r.Exchange = rabbitURL(o), benchRabbitExchange
		return r
	},
	setup: setupRabbitMQ,
	arrivals: func(ctx context.Context, b *bench) (arrivalCounter, error) {
		return purgeRabbitQueue(ctx, rabbitURL(b.opt))
	},
}

func rabbitURL(o benchOptions) string {
	if o.raw.RabbitMQURL != "" {
		return o.raw.RabbitMQURL
	}
	return DefaultRabbitMQURL
}

// dialRabbit connects as the bench (not the driver): to declare, purge and read back.
func dialRabbit(url string) (*amqp.Connection, *amqp.Channel, error) {
	shown := driveropt.RedactURL(url, driveropt.Mask, false)
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(10 * time.Second)})
	if err != nil {
		return nil, nil, fmt.Errorf("bench: connect to RabbitMQ at %s (--rabbitmq-url): %w", shown, err)
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("bench: RabbitMQ at %s: open a channel: %w", shown, err)
	}
	return conn, ch, nil
}

// setupRabbitMQ declares the exchange, queue and binding; the closer deletes them.
func setupRabbitMQ(_ context.Context, b *bench) (string, string, func(), error) {
	url := rabbitURL(b.opt)
	conn, ch, err := dialRabbit(url)
	if err != nil {
		return "", "", nil, err
	}
	defer conn.Close()
	// A queue left by a run that did not finish may have other arguments.
	_, err = ch.QueueDelete(benchRabbitQueue, false, false, false)
	if err == nil {
		err = ch.ExchangeDeclare(benchRabbitExchange, amqp.ExchangeTopic, true, false, false, false, nil)
	}
	if err == nil {
		_, err = ch.QueueDeclare(benchRabbitQueue, true, false, false, false, amqp.Table{"x-queue-version": int32(2)})
	}
	if err == nil {
		err = ch.QueueBind(benchRabbitQueue, benchPrefix+"#", benchRabbitExchange, false, nil)
	}
	if err != nil {
		return "", "", nil, fmt.Errorf("bench: RabbitMQ: declare exchange and queue %s: %w", benchRabbitExchange, err)
	}
	cleanup := func() {
		conn, ch, err := dialRabbit(url)
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = ch.QueueDelete(benchRabbitQueue, false, false, false)
		_ = ch.ExchangeDelete(benchRabbitExchange, false, false)
	}
	describe := fmt.Sprintf("%s, exchange %s (topic) routing %s# to the durable classic queue (version 2) %s",
		driveropt.RedactURL(url, driveropt.Mask, false), benchRabbitExchange, benchPrefix, benchRabbitQueue)
	return url, describe, cleanup, nil
}

// rabbitCounter reads the bench queue, emptied before the drain, back after it.
type rabbitCounter struct{ url string }

func purgeRabbitQueue(_ context.Context, url string) (arrivalCounter, error) {
	conn, ch, err := dialRabbit(url)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if _, err := ch.QueuePurge(benchRabbitQueue, false); err != nil {
		return nil, fmt.Errorf("bench: purge the RabbitMQ queue %s: %w", benchRabbitQueue, err)
	}
	return rabbitCounter{url: url}, nil
}

func (rabbitCounter) countedBy() string {
	return "the RabbitMQ queue " + benchRabbitQueue + ", read back (distinct Outbox-Id headers)"
}

func (rabbitCounter) close() {}

// count consumes every message the queue holds: each was confirmed, so it is there once
// the dispatcher has stopped.
func (c rabbitCounter) count(ctx context.Context, ids []int64, _ *dispatcherProcess) (int64, int64, error) {
	conn, ch, err := dialRabbit(c.url)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	q, err := ch.QueueDeclarePassive(benchRabbitQueue, true, false, false, false, nil)
	if err == nil {
		err = ch.Qos(1000, 0, false)
	}
	var deliveries <-chan amqp.Delivery
	if err == nil {
		deliveries, err = ch.ConsumeWithContext(ctx, benchRabbitQueue, "", false, true, false, false, nil)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("bench: read the RabbitMQ queue %s: %w", benchRabbitQueue, err)
	}
	t := newTally()
	for n := 0; n < q.Messages; n++ {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return 0, 0, fmt.Errorf("bench: the RabbitMQ queue %s closed after %d of %d messages", benchRabbitQueue, n, q.Messages)
			}
			id, _ := d.Headers[router.HeaderID].(string)
			t.add(id)
			if n%500 == 499 || n == q.Messages-1 {
				if err := d.Ack(true); err != nil {
					return 0, 0, err
				}
			}
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-time.After(30 * time.Second):
			return 0, 0, fmt.Errorf("bench: the RabbitMQ queue %s held %d messages; %d arrived in 30s", benchRabbitQueue, q.Messages, n)
		}
	}
	arrived, dups := t.against(ids)
	return arrived, dups, nil
}
