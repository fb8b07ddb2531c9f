package app

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/table"
)

// How the general pool's connections are set, known once the pooler probe has
// answered (or at once when database.pooler says).
const (
	modeUnknown int32 = iota // database_url's own settings: the server may be a pooler that refuses others
	modeDirect               // PostgreSQL itself: JIT off, the server notices dead peers (serverSettings)
	modeBehind               // a transaction pooler: exec mode, no settings asked for
)

// startConns is the general pool as run opens it, with the first two connections it
// opened, both at once, to learn that the database answers. The dispatcher asks the
// pooler probe's questions on the two and checks the schema on the first (where the
// first /readyz asks again, on a session that has read that table's catalog already);
// then the second becomes the listener's, when the listener would open one like it
// (listenOn), and the rest go back into the pool, which the dispatcher keeps. Each
// connection's handshake (TLS included, and the server's fork of a process for it) is
// most of what it costs: the way to ready opens two at once, the fewest the probe can
// answer with, and /readyz finds the pool's connection open instead of waiting for one
// more (docs/benchmarks.md, exec → ready).
//
// Until the probe has answered, the two carry database_url's own settings only; once
// it has, the pool's next connections are set by mode, and settle gives the two the
// same settings (or closes them behind a pooler: a connection's exec mode is fixed at
// its start).
type startConns struct {
	pool          *pgxpool.Pool
	first, second *pgxpool.Conn
	mode          *atomic.Int32
	// direct are the settings a connection to PostgreSQL itself asks for that
	// database_url does not set already.
	direct  map[string]string
	unset   bool // the two lack direct's settings (settleConn)
	adopted bool
}

// openStart opens the general pool and its first two connections, both at once; when
// either fails, it closes the pool and returns that error.
func openStart(ctx context.Context, cfg *config.Config) (*startConns, error) {
	pc, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("database_url: %w", config.RedactParseError(err))
	}
	// The two start with database_url's own settings and deadPeers' dialer (our side of
	// the socket notices a dead peer whatever the server is); direct is what a direct
	// session asks for beyond them, which settle sets on the two.
	direct := pc.ConnConfig.Copy()
	sessionSettings(direct, cfg.Database, false)
	pc.ConnConfig.DialFunc = direct.DialFunc
	s := &startConns{mode: new(atomic.Int32), direct: map[string]string{}}
	for k, v := range direct.RuntimeParams {
		if _, set := pc.ConnConfig.RuntimeParams[k]; !set {
			s.direct[k] = v
		}
	}
	pc.MaxConns = max(pc.MaxConns, 4) // janitor, samplers, admin API
	switch cfg.Database.Pooler {
	case config.PoolerNone:
		s.mode.Store(modeDirect)
	case config.PoolerTransaction:
		s.mode.Store(modeBehind)
	}
	mode, db := s.mode, cfg.Database
	pc.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
		if m := mode.Load(); m != modeUnknown {
			sessionSettings(cc, db, m == modeBehind)
		}
		return nil
	}
	if s.pool, err = pgxpool.NewWithConfig(ctx, pc); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, connectAttemptTimeout)
	defer cancel()
	type acquired struct {
		conn *pgxpool.Conn
		err  error
	}
	second := make(chan acquired, 1)
	go func() {
		conn, err := s.pool.Acquire(ctx)
		second <- acquired{conn, err}
	}()
	first, err := s.pool.Acquire(ctx)
	o := <-second
	s.first, s.second = first, o.conn
	if err = errors.Join(err, o.err); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// decide records what the probe found (behind says a transaction pooler): the pool's
// next connections are set by it, and the two it holds are made to match, directly by
// settleConn, the settings the others ask for at their start; behind a pooler it closes
// the two, which would prepare statements on a server session the next transaction may
// not get. Only the first call counts: once it has run, as when database.pooler is not
// auto, the mode is known.
func (s *startConns) decide(behind bool) {
	if s.mode.Load() != modeUnknown {
		return // decided already, or set from the start (the two were set too)
	}
	if behind {
		s.mode.Store(modeBehind)
		for _, c := range []*pgxpool.Conn{s.first, s.second} {
			closeConn(c.Conn()) // a closed connection leaves the pool at release
		}
		return
	}
	s.mode.Store(modeDirect)
	s.unset = len(s.direct) > 0
}

// settleConn gives c, one of the two, the settings of a direct session that it lacks,
// in one round trip of SET statements (a new session plans no query for them, as it
// would for set_config); call it after decide.
func (s *startConns) settleConn(ctx context.Context, c *pgx.Conn) error {
	if !s.unset {
		return nil
	}
	var sql strings.Builder
	for _, k := range slices.Sorted(maps.Keys(s.direct)) {
		fmt.Fprintf(&sql, "SET %s TO %s;", pgx.Identifier{k}.Sanitize(), settingLiteral(s.direct[k]))
	}
	if _, err := c.Exec(ctx, sql.String(), pgx.QueryExecModeSimpleProtocol); err != nil {
		return fmt.Errorf("connect to database: set the session: %w", err)
	}
	return nil
}

