// Package store holds every SQL statement outboxd runs against the outbox table.
//
// Invariants:
//   - Claims are disjoint: a claim locks the rows it takes with FOR UPDATE SKIP LOCKED,
//     so concurrent claimers, in this process or in other replicas, never take the same row.
//   - Every write-back presents the lease token it claimed with; a write whose token no
//     longer matches (the lease expired and the row was reclaimed or claimed again)
//     changes nothing and is counted as refused.
//   - Time is the database's clock: lease expiry, availability and publication times are
//     computed with now() in SQL; only durations come from Go.
//
// Package store is internal to outboxd, with no compatibility promise: its exported
// names serve outboxd's own packages and may change in any release.
package store

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/table"
)

// Token identifies one claim. Every row taken by a claim carries its token until the
// row's outcome is written back.
type Token [16]byte

// NewToken returns a random token.
func NewToken() Token {
	var t Token
	if _, err := rand.Read(t[:]); err != nil {
		panic(fmt.Sprintf("store: read random lease token: %v", err)) // crypto/rand does not fail on supported platforms
	}
	return t
}

func (t Token) String() string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", t[0:4], t[4:6], t[6:8], t[8:10], t[10:16])
}

// Message is one claimed row, as the dispatcher needs it to publish.
type Message struct {
	ID        int64
	Stream    string
	Topic     string
	Key       []byte // nil when the row has no key
	Headers   map[string]string
	Payload   []byte
	MessageID string // caller-supplied id, "" when none
	// DedupID is the row's random de-duplication id (column dedup_id), drawn by the
	// database at INSERT or, for a row older than migration 0004, at its first claim;
	// the same on every claim of the row.
	DedupID       string
	Attempts      int // publish attempts spent before this claim
	CreatedAt     time.Time
	DeferredSince time.Time // zero unless delivery has been deferred (broker unreachable)
}

// Claim is a batch of rows leased to one owner under one token until LeaseUntil
// (database clock).
type Claim struct {
	Token      Token
	LeaseUntil time.Time
	Messages   []Message
	// Expired lists the rows the expiry sweep right before the claim marked expired
	// (expiry.go); they are reported even when the claim itself failed.
	Expired []Expired
	// Last is the claim order's position of the last row claimed, where the next claim
	// of a backlog may start (Position); zero for an empty claim.
	Last Position
}

// IDs lists the ids of the claimed messages in claim order.
func (c Claim) IDs() []int64 {
	ids := make([]int64, len(c.Messages))
	for i, m := range c.Messages {
		ids[i] = m.ID
	}
	return ids
}

// WriteResult counts the rows a write-back changed and the rows it refused because they
// no longer carried the presented lease token.
type WriteResult struct {
	Changed int
	Refused int
}

// Retry asks for a row to be tried again after Delay, spending one attempt.
type Retry struct {
	ID    int64
	Delay time.Duration
	Err   string
}

// Deferral hands a row back after Delay without spending an attempt: the broker was
// unreachable, so it never saw the message.
type Deferral struct {
	ID    int64
	Delay time.Duration
	Err   string
}

// Failure ends a row's delivery for good. Attempted says whether a publish attempt was
// made (a permanent refusal) or not (deferred for longer than allowed).
type Failure struct {
	ID        int64
	Err       string
	Attempted bool
}

// Store runs outboxd's statements against one outbox table.
type Store struct {
	pool *pgxpool.Pool
	// sessions holds the session advisory locks: pool unless WithSessions says otherwise.
	sessions *pgxpool.Pool
	table    table.Name
	sql      statements
	ttl      map[string]time.Duration // per stream; absent: none (WithTTL)
	// flowSlots bounds the flow locks held at once when they share the store's own pool
	// (no WithSessions): each holds a connection for as long as its stream flows, and a
	// pipeline holding one must still find connections to claim and write back.
	flowSlots chan struct{}

	heldMu sync.Mutex
	held   map[Token]heldClaim // open transactions of held claims (held.go)

	// countLimit and samplePages are ExactCountLimit and backlogSamplePages, smaller
	// in tests (backlog.go).
	countLimit, samplePages int64
}

