package demo

import (
	"context"
	"fmt"
	"os"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/app"
	"github.com/outboxd/outboxd/internal/bench"
	jsdriver "github.com/outboxd/outboxd/router/jetstream"
)

// jsTarget is an embedded NATS server with JetStream and a stream capturing the demo's
// subjects, read by an ordered consumer.
type jsTarget struct {
	url      string
	storeDir string
	stopNATS func()
	nc       *natsgo.Conn
	stream   jetstream.Stream
}

const demoJetStream = "OUTBOXD_DEMO"

func openJetStream(ctx context.Context, _ Options, _ targetEnv) (target, error) {
	t := &jsTarget{}
	var err error
	if t.storeDir, err = os.MkdirTemp("", "outboxd-demo-nats-"); err != nil {
		return nil, err
	}
	if t.url, t.stopNATS, err = bench.StartEmbeddedNATS(t.storeDir); err != nil {
		t.close()
		return nil, fmt.Errorf("demo: %w", err)
	}
	if t.nc, err = natsgo.Connect(t.url); err != nil {
		t.close()
		return nil, fmt.Errorf("demo: connect to embedded NATS: %w", err)
	}
	js, err := jetstream.New(t.nc)
	if err != nil {
		t.close()
		return nil, err
	}
	t.stream, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: demoJetStream, Subjects: []string{demoSubjectPrefix + ">"}, Storage: jetstream.FileStorage})
	if err != nil {
		t.close()
		return nil, fmt.Errorf("demo: create JetStream stream: %w", err)
	}
	return t, nil
}

func (t *jsTarget) driver() (config.Driver, string) {
	drv := jsdriver.DefaultOptions()
	drv.URL = t.url
	// The demo shows the first-deployment setting: the driver creates its stream when
	// it is missing (production leaves this off; docs/configuration.md).
	drv.Provision.Enabled, drv.Provision.Stream = true, demoJetStream
	return config.Driver{Type: jsdriver.Type, Options: drv}, demoSubjectPrefix
}

// consume reads every message the stream stored, by its de-duplication id (a copy
// published after the duplicate window would be stored again, and counted).
func (t *jsTarget) consume(ctx context.Context, receive func(string)) (func(), error) {
	cons, err := t.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	consumed, err := cons.Consume(func(m jetstream.Msg) { receive(m.Headers().Get(natsgo.MsgIdHdr)) })
	if err != nil {
		return nil, err
	}
	return consumed.Stop, nil
}

// absorbed is what the stream answered as duplicates: it drops a copy published inside
// its duplicate window, so a consumer of the stream never sees it; the driver counts
// those answers.
func (t *jsTarget) absorbed(d *app.Dispatcher) func() int64 {
	js, ok := d.Driver(demoDriverName).(*jsdriver.Driver)
	if !ok {
		return func() int64 { return 0 }
	}
	return func() int64 { return int64(js.Duplicates()) }
}

func (t *jsTarget) close() {
	if t.nc != nil {
		t.nc.Close()
	}
	if t.stopNATS != nil {
		t.stopNATS()
	}
	if t.storeDir != "" {
		_ = os.RemoveAll(t.storeDir)
	}
}
