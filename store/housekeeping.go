package store

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// lockClass is the first half of outboxd's two-part advisory lock keys ("obxd"), so that
// they cannot collide with an application's single-key locks; the second half is a hash
// of the table's name, so two outbox tables never block each other.
const lockClass = 0x6f627864

// flowClass is the first half of the flow locks' keys ("obxf"); the second half hashes
// the table's name and the stream's, exactly as the insert trigger does (migration 0003).
const flowClass = 0x6f627866

// Lock is a session-level advisory lock held on one connection of the store's sessions
// pool (WithSessions).
type Lock struct {
	conn  *pgxpool.Conn
	class int32
	key   string // hashed by the database into the second half of the key

	// Set for a lock that expires when its holder goes silent (TryFlow): the
	// session's idle_session_timeout before the lock set it, and the heartbeat.
	idleBefore string
	mu         sync.Mutex // one statement on conn at a time: heartbeat or release
	stop, done chan struct{}
	slot       chan struct{} // the store's flowSlots, given back on Release; nil if none
}

// FlowLockIdle is how long the server lets a flow lock's session be silent before it
// ends the session, and with it the lock; the holder's heartbeat speaks every third of
// it. A holder frozen or cut off behind a path that neither answers nor closes (a
// stalled VM, a silent middlebox) cannot be told from a live one by TCP keepalive, whose
// probes a kernel or proxy may answer for it; this clock runs on the server alone.
const FlowLockIdle = 3 * time.Second

// TryLock takes the table's janitor lock without waiting. It returns nil and no error
// when another session holds it.
func (s *Store) TryLock(ctx context.Context) (*Lock, error) {
	l, err := s.tryLock(ctx, lockClass, s.table.AdvisoryLockKey(), 0)
	if err != nil {
		return nil, fmt.Errorf("janitor lock on %s: %w", s.table, err)
	}
	return l, nil
}

// TryFlow takes stream's flow lock without waiting, returning nil and no error when
// another session holds it. While a session holds it, inserts of the stream send no
// notification (migration 0003): its holder promises to poll the stream every
// millisecond instead. PostgreSQL commits the transactions that notified one at a time,
// through their WAL flush, so at a high rate the notifications, not the disk, capped
// how many transactions producers could commit. The lock's session ends, releasing it,
// once its holder has been silent for FlowLockIdle.
//
// When the flow locks share the store's pool, at most half its connections hold one:
// beyond that TryFlow answers nil, as if another session held it, so the pipelines
// always keep connections to claim and write back with (a flowing pipeline waiting for
// a connection that only flow locks hold would wait forever).
func (s *Store) TryFlow(ctx context.Context, stream string) (*Lock, error) {
	if s.flowSlots != nil {
		select {
		case s.flowSlots <- struct{}{}:
		default:
			return nil, nil
		}
	}
	l, err := s.tryLock(ctx, flowClass, s.table.FlowLockKey(stream), FlowLockIdle)
	if l == nil && s.flowSlots != nil {
		<-s.flowSlots
	} else if l != nil {
		l.slot = s.flowSlots
	}
	if err != nil {
		return nil, fmt.Errorf("flow lock of stream %s in %s: %w", stream, s.table, err)
	}
	return l, nil
}

// tryLock takes an advisory lock; idle > 0 makes the server end the lock's session after
// that long without a statement (idle_session_timeout, PostgreSQL 14 and later; older
// servers keep the lock until the session ends otherwise), and starts a heartbeat.
//
// The lock and its idle limit are taken by one statement: set by a second, a path that
// stalled between the two (the lock granted, the limit not yet heard) left the server
// holding a lock without a limit for as long as the path stayed silent, every
// notification of the stream withheld meanwhile.
func (s *Store) tryLock(ctx context.Context, class int32, key string, idle time.Duration) (*Lock, error) {
	conn, err := s.sessions.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	var limit *string // NULL: no idle limit
	if idle > 0 {
		limit = new(fmt.Sprint(idle.Milliseconds()))
	}
	var got bool
	var before *string // NULL where the server has no idle_session_timeout
	// OFFSET 0 keeps the subquery whole, so the setting is read before it is changed
	// and changed only once the lock is granted.
	if err := conn.QueryRow(ctx, `SELECT l.got, l.before,
			CASE WHEN l.got AND l.before IS NOT NULL AND $3::text IS NOT NULL
				THEN set_config('idle_session_timeout', $3, false) END
		FROM (SELECT pg_try_advisory_lock($1, hashtext($2)) AS got,
			current_setting('idle_session_timeout', true) AS before OFFSET 0) l`,
		class, key, limit).Scan(&got, &before, nil); err != nil {
		conn.Release()
		return nil, err
	}
	if !got {
		conn.Release()
		return nil, nil
	}
	l := &Lock{conn: conn, class: class, key: key}
	if limit == nil || before == nil {
		return l, nil
	}
	l.idleBefore = *before
	l.stop, l.done = make(chan struct{}), make(chan struct{})
	go l.heartbeat(idle / 3) //nolint:gosec // G118: the heartbeat lives as long as the lock, not the call that took it
	return l, nil
}

