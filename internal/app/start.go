package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/config"
)

// startConns are the two connections to database_url that run opens, both at once, to
// learn that the database answers; the dispatcher then asks the pooler probe's
// questions on them and checks the schema on the second, instead of opening a
// connection for each of those in a row. Each connection's handshake (TLS included) is
// most of what it costs, so the way to ready waits for one handshake where it waited
// for three (docs/benchmarks.md, exec → ready). They carry database_url's own settings
// only: until the probe has answered, the server may be a pooler that refuses others.
type startConns struct{ first, second *pgx.Conn }

// openStart opens both; when either fails, it closes the other and returns that error.
func openStart(ctx context.Context, cfg *config.Config) (*startConns, error) {
	c, err := pgx.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("database_url: %w", config.RedactParseError(err))
	}
	ctx, cancel := context.WithTimeout(ctx, connectAttemptTimeout)
	defer cancel()
	type opened struct {
		conn *pgx.Conn
		err  error
	}
	second := make(chan opened, 1)
	go func() {
		conn, err := pgx.ConnectConfig(ctx, c)
		second <- opened{conn, err}
	}()
	first, err := pgx.ConnectConfig(ctx, c)
	o := <-second
	s := &startConns{first: first, second: o.conn}
	if err = errors.Join(err, o.err); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// close closes whichever of the two is still open, in the background.
func (s *startConns) close() {
	if s == nil {
		return
	}
	go closeConn(s.first)
	go closeConn(s.second)
	s.first, s.second = nil, nil
}

func closeConn(conn *pgx.Conn) {
	if conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}