// New returns a Store for the outbox table n, reached through pool.
func New(pool *pgxpool.Pool, n table.Name, opts ...Option) (*Store, error) {
	if pool == nil {
		return nil, errors.New("store: nil pool")
	}
	if err := n.Validate(); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	s := &Store{pool: pool, sessions: pool, table: n, sql: newStatements(n),
		countLimit: ExactCountLimit, samplePages: backlogSamplePages}
	for _, o := range opts {
		o(s)
	}
	if s.sessions == s.pool {
		s.flowSlots = make(chan struct{}, max(1, pool.Config().MaxConns/2))
	}
	return s, nil
}

// Option adjusts a Store.
type Option func(*Store)

// WithAckByDelete makes Ack delete delivered rows instead of marking them delivered:
// for deployments that keep no delivered rows (retention 0). It moves about half again
// as many messages per second as the UPDATE, because nothing is left for retention to
// delete later (docs/benchmarks.md).
//
// A deleted row keeps no trace of who acknowledged it, so AckAgain cannot tell this
// replica's earlier try from another replica's acknowledgement: it acknowledges as Ack.
func WithAckByDelete() Option {
	return func(s *Store) {
		s.sql.ack, s.sql.ackAgain = render(ackDeleteSQL, s.table), ""
		s.sql.heldAck = render(heldAcknowledgement(ackDeleteSQL), s.table)
	}
}

// Table is the outbox table this store works on.
func (s *Store) Table() table.Name { return s.table }

// Claim leases up to limit available pending rows of stream after from to owner for
// ttl, oldest availability first, after expiring the stream's rows past their expiry (expiry.go).
// An empty claim is not an error. A claim that fails once its
// statement was sent (its context ended, the connection broke) returns the token it
// leased under with the error: the database may have applied it, leaving rows leased
// under that token until their lease expires.
func (s *Store) Claim(ctx context.Context, stream string, limit int, owner string, ttl time.Duration, from Position) (Claim, error) {
	if limit <= 0 {
		return Claim{}, fmt.Errorf("claim %s: limit must be positive, got %d", stream, limit)
	}
	if ttl < time.Millisecond {
		return Claim{}, fmt.Errorf("claim %s: lease TTL must be at least 1ms, got %s", stream, ttl)
	}
	c := Claim{Token: NewToken()}
	expired, err := s.Expire(ctx, stream, expireBatch)
	if err != nil {
		return Claim{}, fmt.Errorf("claim %s: %w", stream, err)
	}
	c.Expired = expired
	at, id := from.args()
	rows, err := s.pool.Query(ctx, s.sql.claim, stream, limit, c.Token, owner, ttl.Milliseconds(), s.ttlMillis(stream), at, id)
	if err != nil {
		return Claim{Token: c.Token, Expired: expired}, fmt.Errorf("claim %s: %w", stream, err)
	}
	if err := readClaimed(rows, stream, limit, &c); err != nil {
		return Claim{Token: c.Token, Expired: expired}, fmt.Errorf("claim %s: %w", stream, err)
	}
	return c, nil
}