// heartbeat keeps the lock's session from looking idle while this process can reach the
// server. It stops at the first failure: the session is then gone or unreachable, and
// the server ends it on its own.
func (l *Lock) heartbeat(every time.Duration) {
	defer close(l.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), every)
		l.mu.Lock()
		_, err := l.conn.Exec(ctx, `SELECT 1`)
		l.mu.Unlock()
		cancel()
		if err != nil {
			return
		}
	}
}

// Release gives the lock back. If unlocking fails, the connection is closed instead,
// which releases every lock its session held.
func (l *Lock) Release(ctx context.Context) {
	if l == nil || l.conn == nil {
		return
	}
	if l.stop != nil {
		close(l.stop)
		<-l.done
		l.stop = nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var err error
	if l.idleBefore != "" {
		// The connection goes back to the pool: it must not keep the lock's idle limit.
		_, err = l.conn.Exec(ctx, `SELECT pg_advisory_unlock($1, hashtext($2)), set_config('idle_session_timeout', $3, false)`,
			l.class, l.key, l.idleBefore)
	} else {
		_, err = l.conn.Exec(ctx, `SELECT pg_advisory_unlock($1, hashtext($2))`, l.class, l.key)
	}
	if err != nil {
		_ = l.conn.Conn().Close(ctx)
	}
	l.conn.Release()
	l.conn = nil
	if l.slot != nil {
		<-l.slot
		l.slot = nil
	}
}

// Reclaim hands expired leases back to pending, oldest expiry first, at most limit rows,
// without spending an attempt. It returns how long each reclaimed lease had been
// expired.
//
// Concurrency: SKIP LOCKED passes over rows a pipeline is writing back right now; a
// pipeline whose write-back comes later presents a token the row no longer carries and
// is refused. Expiry is judged on the database clock.
func (s *Store) Reclaim(ctx context.Context, limit int) ([]time.Duration, error) {
	rows, err := s.pool.Query(ctx, s.sql.reclaim, limit)
	if err != nil {
		return nil, fmt.Errorf("reclaim expired leases in %s: %w", s.table, err)
	}
	defer rows.Close()
	var overdue []time.Duration
	for rows.Next() {
		var us int64
		if err := rows.Scan(&us); err != nil {
			return nil, fmt.Errorf("reclaim expired leases in %s: %w", s.table, err)
		}
		overdue = append(overdue, time.Duration(us)*time.Microsecond)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reclaim expired leases in %s: %w", s.table, err)
	}
	return overdue, nil
}

// Purge deletes up to limit rows past retention and returns how many it deleted:
// delivered rows published more than retention ago, raising the purge horizon of their
// streams (a replay refuses a window reaching back to it), then, with what is left of
// limit, expired rows created more than retention ago (expiry.go; a replay never takes
// them, so they move no horizon). Pending, leased and failed rows are never touched.
func (s *Store) Purge(ctx context.Context, retention time.Duration, limit int) (int64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, s.sql.purge, retention.Milliseconds(), limit).Scan(&n); err != nil {
		return 0, fmt.Errorf("purge delivered rows from %s: %w", s.table, err)
	}
	if n >= int64(limit) {
		return n, nil
	}
	tag, err := s.pool.Exec(ctx, s.sql.purgeExpired, retention.Milliseconds(), int64(limit)-n)
	if err != nil {
		return n, fmt.Errorf("purge expired rows from %s: %w", s.table, err)
	}
	return n + tag.RowsAffected(), nil
}
