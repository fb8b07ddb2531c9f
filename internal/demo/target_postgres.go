package demo

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/app"
	pgdrv "github.com/outboxd/outboxd/router/postgres"
	"github.com/outboxd/outboxd/table"
)

// inboxTarget is an inbox table in the demo's own schema of the demo's database, read
// by the consumer loop docs/configuration.md shows: unprocessed rows by seq, marked
// processed as they are taken. Its SQL is the destination's, not the outbox's (store).
type inboxTarget struct {
	pool  *pgxpool.Pool
	dsn   string
	inbox table.Name
}

// inboxPoll is how long the consumer waits after finding nothing new.
const inboxPoll = 10 * time.Millisecond

func openPostgres(ctx context.Context, _ Options, env targetEnv) (target, error) {
	t := &inboxTarget{pool: env.pool, dsn: env.dsn, inbox: table.Name{Schema: env.schema, Table: "inbox"}}
	if _, err := env.pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+table.Quote(env.schema)+";\n"+pgdrv.InboxSQL(t.inbox)); err != nil {
		return nil, fmt.Errorf("demo: create the inbox %s: %w", t.inbox, err)
	}
	return t, nil
}

func (t *inboxTarget) driver() (config.Driver, string) {
	o := pgdrv.DefaultOptions()
	o.URL, o.Table = t.dsn, t.inbox.String()
	return config.Driver{Type: pgdrv.Type, Options: o}, demoSubjectPrefix
}

// consume takes the unprocessed rows in seq order and marks them, as a consumer
// following the documentation would, until stop is called.
func (t *inboxTarget) consume(ctx context.Context, receive func(string)) (func(), error) {
	take := "UPDATE " + t.inbox.Qualified() + " SET processed_at = now()\n" +
		"WHERE seq IN (SELECT seq FROM " + t.inbox.Qualified() + " WHERE processed_at IS NULL ORDER BY seq LIMIT 5000 FOR UPDATE)\n" +
		"RETURNING message_id"
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			rows, err := t.pool.Query(ctx, take)
			var ids []string
			if err == nil {
				ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
			}
			for _, id := range ids {
				receive(id)
			}
			if err != nil || len(ids) == 0 {
				select { // nothing new, or the database blinked: the next round retries
				case <-ctx.Done():
				case <-time.After(inboxPoll):
				}
			}
		}
	}()
	return func() { cancel(); <-done }, nil
}

// absorbed is what the inbox's primary key absorbed: copies published again, which
// the driver counts and no consumer sees.
func (t *inboxTarget) absorbed(d *app.Dispatcher) func() int64 {
	drv, ok := d.Driver(demoDriverName).(*pgdrv.Driver)
	if !ok {
		return func() int64 { return 0 }
	}
	return func() int64 { return int64(drv.Duplicates()) }
}

// close leaves the inbox: it is in the demo's schema, which the next run drops.
func (t *inboxTarget) close() {}