// readClaimed reads the rows of a claim statement (claimSQL, heldClaimSQL: the same
// columns) into c's messages, and c's LeaseUntil and Last from them. It closes rows.
func readClaimed(rows pgx.Rows, stream string, limit int, c *Claim) error {
	defer rows.Close()
	c.Messages = make([]Message, 0, limit)
	// Each row is scanned into its place in c.Messages through one set of destinations
	// per claim: a message and a scan list per row would be garbage for the collector
	// at every message drained (docs/benchmarks.md).
	var deferred *time.Time // pgx sets it to nil for NULL, else scans into what it points at
	var created pgtype.Timestamptz
	var at Position
	var headers headerScan
	dest := make([]any, 12)
	dest[8], dest[9], dest[10], dest[11] = &created, &deferred, &c.LeaseUntil, &at.at
	for rows.Next() {
		c.Messages = append(c.Messages, Message{})
		m := &c.Messages[len(c.Messages)-1]
		headers.m = &m.Headers
		dest[0], dest[1], dest[2], dest[3] = &m.ID, &m.Topic, &m.Key, headers
		dest[4], dest[5], dest[6], dest[7] = &m.Payload, &m.MessageID, &m.DedupID, &m.Attempts
		if err := rows.Scan(dest...); err != nil {
			c.Messages = c.Messages[:len(c.Messages)-1]
			return fmt.Errorf("read row: %w", err)
		}
		if at.id = m.ID; c.Last.before(at) {
			c.Last = at
		}
		m.Stream, m.CreatedAt = stream, finiteTime(created)
		if deferred != nil {
			m.DeferredSince = *deferred
		}
	}
	return rows.Err()
}

// Ack marks rows delivered: the broker confirmed them.
func (s *Store) Ack(ctx context.Context, token Token, ids []int64) (AckResult, error) {
	if len(ids) == 0 {
		return AckResult{}, nil
	}
	s.heldMu.Lock()
	h := s.held[token]
	s.heldMu.Unlock()
	var rows pgx.Rows
	var err error
	if h.conn != nil {
		rows, err = h.conn.Query(ctx, s.sql.heldAck, ids, token, h.owner)
	} else {
		rows, err = s.pool.Query(ctx, s.sql.ack, ids, token)
	}
	if err != nil {
		return AckResult{}, fmt.Errorf("ack %d rows in %s: %w", len(ids), s.table, err)
	}
	res := AckResult{Lags: make([]time.Duration, 0, len(ids))}
	var us pgtype.Int8 // NULL for a row dated ±infinity: no lag to report
	for rows.Next() {
		if err := rows.Scan(&us); err != nil {
			rows.Close()
			return AckResult{}, fmt.Errorf("ack %d rows in %s: %w", len(ids), s.table, err)
		}
		res.Changed++
		if us.Valid {
			res.Lags = append(res.Lags, time.Duration(us.Int64)*time.Microsecond)
		}
	}
	if err := rows.Err(); err != nil {
		return AckResult{}, fmt.Errorf("ack %d rows in %s: %w", len(ids), s.table, err)
	}
	res.Refused = len(ids) - res.Changed
	return res, nil
}

// AckResult reports an acknowledgement: what it changed and refused, and for each
// acknowledged row its delivery lag, from the producer's INSERT to the acknowledgement,
// both on the database clock (none for a row whose created_at is ±infinity).
type AckResult struct {
	WriteResult
	Lags []time.Duration
	// Already counts the rows AckAgain found delivered by an earlier try of the same
	// acknowledgement; they are neither changed nor refused.
	Already int
}

// AckAgain sends an acknowledgement again after a try whose answer never came (a
// timeout, a connection lost while waiting), which the database may have applied. A
// row that try delivered is no longer leased under token, so Ack would refuse it as if
// the lease had moved on; AckAgain counts it in Already instead when the row is
// delivered, was claimed last by owner, the replica presenting the token, and was
// published by the time leaseUntil (the claim's LeaseUntil) passed. Rows another
// replica took over stay refused, and so do rows this replica itself claimed again
// after the lease ran out and delivered: they were not this claim's to deliver.
func (s *Store) AckAgain(ctx context.Context, token Token, owner string, leaseUntil time.Time, ids []int64) (AckResult, error) {
	if s.sql.ackAgain == "" {
		return s.Ack(ctx, token, ids)
	}
	if len(ids) == 0 {
		return AckResult{}, nil
	}
	rows, err := s.pool.Query(ctx, s.sql.ackAgain, ids, token, owner, leaseUntil)
	if err != nil {
		return AckResult{}, fmt.Errorf("ack %d rows again in %s: %w", len(ids), s.table, err)
	}
	res := AckResult{Lags: make([]time.Duration, 0, len(ids))}
	var us pgtype.Int8
	var already bool
	for rows.Next() {
		if err := rows.Scan(&us, &already); err != nil {
			rows.Close()
			return AckResult{}, fmt.Errorf("ack %d rows again in %s: %w", len(ids), s.table, err)
		}
		switch {
		case already:
			res.Already++
		case us.Valid:
			res.Changed++
			res.Lags = append(res.Lags, time.Duration(us.Int64)*time.Microsecond)
		default:
			res.Changed++
		}
	}
	if err := rows.Err(); err != nil {
		return AckResult{}, fmt.Errorf("ack %d rows again in %s: %w", len(ids), s.table, err)
	}
	res.Refused = len(ids) - res.Changed - res.Already
	return res, nil
}

