package bench

import (
	"context"
	"fmt"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/router"
	pgdrv "github.com/outboxd/outboxd/router/postgres"
	"github.com/outboxd/outboxd/table"
)

// benchInbox is the postgres driver's inbox: in the bench's own schema of the bench's
// own database, so that the bench still writes nowhere else, created afresh by setup
// (the schema was just recreated) and emptied before each drain. Its SQL is the
// destination's, as reading a Kafka topic back is, not the outbox's (store).
var benchInbox = table.Name{Schema: Schema, Table: "inbox"}

var postgresDest = benchDest{typ: pgdrv.Type, byDefault: true,
	environ: func(o router.Options) map[string]string {
		p := o.(pgdrv.Options)
		return map[string]string{"URL": p.URL, "TABLE": p.Table}
	},
	options: func(o benchOptions) router.Options {
		p := pgdrv.DefaultOptions()
		p.URL, p.Table = o.dsn, benchInbox.String()
		return p
	},
	setup: func(ctx context.Context, b *bench) (string, string, func(), error) {
		if _, err := b.pool.Exec(ctx, pgdrv.InboxSQL(benchInbox)); err != nil {
			return "", "", nil, fmt.Errorf("bench: create the inbox %s: %w", benchInbox, err)
		}
		return b.opt.dsn, fmt.Sprintf("inbox table %s in %s", benchInbox, config.RedactDSN(b.opt.dsn)), nil, nil
	},
	arrivals: func(ctx context.Context, b *bench) (arrivalCounter, error) {
		if _, err := b.pool.Exec(ctx, "TRUNCATE "+benchInbox.Qualified()); err != nil {
			return nil, fmt.Errorf("bench: empty the inbox %s: %w", benchInbox, err)
		}
		return inboxCounter{b: b}, nil
	},
}

// inboxCounter reads the inbox back after a drain.
type inboxCounter struct{ b *bench }

func (inboxCounter) countedBy() string {
	return "the inbox table " + benchInbox.String() + ", read back (distinct outbox_id; its primary key absorbs copies)"
}

func (inboxCounter) close() {}

// count returns how many of ids have a row and how many extra rows those have (none,
// unless a message came back under another message id), as tally.against does.
func (c inboxCounter) count(ctx context.Context, ids []int64, _ *dispatcherProcess) (arrived, duplicates int64, err error) {
	var rows int64
	err = c.b.pool.QueryRow(ctx, "SELECT count(DISTINCT outbox_id), count(*) FROM "+benchInbox.Qualified()+
		" WHERE outbox_id = ANY ($1)", ids).Scan(&arrived, &rows)
	return arrived, rows - arrived, err
}
