package app

import (
	"context"
	"errors"
	"fmt"
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
// (listen), and the rest go back into the pool, which the dispatcher keeps. Each
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

// settle sets the pool's next connections by what the probe found, and the two it
// holds to match: directly, the settings the others ask for at their start, in one
// statement each; behind a pooler it closes the two, which would prepare statements on
// a server session the next transaction may not get.
func (s *startConns) settle(ctx context.Context, behind bool) error {
	if s.mode.Load() != modeUnknown {
		return nil // set from the start: database.pooler is not auto
	}
	if behind {
		s.mode.Store(modeBehind)
		for _, c := range []*pgxpool.Conn{s.first, s.second} {
			closeConn(c.Conn()) // a closed connection leaves the pool at release
		}
		return nil
	}
	s.mode.Store(modeDirect)
	if len(s.direct) == 0 {
		return nil
	}
	sql, args := "SELECT", []any{pgx.QueryExecModeSimpleProtocol}
	for k, v := range s.direct {
		if len(args) > 1 {
			sql += ","
		}
		sql += fmt.Sprintf(" set_config($%d, $%d, false)", len(args), len(args)+1)
		args = append(args, k, v)
	}
	errs := make(chan error, 2)
	for _, c := range []*pgxpool.Conn{s.first, s.second} {
		go func() {
			_, err := c.Exec(ctx, sql, args...)
			errs <- err
		}()
	}
	if err := errors.Join(<-errs, <-errs); err != nil {
		return fmt.Errorf("connect to database: set the session: %w", err)
	}
	return nil
}

// adopt hands the pool to the dispatcher, which closes it from then on; the two
// connections go back into it at release.
func (s *startConns) adopt() *pgxpool.Pool {
	s.adopted = true
	return s.pool
}

// listen makes the second connection the listener's: it leaves the pool and LISTENs on
// t's channel, so that readiness waits for two handshakes rather than three. It returns
// the listening connection as ListenerConfig.Early takes it, or nil when LISTEN failed
// (the listener then opens its own). Call it only for a direct session on the URL the
// listener would use (database_url, no database.listen_url), once settle has run.
func (s *startConns) listen(ctx context.Context, t table.Name) chan *store.Notifications {
	conn := s.second.Hijack()
	s.second = nil
	n, err := store.ListenOn(ctx, conn, t)
	if err != nil {
		return nil
	}
	early := make(chan *store.Notifications, 1)
	early <- n
	return early
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