// Release hands rows back untouched, claimable again at once: used at shutdown for rows
// that were not published.
//
// A held claim's rows need no write: they are pending already, and the end of the
// claim's transaction unlocks them.
func (s *Store) Release(ctx context.Context, token Token, ids []int64) (WriteResult, error) {
	if s.heldConn(token) != nil {
		return WriteResult{Changed: len(ids)}, nil
	}
	return s.write(ctx, "release", len(ids), s.sql.release, ids, token)
}

// Retry returns rows to pending after their backoff, spending one attempt each.
func (s *Store) Retry(ctx context.Context, token Token, retries []Retry) (WriteResult, error) {
	ids, delays, errs := make([]int64, len(retries)), make([]int64, len(retries)), make([]string, len(retries))
	for i, r := range retries {
		ids[i], delays[i], errs[i] = r.ID, r.Delay.Milliseconds(), errorText(r.Err)
	}
	q, sql := s.on(token, s.sql.retry, s.sql.heldRetry)
	return writeOn(ctx, q, s.table, "retry", len(ids), sql, ids, token, delays, errs)
}

// FailedRow is a row a write-back failed for good, as it now stands in the table.
type FailedRow struct {
	ID        int64
	Attempts  int
	LastError string
}

// FailResult reports a Fail write-back: what it changed and refused, and each failed
// row as stored, so callers report exactly what the table says.
type FailResult struct {
	WriteResult
	Rows []FailedRow
}

// DeferResult reports a deferral: rows handed back, rows refused because their lease
// moved on, and the rows failed instead because they had been deferred for longer than
// the allowed maximum.
type DeferResult struct {
	WriteResult
	Expired []FailedRow
}

// Defer returns rows to pending after a pause without spending an attempt, recording
// when the deferral began (kept across successive deferrals). With maxDefer > 0, a row
// whose deferral began more than maxDefer ago (database clock) is failed instead, its
// error text saying so; it counts as changed and is listed in Expired.
func (s *Store) Defer(ctx context.Context, token Token, deferrals []Deferral, maxDefer time.Duration) (DeferResult, error) {
	if len(deferrals) == 0 {
		return DeferResult{}, nil
	}
	ids, delays, errs := make([]int64, len(deferrals)), make([]int64, len(deferrals)), make([]string, len(deferrals))
	for i, d := range deferrals {
		ids[i], delays[i], errs[i] = d.ID, d.Delay.Milliseconds(), errorText(d.Err)
	}
	q, sql := s.on(token, s.sql.deferral, s.sql.heldDefer)
	rows, err := q.Query(ctx, sql, ids, token, delays, errs, maxDefer.Milliseconds())
	if err != nil {
		return DeferResult{}, fmt.Errorf("defer %d rows in %s: %w", len(ids), s.table, err)
	}
	var res DeferResult
	for rows.Next() {
		var r FailedRow
		var failed bool
		if err := rows.Scan(&r.ID, &failed, &r.Attempts, &r.LastError); err != nil {
			rows.Close()
			return DeferResult{}, fmt.Errorf("defer %d rows in %s: %w", len(ids), s.table, err)
		}
		res.Changed++
		if failed {
			res.Expired = append(res.Expired, r)
		}
	}
	if err := rows.Err(); err != nil {
		return DeferResult{}, fmt.Errorf("defer %d rows in %s: %w", len(ids), s.table, err)
	}
	res.Refused = len(ids) - res.Changed
	return res, nil
}

