package app

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/router"
	jsdriver "github.com/outboxd/outboxd/router/jetstream"
)

func TestStartProvisionsOneJetStreamStreamCapturingEveryPrefixRoutedToTheDriver(t *testing.T) {
	t.Parallel()
	srv := testenv.NewNATS(t)
	cfg := config.Default()
	js := jsdriver.DefaultOptions()
	js.URL = srv.URL()
	js.Provision.Enabled, js.Provision.Stream = true, "SHOP"
	plain := jsdriver.DefaultOptions() // provisioning off: left alone
	plain.URL = srv.URL()
	cfg.Drivers = map[string]config.Driver{"events": {Type: jsdriver.Type, Options: js}, "plain": {Type: jsdriver.Type, Options: plain}}
	orders, carts, other := config.DefaultStream(), config.DefaultStream(), config.DefaultStream()
	orders.Driver, orders.TopicPrefix = "events", "shop.orders."
	orders.DeadLetter = config.DeadLetter{Driver: "events", Topic: "dead.orders"}
	carts.Driver, carts.TopicPrefix = "events", "shop.carts."
	other.Driver, other.TopicPrefix = "plain", "other."
	cfg.Streams = map[string]config.Stream{"orders": orders, "carts": carts, "other": other}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	drivers := map[string]router.Driver{}
	for name, dc := range cfg.Drivers {
		d, err := jsdriver.New(name, dc.Options.(jsdriver.Options), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Close() })
		drivers[name] = d
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := provisionDrivers(ctx, &cfg, drivers, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatalf("provisionDrivers: %v", err)
	}

	nc, err := natsgo.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	api, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := api.Stream(ctx, "SHOP")
	if err != nil {
		t.Fatalf("the provisioned stream: %v", err)
	}
	want := []string{"shop.carts.>", "shop.orders.>", "dead.orders"}
	if got := s.CachedInfo().Config.Subjects; !slices.Equal(got, want) {
		t.Fatalf("stream SHOP captures %v, want %v", got, want)
	}
	if n := api.StreamNames(ctx); n.Err() != nil {
		t.Fatal(n.Err())
	} else {
		var names []string
		for name := range n.Name() {
			names = append(names, name)
		}
		if !slices.Equal(names, []string{"SHOP"}) {
			t.Fatalf("streams %v, want only SHOP (the driver without provisioning creates nothing)", names)
		}
	}
}
