package app

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/dispatch"
	"github.com/outboxd/outboxd/store"
)

// listenConfig is how the listener connects. LISTEN keeps a session: behind a
// transaction pooler it goes to database.listen_url.
func listenConfig(cfg *config.Config) (store.ListenConfig, error) {
	c, err := pgx.ParseConfig(cfg.SessionURL())
	if err != nil {
		return store.ListenConfig{}, fmt.Errorf("%s: %w", sessionKey(cfg), config.RedactParseError(err))
	}
	deadPeers(&c.Config, cfg.Database)
	return store.ListenConfig{Conn: c, Table: cfg.Table()}, nil
}

// listensApart reports whether the listener has a connection string of its own
// (database.listen_url): its connection then begins to open beside the start's two
// (listenEarly); otherwise, unless behind a pooler, it takes the second of those.
func listensApart(cfg *config.Config) bool { return cfg.Database.ListenURL != "" }

// listenEarly begins to open the listening connection to database.listen_url, so that
// readiness does not wait for one more connection after the rest (the pooler probe and
// the schema check); the listener takes it from the channel, or, if opening it failed,
// connects itself and says why. Whoever does not hand the channel to a listener closes
// what arrives (closeEarly).
func listenEarly(ctx context.Context, listen store.ListenConfig) chan *store.Notifications {
	early := make(chan *store.Notifications, 1)
	go func() {
		lctx, cancel := context.WithTimeout(ctx, dispatch.ListenConnectTimeout)
		defer cancel()
		conn, err := store.Listen(lctx, listen)
		if err != nil {
			conn = nil
		}
		early <- conn
	}()
	return early
}

// closeEarly closes the listening connection opened ahead for a dispatcher that was
// not built after all.
func closeEarly(ctx context.Context, early <-chan *store.Notifications) {
	if conn := <-early; conn != nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = conn.Close(ctx)
	}
}