// Fail marks rows failed for good with their error text, and returns each row it failed
// as stored.
func (s *Store) Fail(ctx context.Context, token Token, failures []Failure) (FailResult, error) {
	if len(failures) == 0 {
		return FailResult{}, nil
	}
	ids, spent, errs := make([]int64, len(failures)), make([]int32, len(failures)), make([]string, len(failures))
	for i, f := range failures {
		ids[i], errs[i] = f.ID, errorText(f.Err)
		if f.Attempted {
			spent[i] = 1
		}
	}
	q, sql := s.on(token, s.sql.fail, s.sql.heldFail)
	rows, err := q.Query(ctx, sql, ids, token, spent, errs)
	if err != nil {
		return FailResult{}, fmt.Errorf("fail %d rows in %s: %w", len(ids), s.table, err)
	}
	var res FailResult
	for rows.Next() {
		var r FailedRow
		if err := rows.Scan(&r.ID, &r.Attempts, &r.LastError); err != nil {
			rows.Close()
			return FailResult{}, fmt.Errorf("fail %d rows in %s: %w", len(ids), s.table, err)
		}
		res.Rows = append(res.Rows, r)
	}
	if err := rows.Err(); err != nil {
		return FailResult{}, fmt.Errorf("fail %d rows in %s: %w", len(ids), s.table, err)
	}
	res.Changed, res.Refused = len(res.Rows), len(ids)-len(res.Rows)
	return res, nil
}

// write runs one lease-checked write-back and counts what it changed and refused.
func (s *Store) write(ctx context.Context, op string, n int, sql string, args ...any) (WriteResult, error) {
	return writeOn(ctx, s.pool, s.table, op, n, sql, args...)
}

func writeOn(ctx context.Context, q querier, t table.Name, op string, n int, sql string, args ...any) (WriteResult, error) {
	if n == 0 {
		return WriteResult{}, nil
	}
	tag, err := q.Exec(ctx, sql, args...)
	if err != nil {
		return WriteResult{}, fmt.Errorf("%s %d rows in %s: %w", op, n, t, err)
	}
	changed := int(tag.RowsAffected())
	return WriteResult{Changed: changed, Refused: n - changed}, nil
}

// finiteTime is t as a time.Time, or the zero time for NULL and ±infinity: a producer
// may date a row so (created_at and available_at are plain columns), and one such row
// must not make every read of its batch fail.
func finiteTime(t pgtype.Timestamptz) time.Time {
	if !t.Valid || t.InfinityModifier != pgtype.Finite {
		return time.Time{}
	}
	return t.Time
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("ping database: %w", err)
	}
	return nil
}

func render(sql string, n table.Name) string {
	return strings.ReplaceAll(sql, "{{table}}", n.Qualified())
}

// MaxErrorLen bounds the error text stored in last_error, in bytes.
const MaxErrorLen = 2048

// errorText makes a broker's error message storable: PostgreSQL text cannot hold NUL or
// invalid UTF-8, and one such message must not make the write-back of its whole batch
// fail. Long messages are cut at MaxErrorLen on a rune boundary.
func errorText(s string) string {
	if s == "" {
		s = "unknown error"
	}
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "\uFFFD")
	if len(s) > MaxErrorLen {
		cut := MaxErrorLen
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}

// WithSessions takes the session advisory locks (TryLock, TryFlow) on connections of
// sessions instead of the store's pool: a pool that reaches PostgreSQL directly, for a
// store whose own pool goes through a transaction pooler, where a session lock would be
// taken on whichever server session served that one statement and held there for no one.
func WithSessions(sessions *pgxpool.Pool) Option {
	return func(s *Store) { s.sessions = sessions }
}
