package migrations

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/outboxd/outboxd/internal/pgdsn"
	"github.com/outboxd/outboxd/table"
)

// CLIOptions are the query options of the migrate CLI's pgx5:// database URL that make it
// keep the version in n's version table, where outboxd reads it. Without them the CLI
// records the version in schema_migrations on the search path, which outboxd never reads.
// The CLI creates the version table but not its schema: n's schema must exist first.
func CLIOptions(n table.Name) string {
	quoted := n.QualifiedMigrationsTable()
	return "x-migrations-table=" + url.QueryEscape(quoted) + "&x-migrations-table-quoted=1"
}

// ErrUnrecorded marks a table whose migrations were applied without being recorded where
// outboxd reads them.
var ErrUnrecorded = errors.New("schema version recorded elsewhere")

// Unrecorded explains a schema migrated by the migrate CLI with its default version table:
// it returns an error wrapping ErrUnrecorded, naming the command that records the version
// where outboxd reads it, when n exists, n's version table records nothing, and
// schema_migrations on the search path records a version. Otherwise it returns nil.
//
// outboxd does not adopt that version by itself: schema_migrations is the CLI's default for
// every project, so in a database shared with an application that uses golang-migrate it
// may well hold that application's version, and reading it as ours could skip migrations.
func Unrecorded(ctx context.Context, dsn string, n table.Name) error {
	if err := n.Validate(); err != nil {
		return err
	}
	connConfig, err := pgx.ParseConfig(dsn)
	if err != nil {
		return fmt.Errorf("parse database URL: %w", pgdsn.RedactParseError(err))
	}
	db := stdlib.OpenDB(*connConfig)
	defer db.Close()
	return unrecorded(ctx, db, n)
}

func unrecorded(ctx context.Context, db *sql.DB, n table.Name) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// Which of the three tables exist; a missing one is NULL, never an error.
	var outbox, ours, cli sql.NullString
	err := db.QueryRowContext(ctx, `SELECT to_regclass($1)::text, to_regclass($2)::text, to_regclass('schema_migrations')::text`,
		n.Qualified(), n.QualifiedMigrationsTable()).
		Scan(&outbox, &ours, &cli)
	if err != nil || !outbox.Valid || !cli.Valid {
		return nil // a diagnosis only: the caller's own error stands
	}
	if ours.Valid {
		var recorded bool
		q := "SELECT EXISTS (SELECT FROM " + n.QualifiedMigrationsTable() + ")"
		if err := db.QueryRowContext(ctx, q).Scan(&recorded); err != nil || recorded {
			return nil
		}
	}
	var version int64
	var dirty bool
	if err := db.QueryRowContext(ctx, `SELECT version, dirty FROM schema_migrations LIMIT 1`).Scan(&version, &dirty); err != nil {
		return nil
	}
	state := ""
	if dirty {
		state = " (dirty: finish or undo that migration by hand first)"
	}
	return fmt.Errorf("%w: %s exists but %s.%s records no version, while %s (the migrate CLI's default version table) "+
		"says %d%s, so the files were applied without the CLI's x-migrations-table option; record the version where "+
		"outboxd reads it, changing nothing else: migrate -path migrations -database 'pgx5://USER@HOST:PORT/DATABASE?%s' force %d",
		ErrUnrecorded, n, n.Schema, n.MigrationsTable(), cli.String, version, state, CLIOptions(n), version)
}
