package producer

import (
	"strconv"
	"strings"
)

// Every statement writes exactly the producer's columns; the dispatcher's columns take their
// defaults. Values are always parameters: only the validated, quoted table name is text.
// available_at defaults to the database's statement_timestamp(), the same clock (and, for a
// message without AvailableAt, the same instant) as created_at, so that no client clock
// decides when a message becomes due.

// columns is the order of the producer's columns in every statement and in COPY.
const columns = "stream, topic, key, headers, payload, available_at, message_id"

// expiringColumns adds expires_at (migration 0006) for statements writing a message that
// sets ExpiresAt. Only those name the column, so a program that never sets it keeps
// working against a table not yet migrated to version 6.
const expiringColumns = columns + ", expires_at"

// paramsPerRow is the number of bound values one message takes, expiringParams with
// expires_at.
const (
	paramsPerRow   = 7
	expiringParams = paramsPerRow + 1
)

// maxSQLRows is the most messages one database/sql statement carries: the protocol counts
// parameters in 16 bits, so a statement can bind at most 65535 values.
const maxSQLRows = 65535 / expiringParams

// lockKeySQL calls the table's key lock function (migration 0005), which derives the lock
// from the table, the stream and the key: the one definition of the lock, shared with SQL
// producers (docs/ordering.md), so the client never derives a key itself. Parameters: $1
// stream, $2 key.
func lockKeySQL(function string) string { return "SELECT " + function + "($1, $2)" }

// insertOneSQL writes one message and returns its id; expiring adds $8, expires_at.
func insertOneSQL(table string, expiring bool) string {
	if expiring {
		return "INSERT INTO " + table + " (" + expiringColumns + ")\n" +
			"VALUES ($1, $2, $3, $4::jsonb, $5, coalesce($6::timestamptz, statement_timestamp()), $7, $8::timestamptz)\n" +
			"RETURNING id"
	}
	return "INSERT INTO " + table + " (" + columns + ")\n" +
		"VALUES ($1, $2, $3, $4::jsonb, $5, coalesce($6::timestamptz, statement_timestamp()), $7)\n" +
		"RETURNING id"
}

// insertUnnestSQL writes a batch passed as one array per column, in one statement (so the
// notify trigger fires once). The arrays are equally long. Ids follow array order: rows
// are inserted in ordinality order. expiring adds $8, the expires_at array.
func insertUnnestSQL(table string, expiring bool) string {
	if expiring {
		return "INSERT INTO " + table + " (" + expiringColumns + ")\n" +
			"SELECT m.stream, m.topic, m.key, m.headers, m.payload,\n" +
			"       coalesce(m.available_at, statement_timestamp()), m.message_id, m.expires_at\n" +
			"FROM unnest($1::text[], $2::text[], $3::text[], $4::jsonb[], $5::bytea[], $6::timestamptz[], $7::text[], $8::timestamptz[])\n" +
			"     WITH ORDINALITY AS m(stream, topic, key, headers, payload, available_at, message_id, expires_at, n)\n" +
			"ORDER BY m.n"
	}
	return "INSERT INTO " + table + " (" + columns + ")\n" +
		"SELECT m.stream, m.topic, m.key, m.headers, m.payload,\n" +
		"       coalesce(m.available_at, statement_timestamp()), m.message_id\n" +
		"FROM unnest($1::text[], $2::text[], $3::text[], $4::jsonb[], $5::bytea[], $6::timestamptz[], $7::text[])\n" +
		"     WITH ORDINALITY AS m(stream, topic, key, headers, payload, available_at, message_id, n)\n" +
		"ORDER BY m.n"
}

// insertValuesSQL returns a multi-row INSERT of maxSQLRows rows for drivers that bind
// only scalars, and where each row ends in it. The statement for n rows is the prefix
// text[:ends[n]], so every chunk size shares this one string. Ids follow row order.
// expiring adds expires_at as each row's eighth value.
func insertValuesSQL(table string, expiring bool) (text string, ends []int) {
	var b strings.Builder
	b.Grow(maxSQLRows * 100)
	cols, per := columns, paramsPerRow
	if expiring {
		cols, per = expiringColumns, expiringParams
	}
	b.WriteString("INSERT INTO " + table + " (" + cols + ") VALUES\n")
	ends = make([]int, maxSQLRows+1)
	ends[0] = b.Len()
	var num []byte
	param := func(p int) {
		num = strconv.AppendInt(num[:0], int64(p), 10)
		b.WriteByte('$')
		b.Write(num)
	}
	for r := range maxSQLRows {
		p := r * per
		if r > 0 {
			b.WriteString(",\n")
		}
		b.WriteByte('(')
		param(p + 1)
		b.WriteString(", ")
		param(p + 2)
		b.WriteString(", ")
		param(p + 3)
		b.WriteString(", ")
		param(p + 4)
		b.WriteString("::jsonb, ")
		param(p + 5)
		b.WriteString(", coalesce(")
		param(p + 6)
		b.WriteString("::timestamptz, statement_timestamp()), ")
		param(p + 7)
		if expiring {
			b.WriteString(", ")
			param(p + 8)
			b.WriteString("::timestamptz")
		}
		b.WriteByte(')')
		ends[r+1] = b.Len()
	}
	return b.String(), ends
}
