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

	"github.com/outboxd/outboxd/table"
)

// Migrator applies the embedded migrations to one outbox table. golang-migrate keeps the
// version in <schema>.<table>_schema_migrations and serialises concurrent migrators on an
// advisory lock derived from that name, so replicas started together with --migrate are
// safe and two outbox tables migrate independently.
type Migrator struct {
	db *sql.DB
	m  *migrate.Migrate
}

// Open connects to dsn and prepares to migrate the table n. It creates n's schema if it
// is missing, because the version table lives there.
func Open(ctx context.Context, dsn string, n table.Name) (*Migrator, error) {
	if err := n.Validate(); err != nil {
		return nil, err
	}
	connConfig, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("migrate: parse database URL: %w", err)
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
	if _, err := db.ExecContext(ctx, "CREATE SCHEMA IF NOT EXISTS "+table.Quote(n.Schema)); err != nil {
		return fail(fmt.Errorf("migrate: create schema %s: %w", n.Schema, err))
	}
	driver, err := pgxmigrate.WithInstance(db, &pgxmigrate.Config{
		MigrationsTable:       table.Quote(n.Schema) + "." + table.Quote(n.MigrationsTable()),
		MigrationsTableQuoted: true,
	})
	if err != nil {
		return fail(fmt.Errorf("migrate: prepare version table: %w", err))
	}
	rendered, err := Render(n)
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
	return &Migrator{db: db, m: m}, nil
}

// Up applies every migration not yet applied. Being at the latest version is not an error.
func (mg *Migrator) Up() error {
	if err := mg.m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("migrate up: %w", err)
	}
	return nil
}

// Down reverts steps migrations; steps <= 0 reverts all of them.
func (mg *Migrator) Down(steps int) error {
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

// Close releases the connection.
func (mg *Migrator) Close() error {
	srcErr, dbErr := mg.m.Close()
	return errors.Join(srcErr, dbErr, mg.db.Close())
}

// Up is a convenience for Open, Up and Close.
func Up(ctx context.Context, dsn string, n table.Name) error {
	mg, err := Open(ctx, dsn, n)
	if err != nil {
		return err
	}
	return errors.Join(mg.Up(), mg.Close())
}