// settingLiteral quotes v as a string literal that reads back as v whatever
// standard_conforming_strings is.
func settingLiteral(v string) string {
	v = strings.ReplaceAll(v, "'", "''")
	if strings.Contains(v, `\`) {
		return `E'` + strings.ReplaceAll(v, `\`, `\\`) + `'`
	}
	return `'` + v + `'`
}

// settle decides, then settles the connections of the two still held, at once.
func (s *startConns) settle(ctx context.Context, behind bool) error {
	s.decide(behind)
	var held []*pgxpool.Conn
	for _, c := range []*pgxpool.Conn{s.first, s.second} {
		if c != nil {
			held = append(held, c)
		}
	}
	errs := make(chan error, len(held))
	for _, c := range held {
		go func() { errs <- s.settleConn(ctx, c.Conn()) }()
	}
	var all []error
	for range held {
		all = append(all, <-errs)
	}
	return errors.Join(all...)
}

// adopt hands the pool to the dispatcher, which closes it from then on; the two
// connections go back into it at release.
func (s *startConns) adopt() *pgxpool.Pool {
	s.adopted = true
	return s.pool
}

// listened is what listenOn did with the second connection.
type listened struct {
	// early is the listening connection as ListenerConfig.Early takes it; nil when
	// LISTEN failed (the listener then opens its own, and Prime asks the first poll).
	early chan *store.Notifications
	err   error // the session could not be set: the start fails
}

// listenOn makes the second connection the listener's, so that readiness waits for two
// handshakes rather than three: it settles the connection and LISTENs on t's channel,
// beside the schema check on the first connection, and answers on the channel. The
// shared poll's first question is asked on it later, by the listener, after the LISTEN
// and before its first wait (ListenerConfig.FirstPoll), so that a row committed before
// the LISTEN is in the answer and one committed after it notifies, and readiness does
// not wait for the answer. Call it only for a direct session on the URL the listener
// would use (database_url, no database.listen_url), after decide.
func (s *startConns) listenOn(ctx context.Context, t table.Name) <-chan listened {
	conn := s.second.Hijack()
	s.second = nil
	out := make(chan listened, 1)
	go func() {
		if err := s.settleConn(ctx, conn); err != nil {
			closeConn(conn)
			out <- listened{err: err}
			return
		}
		n, err := store.ListenOn(ctx, conn, t)
		if err != nil {
			out <- listened{}
			return
		}
		l := listened{early: make(chan *store.Notifications, 1)}
		l.early <- n
		out <- l
	}()
	return out
}

// release puts the two connections back into the pool.
func (s *startConns) release() {
	if s == nil {
		return
	}
	for _, c := range []**pgxpool.Conn{&s.first, &s.second} {
		if *c != nil {
			(*c).Release()
			*c = nil
		}
	}
}

// close releases the two and closes the pool, unless the dispatcher adopted it.
func (s *startConns) close() {
	if s == nil {
		return
	}
	s.release()
	if !s.adopted && s.pool != nil {
		go s.pool.Close()
		s.pool = nil
	}
}

func closeConn(conn *pgx.Conn) {
	if conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

// startTry is the first attempt to open an outbox's start connections, begun as run
// begins: its handshakes, which wait mostly on the server, overlap the tracer, the
// metrics and the admin listener being set up instead of following them. One caller
// takes its outcome (waitForDatabase, as its first attempt); otherwise discard closes
// what it opened.
type startTry struct {
	done  chan struct{}
	conns *startConns
	err   error
	taken atomic.Bool
}

// tryStart begins openStart for cfg.
func tryStart(ctx context.Context, cfg *config.Config) *startTry {
	t := &startTry{done: make(chan struct{})}
	go func() {
		defer close(t.done)
		t.conns, t.err = openStart(ctx, cfg)
	}()
	return t
}

// take waits for the attempt and returns what it opened; tried is false when there is
// no attempt to take (t is nil or was taken or discarded), and the caller opens its own.
func (t *startTry) take(ctx context.Context) (conns *startConns, tried bool, err error) {
	if t == nil || !t.taken.CompareAndSwap(false, true) {
		return nil, false, nil
	}
	select {
	case <-t.done:
		return t.conns, true, t.err
	case <-ctx.Done():
		go func() { <-t.done; t.conns.close() }()
		return nil, true, ctx.Err()
	}
}

// discard closes what the attempt opens, unless it was taken.
func (t *startTry) discard() {
	if t == nil || !t.taken.CompareAndSwap(false, true) {
		return
	}
	go func() { <-t.done; t.conns.close() }()
}
