// Package table names the outbox table and everything derived from it.
//
// Invariant: schema and table names are checked against a strict pattern before they
// reach any SQL text, and are always substituted quoted, so a configured name can never
// change the meaning of a statement. Every identifier derived from the table (indexes,
// constraints, functions, the view, the notification channel, the migrations table) is
// computed here, in one place, so two outbox tables in one schema never collide.
//
// Compatibility: this package is public API for applications. With producer, router's
// driver interface and router/routertest it is all the module promises; every other
// package is internal to outboxd. It follows the semantic versioning of the module
// github.com/outboxd/outboxd: within a major version, its exported identifiers, the names it
// accepts and every identifier it derives from a table name (a deployed table keeps them)
// do not change incompatibly, and additions come in minor releases. While the module is
// at v0 an incompatible change may still come, but only in a minor release and listed
// under "Changed" in CHANGELOG.md.
package table

import (
	"fmt"
	"regexp"
)

// MaxNameLen bounds schema and table names so that derived identifiers such as
// "<table>_claim_idx" or "<table>_schema_migrations" stay within PostgreSQL's 63 bytes.
const MaxNameLen = 40

// Default is the outbox table used when nothing else is configured.
var Default = Name{Schema: "outbox", Table: "messages"}

var identPattern = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// Name identifies one outbox table.
type Name struct {
	Schema string
	Table  string
}

// CheckIdent reports why s is not an acceptable schema or table name, or nil.
// The rule is deliberately narrower than PostgreSQL's: lower-case ASCII letters, digits
// and underscores, starting with a letter or underscore, at most MaxNameLen bytes.
func CheckIdent(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("must not be empty")
	case len(s) > MaxNameLen:
		return fmt.Errorf("%q is %d bytes long; at most %d are allowed", s, len(s), MaxNameLen)
	case !identPattern.MatchString(s):
		return fmt.Errorf("%q is not a plain identifier: use lower-case letters, digits and underscores, starting with a letter or underscore", s)
	case len(s) >= 3 && s[:3] == "pg_":
		return fmt.Errorf("%q starts with pg_, which PostgreSQL reserves", s)
	}
	return nil
}

// MaxChannelLen bounds the notification channel "<schema>.<table>": PostgreSQL refuses
// a longer channel name in pg_notify, which the insert trigger calls, so every INSERT
// would fail.
const MaxChannelLen = 63

// Validate reports the first problem with n, naming the part that is wrong.
func (n Name) Validate() error {
	if err := CheckIdent(n.Schema); err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	if err := CheckIdent(n.Table); err != nil {
		return fmt.Errorf("table: %w", err)
	}
	return CheckChannel(n)
}

// CheckChannel reports why the schema and table, each acceptable, are together too long
// for n's notification channel, or nil.
func CheckChannel(n Name) error {
	if l := len(n.Channel()); l > MaxChannelLen {
		return fmt.Errorf("table: %q and %q make the notification channel %q, %d bytes long; PostgreSQL allows at most %d, "+
			"so shorten the schema or the table name", n.Schema, n.Table, n.Channel(), l, MaxChannelLen)
	}
	return nil
}

// Quote returns s as a quoted identifier. It is only ever applied to validated names,
// which contain no quotes; quoting keeps reserved words such as "order" usable.
func Quote(s string) string { return `"` + s + `"` }

// Qualified is the quoted, schema-qualified table: "outbox"."messages".
func (n Name) Qualified() string { return Quote(n.Schema) + "." + Quote(n.Table) }

// Derived is the quoted, schema-qualified name of an object derived from the table,
// such as Derived("requeue") → "outbox"."messages_requeue".
func (n Name) Derived(suffix string) string {
	return Quote(n.Schema) + "." + Quote(n.Table+"_"+suffix)
}

// Channel is the LISTEN/NOTIFY channel the insert trigger notifies, as a plain string
// (pg_notify takes it as text; LISTEN needs it quoted: see ListenChannel).
func (n Name) Channel() string { return n.Schema + "." + n.Table }

// ListenChannel is Channel quoted for use in a LISTEN statement.
func (n Name) ListenChannel() string { return Quote(n.Channel()) }

// MigrationsTable is the unquoted name of the table golang-migrate keeps its version in;
// it lives in the outbox schema so that each outbox table migrates independently.
func (n Name) MigrationsTable() string { return n.Table + "_" + migrationsSuffix }

// QualifiedMigrationsTable is MigrationsTable quoted and schema-qualified, for SQL.
func (n Name) QualifiedMigrationsTable() string { return n.Derived(migrationsSuffix) }

const migrationsSuffix = "schema_migrations"

// AdvisoryLockKey names the table for advisory locks; callers hash it with hashtext().
func (n Name) AdvisoryLockKey() string { return "outboxd:" + n.Schema + "." + n.Table }

// FlowLockKey names stream's flow lock, hashed by the database into the second half of
// its advisory lock key; the insert trigger builds the same text (migration 0003).
func (n Name) FlowLockKey(stream string) string { return n.Channel() + ":" + stream }

func (n Name) String() string { return n.Schema + "." + n.Table }
