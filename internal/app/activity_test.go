package app

import (
	"context"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/events"
)

// TestTheConsoleActivityIsFedFromTheBusOnlyWhileTheConsoleIsOn: with http.ui on, an
// outbox's bus feeds its console activity (the streams page's throughput); with the
// console off there is none to feed.
func TestTheConsoleActivityIsFedFromTheBusOnlyWhileTheConsoleIsOn(t *testing.T) {
	t.Parallel()
	for _, ui := range []string{config.UIOff, config.UIOn} {
		t.Run(ui, func(t *testing.T) {
			cfg := config.Default()
			cfg.HTTP.UI = ui
			cfg.Streams = map[string]config.Stream{"orders": config.DefaultStream()}
			o := newOutboxes(&cfg, prometheus.NewRegistry(), "v1.2.3", slog.New(slog.DiscardHandler))[0]
			if (o.activity != nil) != (ui == config.UIOn) {
				t.Fatalf("http.ui %s: activity %v", ui, o.activity)
			}
			if o.activity == nil {
				return
			}
			bus := events.NewBus(slog.New(slog.DiscardHandler))
			o.options(false, nil, false).Subscribe(bus)
			bus.Emit(events.Iteration{Stream: "orders", Published: 7})
			if err := bus.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			var n int64
			for _, v := range o.activity.Of("orders").PerSlot {
				n += v
			}
			if n != 7 || o.version != "v1.2.3" {
				t.Errorf("after 7 published: activity counts %d, version %q; want 7, v1.2.3", n, o.version)
			}
		})
	}
}
