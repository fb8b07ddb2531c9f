package store

// Transaction mode (streams.<name>.claim: transaction, docs/contract.md): a claim is held
// as row locks in a transaction that stays open while the batch is published, and every
// write-back of the batch runs in that transaction, which commits once at the end.
//
// Invariants:
//   - The row lock is the claim: the claim statement locks the rows it returns FOR
//     UPDATE SKIP LOCKED and writes nothing, so concurrent claimers (lease or
//     transaction mode, any replica) take disjoint rows, and a row is written once per
//     batch, by its outcome.
//   - Nothing is written unless the transaction commits: a commit that fails, a
//     connection that breaks and a process that dies all leave the batch's rows pending
//     and unlocked as they were, to be claimed again (at least once, never lost). The
//     server ends a transaction left idle for longer than the lease TTL
//     (idle_in_transaction_session_timeout), so a hung dispatcher frees its rows then.
//   - Write-backs present the claim's token, as in lease mode, only to find the
//     transaction; the row lock, not the token, makes them the claim's own.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// heldClaimSQL locks a batch of one stream, as claimSQL leases one: the same walk of
// the claim index in its own order, SKIP LOCKED for disjoint claims, but no UPDATE.
// A row inserted before migration 0004 has no dedup_id and none is written here; it is
// published with one derived from the row's identity, the same on every claim of the
// row in this mode. Parameters: $1 stream, $2 limit, $3 the lease TTL in ms (reported
// as the claim's LeaseUntil: the server ends the transaction once it idles that long),
// $4 the stream's ttl in ms (0: none), $5 and $6 the position to start after.
const heldClaimSQL = `
SELECT m.id, m.topic, m.key, m.headers, m.payload, coalesce(m.message_id, ''),
       coalesce(m.dedup_id, md5('outboxd:' || m.tableoid::regclass::text || ':' || m.id)::uuid)::text,
       m.attempts, m.created_at, m.deferred_since, now() + $3 * interval '1 millisecond',
       m.available_at
FROM {{table}} AS m
WHERE stream = $1 AND status = 'pending' AND available_at <= now() AND {{live}}
  AND (available_at, id) > ($5::timestamptz, $6::bigint)
ORDER BY available_at, id
LIMIT $2
FOR UPDATE SKIP LOCKED`

// held turns a lease-checked write-back into the same write-back of a locked row: the
// row is still pending (the claim wrote nothing) and locked by this transaction. The
// token parameter stays, unused by the row check, so parameters keep their numbers.
// now() is the transaction's start, the claim's time, which the publish follows by up
// to publish_timeout: the write-backs take statement_timestamp() instead, the time the
// outcome is written, as in lease mode (retry backoffs, published_at, delivery lags).
func held(sql string) string {
	const leased = `m.status = 'leased' AND m.lease_token = $2`
	if !strings.Contains(sql, leased) {
		panic("store: write-back without the lease check: " + sql)
	}
	sql = strings.ReplaceAll(sql, leased, `m.status = 'pending' AND $2::uuid IS NOT NULL`)
	return strings.ReplaceAll(sql, "now()", "statement_timestamp()")
}

// heldAcknowledgement is held(ack) recording the claim's owner ($3) on each row it
// acknowledges, as a lease claim records it: who delivered the row. A deletion keeps
// nothing, so it only names the parameter.
func heldAcknowledgement(ack string) string {
	const set = `SET status = 'delivered',`
	if strings.Contains(ack, set) {
		return strings.Replace(held(ack), set, set+` owner = $3,`, 1)
	}
	return strings.Replace(held(ack), `$2::uuid IS NOT NULL`, `$2::uuid IS NOT NULL AND $3::text IS NOT NULL`, 1)
}

