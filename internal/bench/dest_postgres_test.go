package bench

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/router"
	pgdrv "github.com/outboxd/outboxd/router/postgres"
)

// TestTheInboxCountsEachDrainedMessageOnceAndNothingElse publishes, through the
// driver the drain's dispatcher would build, the drained messages, some twice, one
// under a second message id, and a stranger; the count is the drain's messages, and
// the one copy the primary key could not absorb.
func TestTheInboxCountsEachDrainedMessageOnceAndNothingElse(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn := testenv.EmptyDatabase(t)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+Schema); err != nil {
		t.Fatal(err)
	}
	b := &bench{opt: benchOptions{dsn: dsn}, pool: pool, progress: newProgress(io.Discard, false)}
	if _, _, _, err := postgresDest.setup(ctx, b); err != nil {
		t.Fatal(err)
	}
	opts, ok := postgresDest.options(b.opt).(pgdrv.Options)
	if !ok {
		t.Fatalf("the postgres destination's options are %T", postgresDest.options(b.opt))
	}
	d, err := pgdrv.New("bench", opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	publish := func(ids ...int64) {
		t.Helper()
		msgs := make([]router.Message, len(ids))
		for i, id := range ids {
			msgs[i] = router.Message{ID: id, Stream: "bench_1", Topic: "events", Payload: []byte("p")}
		}
		for i, err := range d.Publish(ctx, msgs) {
			if err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
		}
	}
	publish(14) // left from an earlier drain: arrivals empties the inbox

	counter, err := postgresDest.arrivals(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	publish(10, 11, 12, 13)
	publish(10, 11) // re-published: absorbed
	publish(99)     // no message of this drain
	if _, err := pool.Exec(ctx, "INSERT INTO "+benchInbox.Qualified()+
		" (message_id, outbox_id, stream, topic, headers, payload) VALUES ('other-id', 12, 'bench_1', 'events', '{}', '')"); err != nil {
		t.Fatal(err)
	}
	arrived, duplicates, err := counter.count(ctx, []int64{10, 11, 12, 13, 14}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if arrived != 4 || duplicates != 1 {
		t.Fatalf("counted %d arrived and %d duplicates; want 4 (14 never came) and 1 (12 under a second id)", arrived, duplicates)
	}
}
