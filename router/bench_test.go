package router_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/discard"
	natsdriver "github.com/outboxd/outboxd/router/nats"
	"github.com/outboxd/outboxd/router/natsconn"
)

// BenchmarkPublishFormat publishes batches of 100 rows of 1 KiB through a stream's
// publisher in format raw and in format cloudevents, to the discard driver (what the
// framing itself costs) and to the NATS driver with an embedded server (what it costs
// next to a real publish). Run with a fixed count, e.g. -benchtime=2000x; the ratio of
// the cloudevents and raw figures of one driver is the cost of the format.
func BenchmarkPublishFormat(b *testing.B) {
	drivers := []struct {
		name string
		open func(b *testing.B) router.Driver
	}{
		{"discard", func(b *testing.B) router.Driver {
			d, err := discard.New("bench", discard.Options{}, nil)
			if err != nil {
				b.Fatal(err)
			}
			return d
		}},
		{"nats", func(b *testing.B) router.Driver {
			srv := testenv.NewNATS(b)
			d, err := natsdriver.New("bench", natsdriver.Options{Options: natsconn.Options{URL: srv.URL(), PublishTimeout: 10 * time.Second}}, nil)
			if err != nil {
				b.Fatal(err)
			}
			return d
		}},
	}
	for _, drv := range drivers {
		for _, format := range []string{"raw", "cloudevents"} {
			b.Run(drv.name+"/"+format, func(b *testing.B) {
				d := drv.open(b)
				defer d.Close()
				rt := router.Route{Stream: "bench", DriverName: "bench", Driver: d}
				if format == "cloudevents" {
					rt.CloudEvents = &router.CloudEvents{Type: "com.example.bench", SubjectFromKey: true}
				}
				r, err := router.New([]router.Route{rt})
				if err != nil {
					b.Fatal(err)
				}
				pub, err := r.Publisher("bench")
				if err != nil {
					b.Fatal(err)
				}
				msgs := make([]router.Message, 100)
				payload := bytes.Repeat([]byte("p"), 1024)
				created := time.Now()
				for i := range msgs {
					msgs[i] = router.Message{ID: int64(i + 1), Stream: "bench", Topic: "bench.publish", Key: []byte("key"),
						Payload: payload, RowDedupID: "0123456789abcdef0123456789abcdef", CreatedAt: created,
						Headers: map[string]string{"content-type": "application/json", "tenant": "t1"}}
				}
				ctx := context.Background()
				for b.Loop() {
					for i, err := range pub.Publish(ctx, msgs) {
						if err != nil {
							b.Fatalf("message %d: %v", i, err)
						}
					}
				}
				b.ReportMetric(float64(b.N*len(msgs))/b.Elapsed().Seconds(), "msgs/s")
			})
		}
	}
}
