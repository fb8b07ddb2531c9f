package migrations

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/golang-migrate/migrate/v4"
	pgxmigrate "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/outboxd/outboxd/internal/pgdsn"
	"github.com/outboxd/outboxd/table"
)

// Migrator applies the embedded migrations of one layout to one outbox table.
// golang-migrate keeps the version in <schema>.<table>_schema_migrations (the same table
// for both layouts) and serialises concurrent migrators on an advisory lock derived from
// that name, so replicas started together with --migrate are safe and two outbox tables
// migrate independently.
type Migrator struct {
	db     *sql.DB
	m      *migrate.Migrate
	table  table.Name
	layout Layout
}

// Open connects to dsn and prepares to migrate the table n with the plain layout.
func Open(ctx context.Context, dsn string, n table.Name) (*Migrator, error) {
	return Plain.Open(ctx, dsn, n)
}

// Open connects to dsn and prepares to migrate the table n with this layout. It creates
// n's schema if it is missing, because the version table lives there.
func (l Layout) Open(ctx context.Context, dsn string, n table.Name) (*Migrator, error) {
	if err := n.Validate(); err != nil {
		return nil, err
	}
	connConfig, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("migrate: parse database URL: %w", pgdsn.RedactParseError(err))
	}
	db := stdlib.OpenDB(*connConfig)
	fail := func(err error) (*Migrator, error) {
		db.Close()
		return nil, err
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pingCtx); err != nil {
		return fail(fmt.Errorf("migrate: connect to database: %w", err))
	}
	if err := createSchema(ctx, db, n.Schema); err != nil {
		return fail(fmt.Errorf("migrate: create schema %s: %w", n.Schema, err))
	}
	driver, err := pgxmigrate.WithInstance(db, &pgxmigrate.Config{
		MigrationsTable:       n.QualifiedMigrationsTable(),
		MigrationsTableQuoted: true,
	})
	if err != nil {
		return fail(fmt.Errorf("migrate: prepare version table: %w", err))
	}
	rendered, err := l.Render(n)
	if err != nil {
		return fail(err)
	}
	source, err := iofs.New(rendered, ".")
	if err != nil {
		return fail(fmt.Errorf("migrate: read embedded files: %w", err))
	}
	m, err := migrate.NewWithInstance("iofs", source, "pgx5", driver)
	if err != nil {
		return fail(fmt.Errorf("migrate: %w", err))
	}
	m.LockTimeout = time.Minute
	return &Migrator{db: db, m: m, table: n, layout: l}, nil
}

// Up applies every migration not yet applied. Being at the latest version is not an error.
// It refuses a table that exists with the other layout, before migrating and again after
// (a migrator of the other layout may have won the race to create it).
func (mg *Migrator) Up() error {
	if err := mg.checkLayout("up"); err != nil {
		return err
	}
	if v, _, err := mg.Version(); err == nil && v == 0 {
		// Applying 0001 to a table the migrate CLI created would fail half-way with
		// "already exists"; say what happened instead.
		if err := unrecorded(context.Background(), mg.db, mg.table); err != nil {
			return fmt.Errorf("migrate up: %w", err)
		}
	}
	if err := mg.m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("migrate up: %w", err)
	}
	return mg.checkLayout("up")
}

// Down reverts steps migrations; steps <= 0 reverts all of them. It refuses a table
// that exists with the other layout.
func (mg *Migrator) Down(steps int) error {
	if err := mg.checkLayout("down"); err != nil {
		return err
	}
	var err error
	if steps <= 0 {
		err = mg.m.Down()
	} else {
		err = mg.m.Steps(-steps)
	}
	if err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("migrate down: %w", err)
	}
	return nil
}

// Version reports the applied version (0 when none) and whether a migration failed
// half-way (dirty), which needs an operator before anything else runs.
func (mg *Migrator) Version() (version uint, dirty bool, err error) {
	version, dirty, err = mg.m.Version()
	if errors.Is(err, migrate.ErrNilVersion) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("migrate version: %w", err)
	}
	return version, dirty, nil
}

// checkLayout fails when the table exists but was not created with the migrator's
// layout: pg_class.relkind is 'p' for a partitioned table and 'r' for a plain one. A
// missing table passes. Migrations never convert a table from one layout to the other.
func (mg *Migrator) checkLayout(op string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var kind string
	err := mg.db.QueryRowContext(ctx, `SELECT c.relkind::text FROM pg_class c
		JOIN pg_namespace s ON s.oid = c.relnamespace
		WHERE s.nspname = $1 AND c.relname = $2`, mg.table.Schema, mg.table.Table).Scan(&kind)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("migrate %s: read the layout of %s: %w", op, mg.table, err)
	case kind == mg.layout.relkind():
		return nil
	}
	for _, have := range []Layout{Plain, Partitioned} {
		if kind == have.relkind() {
			return fmt.Errorf("migrate %s: %s has the %s layout (pg_class.relkind = '%s') but the %s layout was asked for "+
				"(janitor.partitions.enabled chooses it); migrations never convert a table between layouts, "+
				"see docs/partitioning.md", op, mg.table, have, kind, mg.layout)
		}
	}
	return fmt.Errorf("migrate %s: %s exists but is not a table (pg_class.relkind = '%s')", op, mg.table, kind)
}

// Close releases the connection.
func (mg *Migrator) Close() error {
	srcErr, dbErr := mg.m.Close()
	return errors.Join(srcErr, dbErr, mg.db.Close())
}

// Up is a convenience for Open, Up and Close with the plain layout.
func Up(ctx context.Context, dsn string, n table.Name) error { return Plain.Up(ctx, dsn, n) }

// Up is a convenience for Open, Up and Close with this layout.
func (l Layout) Up(ctx context.Context, dsn string, n table.Name) error {
	mg, err := l.Open(ctx, dsn, n)
	if err != nil {
		return err
	}
	return errors.Join(mg.Up(), mg.Close())
}

// createSchema creates the schema unless it exists. Two replicas started together with
// --migrate would otherwise race: CREATE SCHEMA IF NOT EXISTS is not atomic against a
// concurrent one and fails with a unique violation, so the creation is serialised on a
// transaction-scoped advisory lock derived from the schema's name.
func createSchema(ctx context.Context, db *sql.DB, schema string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // a no-op after Commit
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext('outboxd:create-schema:' || $1))`, schema); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "CREATE SCHEMA IF NOT EXISTS "+table.Quote(schema)); err != nil {
		return err
	}
	return tx.Commit()
}
