package postgres

import (
	_ "embed" // the inbox script
	"strings"

	"github.com/outboxd/outboxd/table"
)

// inboxDDL is the inbox's DDL for the default table, the same text as
// docs/sql/inbox.sql (a test holds the two equal).
//
//go:embed inbox.sql
var inboxDDL string

// InboxSQL is the script that creates inbox t as docs/sql/inbox.sql creates the default
// one: the table and its index, named after t. It is for tools that set up an inbox of
// their own (outboxd bench and demo, tests); t must be valid (ParseTable).
func InboxSQL(t table.Name) string {
	def, _ := ParseTable(DefaultTable)
	return strings.NewReplacer(
		def.Table+"_unprocessed_idx", table.Quote(t.Table+"_unprocessed_idx"),
		def.Schema+"."+def.Table, t.Qualified(),
	).Replace(inboxDDL)
}