// heldSettingsSQL sets a held claim's transaction up, for it alone (local):
//   - the idle bound: the server ends the transaction, and so frees its rows, once it
//     has been idle for the lease TTL ($1, in ms);
//   - generic plans for the statements it runs (the sweep, the claim and the
//     write-backs). Left to choose, PostgreSQL kept planning the claim afresh for every
//     execution, since no generic plan is priced below a custom one made for the
//     values: 0.6 ms of the server's CPU per claim, a third of the sweep and claim's
//     1.9 ms on 100,000 pending and 900,000 delivered rows (pgbench, -M prepared). Their
//     generic plans are the custom ones: each walks its index with the parameters as
//     bounds (TestAHeldClaimPlansItsStatementsOnceForEveryExecution).
const heldSettingsSQL = `SELECT set_config('idle_in_transaction_session_timeout', $1, true),
       set_config('plan_cache_mode', 'force_generic_plan', true)`

// ClaimHeld locks up to limit available pending rows of stream after from for owner
// (recorded on the rows it acknowledges), oldest availability first, in a transaction that stays open on one of the pool's connections until Commit
// or Rollback with the claim's token. The expiry sweep (expiry.go) runs first, in the
// same transaction. ttl bounds the transaction: the server ends it, and so frees the
// rows, once it has been idle that long. An empty claim holds nothing. A claim that
// fails holds nothing either: its connection is closed, which rolls it back.
func (s *Store) ClaimHeld(ctx context.Context, stream string, limit int, owner string, ttl time.Duration, from Position) (Claim, error) {
	if limit <= 0 {
		return Claim{}, fmt.Errorf("claim %s: limit must be positive, got %d", stream, limit)
	}
	if ttl < time.Millisecond {
		return Claim{}, fmt.Errorf("claim %s: lease TTL must be at least 1ms, got %s", stream, ttl)
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return Claim{}, fmt.Errorf("claim %s: %w", stream, err)
	}
	c := Claim{Token: NewToken()}
	ok := false
	defer func() {
		if !ok {
			_ = conn.Conn().Close(context.WithoutCancel(ctx)) // rolls back whatever it holds
			conn.Release()
		}
	}()
	// One round trip: BEGIN, the transaction's settings, the sweep and the claim.
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(heldSettingsSQL, strconv.FormatInt(ttl.Milliseconds(), 10))
	b.Queue(s.sql.expire, stream, s.ttlMillis(stream), expireBatch, shortDuration(s.ttl[stream]))
	at, id := from.args()
	b.Queue(s.sql.heldClaim, stream, limit, ttl.Milliseconds(), s.ttlMillis(stream), at, id)
	br := conn.SendBatch(ctx, b)
	if err := s.readClaimHeld(br, stream, limit, &c); err != nil {
		_ = br.Close()
		return Claim{Expired: c.Expired}, fmt.Errorf("claim %s: %w", stream, err)
	}
	if err := br.Close(); err != nil {
		return Claim{Expired: c.Expired}, fmt.Errorf("claim %s: %w", stream, err)
	}
	if len(c.Messages) == 0 {
		// Nothing to hold; commit what the sweep expired.
		if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
			return Claim{Expired: nil}, fmt.Errorf("claim %s: commit the expiry sweep: %w", stream, err)
		}
		ok = true
		conn.Release()
		return c, nil
	}
	s.heldMu.Lock()
	if s.held == nil {
		s.held = map[Token]heldClaim{}
	}
	s.held[c.Token] = heldClaim{conn: conn, owner: owner}
	s.heldMu.Unlock()
	ok = true
	return c, nil
}

func (s *Store) readClaimHeld(br pgx.BatchResults, stream string, limit int, c *Claim) error {
	if _, err := br.Exec(); err != nil {
		return err
	}
	if _, err := br.Exec(); err != nil {
		return err
	}
	rows, err := br.Query()
	if err != nil {
		return err
	}
	for rows.Next() {
		var e Expired
		if err := rows.Scan(&e.ID, &e.Topic, &e.Key, &e.Headers, &e.Payload, &e.MessageID,
			&e.DedupID, &e.Attempts, &e.Reason); err != nil {
			rows.Close()
			return fmt.Errorf("expire: read row: %w", err)
		}
		c.Expired = append(c.Expired, e)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("expire: %w", err)
	}
	if rows, err = br.Query(); err != nil {
		return err
	}
	return readClaimed(rows, stream, limit, c)
}

