package app

import (
	"context"
	"fmt"
	"maps"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/store"
)

// behindPooler says whether database_url goes through a transaction pooler: what
// database.pooler says, or with auto what store.BehindPooler finds. Behind one,
// database.listen_url is required (sessionURLProblem).
func behindPooler(ctx context.Context, cfg *config.Config) (bool, error) {
	if cfg.Database.Pooler != config.PoolerAuto {
		return cfg.Database.Pooler == config.PoolerTransaction, nil
	}
	return probe(ctx, "database_url", cfg.DatabaseURL)
}

// sessionURLProblem refuses a deployment behind a transaction pooler without a direct
// database.listen_url, or (when probing) with one that goes through a pooler too.
func sessionURLProblem(ctx context.Context, cfg *config.Config, behind bool) error {
	if !behind {
		return nil
	}
	if cfg.Database.ListenURL == "" {
		return fmt.Errorf("database_url %s goes through a transaction pooler (two of its connections were served by one server process): "+
			"LISTEN and the janitor's and flow locks need a session of their own, which such a pooler does not keep; "+
			"set database.listen_url to a URL that reaches the same PostgreSQL directly, bypassing the pooler "+
			"(docs/operations.md, Behind PgBouncer)", config.RedactDSN(cfg.DatabaseURL))
	}
	if cfg.Database.Pooler != config.PoolerAuto {
		return nil
	}
	pooled, err := probe(ctx, "database.listen_url", cfg.Database.ListenURL)
	if err != nil {
		return err
	}
	if pooled {
		return fmt.Errorf("database.listen_url %s goes through a transaction pooler too: point it at PostgreSQL itself, bypassing the pooler",
			config.RedactDSN(cfg.Database.ListenURL))
	}
	return nil
}

// probe runs store.BehindPooler on the connection string dsn, named key in errors.
func probe(ctx context.Context, key, dsn string) (bool, error) {
	c, err := pgx.ParseConfig(dsn)
	if err != nil {
		return false, fmt.Errorf("%s: %w", key, config.RedactParseError(err))
	}
	behind, err := store.BehindPooler(ctx, c)
	if err != nil {
		return false, fmt.Errorf("connect to database: %s: %w", key, err)
	}
	return behind, nil
}

// serverSettings readies a pool configuration of database_url: behind a transaction
// pooler, statements run in exec mode (no named prepared statement, which would live
// on one server session and be missing on the next) and the connection asks the server
// for no settings, which a pooler refuses at startup as it cannot keep them per client
// (PgBouncer: "unsupported startup parameter"); our side of each socket still notices a
// dead peer. Directly, settings (each kept where database_url makes its own) turn JIT
// off and make the server notice a dead peer too (deadPeers).
func serverSettings(c *pgxpool.Config, d config.Database, behind bool) {
	sessionSettings(c.ConnConfig, d, behind)
}

// sessionSettings is serverSettings for one connection's configuration (the general
// pool applies it to each connection it opens once the pooler probe has answered).
func sessionSettings(c *pgx.ConnConfig, d config.Database, behind bool) {
	given := maps.Clone(c.RuntimeParams)
	// Every statement here is short and planned once; JIT compilation only adds latency.
	c.RuntimeParams["jit"] = "off"
	deadPeers(&c.Config, d)
	if behind {
		c.DefaultQueryExecMode = pgx.QueryExecModeExec
		c.RuntimeParams = given
	}
}

// sessionPool opens the pool of the session advisory locks on database.listen_url:
// the janitor's lock and a flow lock per stream with flow control.
func sessionPool(ctx context.Context, cfg *config.Config) (*pgxpool.Pool, error) {
	c, err := pgxpool.ParseConfig(cfg.Database.ListenURL)
	if err != nil {
		return nil, fmt.Errorf("database.listen_url: %w", config.RedactParseError(err))
	}
	serverSettings(c, cfg.Database, false)
	conns := int32(2)
	for _, s := range cfg.Streams {
		if s.Flow {
			conns++
		}
	}
	c.MaxConns = conns
	pool, err := pgxpool.NewWithConfig(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("connect to database: database.listen_url: %w", err)
	}
	return pool, nil
}

// sessionKey names the setting SessionURL came from.
func sessionKey(cfg *config.Config) string {
	if cfg.Database.ListenURL != "" {
		return "database.listen_url"
	}
	return "database_url"
}

// poolerCheck is config check --connect's report on the pooler: what database_url goes
// through, and whether database.listen_url answers and reaches PostgreSQL directly.
func poolerCheck(ctx context.Context, cfg *config.Config, oks, problems []string) ([]string, []string) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	behind, err := behindPooler(ctx, cfg)
	if err == nil {
		err = sessionURLProblem(ctx, cfg, behind)
	}
	how := "found by probing"
	if cfg.Database.Pooler != config.PoolerAuto {
		how = "database.pooler: " + cfg.Database.Pooler
	}
	switch {
	case err != nil:
		return oks, append(problems, fmt.Sprintf("database: %v", err))
	case behind:
		oks = append(oks, "database_url: through a transaction pooler ("+how+"): statements in exec mode, LISTEN and locks on database.listen_url")
	case cfg.Database.Pooler == config.PoolerAuto:
		oks = append(oks, "database_url: no transaction pooler found by probing")
	default:
		oks = append(oks, "database_url: no transaction pooler ("+how+")")
	}
	if cfg.Database.ListenURL == "" {
		return oks, problems
	}
	c, err := pgx.ParseConfig(cfg.Database.ListenURL)
	if err == nil {
		var conn *pgx.Conn
		if conn, err = pgx.ConnectConfig(ctx, c); err == nil {
			err = conn.Ping(ctx)
			_ = conn.Close(context.WithoutCancel(ctx))
		}
	}
	if err != nil {
		return oks, append(problems, fmt.Sprintf("database.listen_url %s: %v: check it and that PostgreSQL accepts connections",
			config.RedactDSN(cfg.Database.ListenURL), config.RedactParseError(err)))
	}
	return append(oks, "database.listen_url "+config.RedactDSN(cfg.Database.ListenURL)+": connected"), problems
}
