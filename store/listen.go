package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/table"
)

// ListenConfig says how to open a listening connection: a connection of its own (LISTEN
// holds a session, so it cannot come from a pool) and the outbox table whose channel it
// listens on. Every insert into the table notifies that channel with the row's stream.
type ListenConfig struct {
	Conn  *pgx.ConnConfig
	Table table.Name
}

// Notifications is one connection that LISTENs on an outbox table's channel. It is not
// safe for concurrent use: one goroutine waits, pings and finally closes it.
type Notifications struct {
	conn    *pgx.Conn
	channel string
}

// Listen connects with cfg.Conn and LISTENs on cfg.Table's channel. The caller closes
// what it returns.
func Listen(ctx context.Context, cfg ListenConfig) (*Notifications, error) {
	if cfg.Conn == nil {
		return nil, fmt.Errorf("listen on %s: no connection configuration", cfg.Table.Channel())
	}
	conn, err := pgx.ConnectConfig(ctx, cfg.Conn)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return ListenOn(ctx, conn, cfg.Table)
}

// ListenOn LISTENs on t's channel on conn, an open connection of its own (outside any
// pool and transaction), which it then owns: on failure it closes conn.
func ListenOn(ctx context.Context, conn *pgx.Conn, t table.Name) (*Notifications, error) {
	if _, err := conn.Exec(ctx, "LISTEN "+t.ListenChannel()); err != nil {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
		return nil, fmt.Errorf("listen on %s: %w", t.Channel(), err)
	}
	return &Notifications{conn: conn, channel: t.Channel()}, nil
}

// Channel is the channel listened on.
func (n *Notifications) Channel() string { return n.channel }

// Wait blocks until a notification arrives or ctx ends, and returns its payload: the
// stream of the row inserted.
func (n *Notifications) Wait(ctx context.Context) (string, error) {
	note, err := n.conn.WaitForNotification(ctx)
	if err != nil {
		return "", err
	}
	return note.Payload, nil
}

// Ping checks that the connection still answers.
func (n *Notifications) Ping(ctx context.Context) error { return n.conn.Ping(ctx) }

// Close closes the connection. Call it only once Wait has returned: closing under a
// waiting goroutine would race.
func (n *Notifications) Close(ctx context.Context) error { return n.conn.Close(ctx) }