// ErrNotHeld is returned for a token no transaction of this store holds: its claim was
// not made by ClaimHeld, or its transaction already ended.
var ErrNotHeld = errors.New("no transaction holds this claim")

// heldClaim is an open transaction of a held claim: its connection and its owner.
type heldClaim struct {
	conn  *pgxpool.Conn
	owner string
}

// heldConn is the connection holding token's transaction, nil in lease mode.
func (s *Store) heldConn(token Token) *pgxpool.Conn {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	return s.held[token].conn
}

// take removes token's transaction from the held ones.
func (s *Store) take(token Token) heldClaim {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	h := s.held[token]
	delete(s.held, token)
	return h
}

// Commit ends a held claim's transaction: it acknowledges acks (the broker confirmed
// them) and commits, in one round trip, with every write-back made under token before.
// On error nothing of the transaction is kept, unless the commit's answer was lost after
// the server applied it; either way the connection is closed and no row stays locked.
func (s *Store) Commit(ctx context.Context, token Token, acks []int64) (AckResult, error) {
	h := s.take(token)
	conn := h.conn
	if conn == nil {
		return AckResult{}, fmt.Errorf("commit %d rows in %s: %w", len(acks), s.table, ErrNotHeld)
	}
	b := &pgx.Batch{}
	if len(acks) > 0 {
		b.Queue(s.sql.heldAck, acks, token, h.owner)
	}
	b.Queue("COMMIT")
	br := conn.SendBatch(ctx, b)
	res, err := readAck(br, len(acks))
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil && conn.Conn().PgConn().TxStatus() != 'I' {
		err = errors.New("the transaction did not commit") // COMMIT of an aborted transaction rolls back
	}
	if err != nil {
		_ = conn.Conn().Close(context.WithoutCancel(ctx))
		conn.Release()
		return AckResult{}, fmt.Errorf("commit %d rows in %s: %w", len(acks), s.table, err)
	}
	conn.Release()
	return res, nil
}

func readAck(br pgx.BatchResults, n int) (AckResult, error) {
	if n == 0 {
		return AckResult{}, nil
	}
	rows, err := br.Query()
	if err != nil {
		return AckResult{}, err
	}
	res := AckResult{Lags: make([]time.Duration, 0, n)}
	var us pgtype.Int8 // NULL for a row dated ±infinity: no lag to report
	for rows.Next() {
		if err := rows.Scan(&us); err != nil {
			rows.Close()
			return AckResult{}, err
		}
		res.Changed++
		if us.Valid {
			res.Lags = append(res.Lags, time.Duration(us.Int64)*time.Microsecond)
		}
	}
	if err := rows.Err(); err != nil {
		return AckResult{}, err
	}
	res.Refused = n - res.Changed
	return res, nil
}

// Rollback ends a held claim's transaction and keeps nothing of it: its rows are
// pending and unlocked as they were before the claim. It never fails: a rollback that
// cannot be sent closes the connection, which rolls back too.
func (s *Store) Rollback(ctx context.Context, token Token) {
	conn := s.take(token).conn
	if conn == nil {
		return
	}
	if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
		_ = conn.Conn().Close(context.WithoutCancel(ctx))
	}
	conn.Release()
}

// on (querier: partitions.go) is where token's write-backs run and which of two statements they run: the
// lease-checked one on the pool, or, for a held claim, the locked-row one on its
// transaction's connection.
func (s *Store) on(token Token, lease, locked string) (querier, string) {
	if conn := s.heldConn(token); conn != nil {
		return conn, locked
	}
	return s.pool, lease
}
