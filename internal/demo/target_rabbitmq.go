package demo

import (
	"context"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/app"
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/driveropt"
	rabbitdrv "github.com/outboxd/outboxd/router/rabbitmq"
)

// DefaultRabbitMQURL is --rabbitmq-url's default: a local broker. A URL without user
// info logs in as RabbitMQ's local guest account.
const DefaultRabbitMQURL = "amqp://127.0.0.1:5672/"

// demoRabbitExchange is the demo's topic exchange; a queue of the consumer's own,
// deleted with its connection, is bound to every demo routing key.
const demoRabbitExchange = "outboxd-demo"

// rabbitTarget is a RabbitMQ broker the demo reaches at --rabbitmq-url (it starts none).
type rabbitTarget struct {
	url   string
	conn  *amqp.Connection
	ch    *amqp.Channel
	queue string
}

func openRabbitMQ(_ context.Context, o Options, _ targetEnv) (target, error) {
	t := &rabbitTarget{url: o.RabbitMQURL}
	if t.url == "" {
		t.url = DefaultRabbitMQURL
	}
	shown := driveropt.RedactURL(t.url, driveropt.Mask, false)
	var err error
	if t.conn, err = amqp.DialConfig(t.url, amqp.Config{Dial: amqp.DefaultDial(10 * time.Second)}); err != nil {
		return nil, fmt.Errorf("demo: connect to RabbitMQ at %s (--rabbitmq-url): %w", shown, err)
	}
	if t.ch, err = t.conn.Channel(); err == nil {
		err = t.ch.ExchangeDeclare(demoRabbitExchange, amqp.ExchangeTopic, false, true, false, false, nil)
	}
	var q amqp.Queue
	if err == nil {
		q, err = t.ch.QueueDeclare("", false, true, true, false, nil)
	}
	if err == nil {
		t.queue = q.Name
		err = t.ch.QueueBind(q.Name, demoSubjectPrefix+"#", demoRabbitExchange, false, nil)
	}
	if err != nil {
		t.close()
		return nil, fmt.Errorf("demo: RabbitMQ at %s: declare exchange %s and a queue: %w", shown, demoRabbitExchange, err)
	}
	return t, nil
}

func (t *rabbitTarget) driver() (config.Driver, string) {
	drv := rabbitdrv.DefaultOptions()
	drv.URL, drv.Exchange = t.url, demoRabbitExchange
	return config.Driver{Type: rabbitdrv.Type, Options: drv}, demoSubjectPrefix
}

// consume reads the queue, counting every copy by its Outbox-Message-Id.
func (t *rabbitTarget) consume(ctx context.Context, receive func(string)) (func(), error) {
	if err := t.ch.Qos(2000, 0, false); err != nil {
		return nil, err
	}
	deliveries, err := t.ch.ConsumeWithContext(ctx, t.queue, "", true, true, false, false, nil)
	if err != nil {
		return nil, err
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case d, ok := <-deliveries:
				if !ok {
					return
				}
				id, _ := d.Headers[router.HeaderMessageID].(string)
				receive(id)
			case <-stop:
				return
			}
		}
	}()
	return func() { close(stop); <-done }, nil
}

// absorbed is 0: RabbitMQ keeps every copy, which the consumer counts as duplicates.
func (t *rabbitTarget) absorbed(*app.Dispatcher) func() int64 { return func() int64 { return 0 } }

func (t *rabbitTarget) close() {
	if t.ch != nil {
		_ = t.ch.ExchangeDelete(demoRabbitExchange, false, false)
	}
	if t.conn != nil {
		_ = t.conn.Close() // deletes the consumer's queue
	}
}
