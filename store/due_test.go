package store_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/store"
)

// TestDueStreamsNamesTheStreamsWithRowsToClaimOrToExpire fills a table with one stream
// of each kind and reads which the shared poll would wake, in both layouts.
func TestDueStreamsNamesTheStreamsWithRowsToClaimOrToExpire(t *testing.T) {
	t.Parallel()
	for _, layout := range []migrations.Layout{migrations.Plain, migrations.Partitioned} {
		t.Run(layout.String(), func(t *testing.T) {
			t.Parallel()
			pg := testenv.NewPGLayout(t, layout)
			s, err := store.New(pg.Pool, pg.Table)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := pg.Pool.Exec(ctx, `INSERT INTO `+pg.Table.Qualified()+` (stream, topic, payload, status, published_at, available_at, expires_at) VALUES
				('ready', 't', 'x', 'pending', NULL, now() - interval '1 second', NULL),
				('backing-off', 't', 'x', 'pending', NULL, now() + interval '1 hour', NULL),
				('outlived', 't', 'x', 'pending', NULL, now() + interval '1 hour', now() - interval '1 second'),
				('outlived', 't', 'x', 'pending', NULL, now() + interval '2 hours', NULL),
				('done', 't', 'x', 'delivered', now(), now() - interval '1 hour', NULL)`); err != nil {
				t.Fatal(err)
			}
			got, err := s.DueStreams(ctx)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]bool{"ready": true, "backing-off": false, "outlived": true}
			if !maps.Equal(got, want) {
				t.Fatalf("due streams %v, want %v", got, want)
			}
		})
	}
}
