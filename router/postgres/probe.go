package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/outboxd/outboxd/router"
)

var _ router.Prober = (*Driver)(nil)

// probeSQL describes the inbox $1 (quoted and qualified): whether it exists, whether the
// current user may insert into it, whether message_id alone has a unique index without
// a predicate (what ON CONFLICT (message_id) needs), and its columns with their types.
const probeSQL = `SELECT c.oid IS NOT NULL,
       coalesce(has_table_privilege(c.oid, 'INSERT'), false),
       EXISTS (SELECT 1
                 FROM pg_index i
                 JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
                WHERE i.indrelid = c.oid AND i.indisunique AND i.indnkeyatts = 1
                  AND i.indpred IS NULL AND i.indexprs IS NULL AND a.attname = 'message_id'),
       coalesce((SELECT array_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod))
                   FROM pg_attribute a
                  WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped), '{}')
  FROM (SELECT to_regclass($1) AS oid) c`

// wantColumns are the columns the driver writes and the types it can write into each.
var wantColumns = []struct {
	name  string
	types []string
}{
	{"message_id", []string{"text", "character varying"}},
	{"outbox_id", []string{"bigint", "numeric"}},
	{"stream", []string{"text", "character varying"}},
	{"topic", []string{"text", "character varying"}},
	{"key", []string{"bytea"}},
	{"headers", []string{"jsonb", "json"}},
	{"payload", []string{"bytea"}},
}

// Probe reports whether the inbox is there as the driver needs it: the table exists,
// the user may insert into it, it has the columns the driver writes, with types it can
// write, and a unique index on message_id. Every topic goes into that one table, so
// dest plays no part: an empty dest asks the same.
func (d *Driver) Probe(ctx context.Context, _ string) error {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return d.closedErr()
	}
	var exists, insert, unique bool
	var columns []string
	if err := d.pool.QueryRow(ctx, probeSQL, d.table.Qualified()).Scan(&exists, &insert, &unique, &columns); err != nil {
		return fmt.Errorf("describe inbox table %s: %w", d.where, err)
	}
	missing := func(why string) error {
		return &router.NoDestinationError{Reason: fmt.Sprintf("inbox table %s %s", d.where, why)}
	}
	if !exists {
		return missing("does not exist: create it with " + inboxScript)
	}
	var wrong []string
	for _, w := range wantColumns {
		i := slices.IndexFunc(columns, func(c string) bool { return strings.HasPrefix(c, w.name+" ") })
		if i < 0 {
			wrong = append(wrong, "no column "+w.name)
			continue
		}
		typ, _, _ := strings.Cut(strings.TrimPrefix(columns[i], w.name+" "), "(")
		if !slices.Contains(w.types, typ) {
			wrong = append(wrong, fmt.Sprintf("column %s is %s, want %s", w.name, typ, w.types[0]))
		}
	}
	switch {
	case len(wrong) > 0:
		return missing("has the wrong shape (" + strings.Join(wrong, "; ") + "): compare it with " + inboxScript)
	case !unique:
		return missing("has no primary key or unique index on message_id, which absorbs re-publishes: compare it with " + inboxScript)
	case !insert:
		return missing("does not take inserts from this database user: grant it USAGE on the schema and INSERT on the table")
	}
	return nil
}
