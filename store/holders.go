package store

// Who holds this table's advisory locks: the replicas page of the web console.

import (
	"context"
	"fmt"
	"time"
)

// LockHolder is one session holding one of the table's advisory locks: the janitor
// lock (Lock "janitor") or a stream's flow lock (Lock "flow", Stream set), with what
// pg_stat_activity says of the session. A role without pg_read_all_stats sees only
// its own sessions' details; another role's show empty.
type LockHolder struct {
	PID          int32
	Lock, Stream string
	Application  string
	ClientAddr   string
	BackendStart time.Time
}

// lockHoldersSQL finds the granted advisory locks of the table's janitor key and of the
// named streams' flow keys in pg_locks, where a two-part key (class, hashtext(key))
// shows as classid, objid (as unsigned 32-bit oids) and objsubid 2, and joins each to
// its session. It reads only the server's lock and activity views, never the outbox
// table; no locks. Parameters: $1 janitor class, $2 janitor key, $3 flow class, $4 the
// streams, $5 their flow keys (same order).
const lockHoldersSQL = `
WITH keys(what, stream, class, obj) AS (
    SELECT 'janitor', '', $1::int, hashtext($2::text)
    UNION ALL
    SELECT 'flow', s.stream, $3::int, hashtext(s.key) FROM unnest($4::text[], $5::text[]) AS s(stream, key)
)
SELECT l.pid, k.what, k.stream, coalesce(a.application_name, ''), coalesce(host(a.client_addr), ''), a.backend_start
FROM keys k
JOIN pg_locks l ON l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
 AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
 AND l.classid = (k.class::bigint & 4294967295)::text::oid AND l.objid = (k.obj::bigint & 4294967295)::text::oid
LEFT JOIN pg_stat_activity a ON a.pid = l.pid
ORDER BY k.what DESC, k.stream, l.pid`

// LockHolders lists the sessions holding the table's janitor lock and the flow locks of
// streams, janitor first.
func (s *Store) LockHolders(ctx context.Context, streams []string) ([]LockHolder, error) {
	keys := make([]string, len(streams))
	for i, st := range streams {
		keys[i] = s.table.FlowLockKey(st)
	}
	if streams == nil {
		streams = []string{}
	}
	rows, err := s.pool.Query(ctx, lockHoldersSQL, lockClass, s.table.AdvisoryLockKey(), flowClass, streams, keys)
	if err != nil {
		return nil, fmt.Errorf("list lock holders of %s: %w", s.table, err)
	}
	defer rows.Close()
	var out []LockHolder
	for rows.Next() {
		var h LockHolder
		var start *time.Time
		if err := rows.Scan(&h.PID, &h.Lock, &h.Stream, &h.Application, &h.ClientAddr, &start); err != nil {
			return nil, fmt.Errorf("list lock holders of %s: %w", s.table, err)
		}
		h.BackendStart = deref(start)
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list lock holders of %s: %w", s.table, err)
	}
	return out, nil
}
