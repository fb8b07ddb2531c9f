package main

import (
	"encoding/json"
	"errors"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxd/outboxd/internal/bench"
	"github.com/outboxd/outboxd/internal/demo"
	"github.com/outboxd/outboxd/internal/testenv"
)

// TestBenchDrainsToRabbitMQAndLeavesNothingThere counts the drain at the broker (the
// bench's queue, read back) and finds its exchange and queue gone afterwards.
func TestBenchDrainsToRabbitMQAndLeavesNothingThere(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQURL(t)
	bin := dispatcher(t)
	environ := []string{"OUTBOXD_DATABASE_URL=" + testenv.EmptyDatabase(t)}
	code, out, errOut := outboxdBench(t, environ, "bench", "--quick", "--json", "--dispatcher-binary", bin,
		"--drivers", "rabbitmq", "--rabbitmq-url", url, "--idle-samples", "3", "--rate", "50")
	if code != 0 {
		t.Fatalf("bench: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	var r bench.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if got := r.Drivers["rabbitmq"].Drain.ArrivedAtBroker; !r.OK || got != int64(r.Settings.Messages) {
		t.Fatalf("ok %v, %d arrived at the broker, want %d", r.OK, got, r.Settings.Messages)
	}
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, declare := range []func(*amqp.Channel) error{
		func(ch *amqp.Channel) error {
			return ch.ExchangeDeclarePassive("outboxd-bench", amqp.ExchangeTopic, true, false, false, false, nil)
		},
		func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclarePassive("outboxd-bench", true, false, false, false, nil)
			return err
		},
	} {
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		var e *amqp.Error
		if err := declare(ch); !errors.As(err, &e) || e.Code != amqp.NotFound {
			t.Errorf("the bench left its exchange or queue on the broker: passive declare says %v", err)
		}
	}
}

func TestDemoDeliversToRabbitMQCountingRepublishesAsDuplicates(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQURL(t)
	environ := []string{"OUTBOXD_DATABASE_URL=" + testenv.EmptyDatabase(t)}
	code, out, errOut := outboxdBench(t, environ, "demo", "--driver", "rabbitmq", "--rabbitmq-url", url,
		"--messages", "2000", "--lose-answer-every", "2", "--json") // see the Redis test on why 2
	if code != 0 {
		t.Fatalf("demo: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	var s demo.Summary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("demo --json printed %q: %v", out, err)
	}
	if s.Committed != 1800 || s.Delivered != 1800 || s.Lost != 0 || s.Phantoms != 0 || s.Duplicates == 0 {
		t.Fatalf("summary %+v: want every committed message delivered, and the lost answers' copies as duplicates", s)
	}
}
