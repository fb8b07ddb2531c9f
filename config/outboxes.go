package config

import (
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/table"
)

// Served lists the outboxes this replica serves: the entries of outboxes, or, without
// them, the one outbox of the top-level database_url, database, schema, table, streams
// and janitor, named DefaultOutbox.
func (c Config) Served() []Outbox {
	if len(c.Outboxes) > 0 {
		return slices.Clone(c.Outboxes)
	}
	return []Outbox{{Name: DefaultOutbox, DatabaseURL: c.DatabaseURL, Database: c.Database, Schema: c.Schema,
		TableName: c.TableName, Streams: c.Streams, Janitor: c.Janitor}}
}

// ForOutbox is the configuration of one outbox as a configuration of its own, the shape
// every part that serves one table reads: o's database, table, streams and janitor at
// the top level, no outboxes, and, of an outboxes list, only the drivers o's streams
// publish to.
func (c Config) ForOutbox(o Outbox) *Config {
	one := c
	one.DatabaseURL, one.Database, one.Schema, one.TableName = o.DatabaseURL, o.Database, o.Schema, o.TableName
	one.Streams, one.Janitor, one.Outboxes = o.Streams, o.Janitor, nil
	if len(c.Outboxes) == 0 {
		return &one // the one outbox: every driver, as always
	}
	used := map[string]Driver{}
	for _, s := range o.Streams {
		for _, name := range []string{s.Driver, s.DeadLetter.Driver} {
			if d, ok := c.Drivers[name]; ok {
				used[name] = d
			}
		}
	}
	one.Drivers = used
	return &one
}

// topLevelOnly are the keys that name one outbox's table at the top level; with an
// outboxes list each entry names its own, so setting them there too is a mistake.
var topLevelOnly = []string{"database_url", "schema", "table"}

// inheritOutboxes gives every entry of outboxes the top-level database and janitor keys
// it does not set itself, and refuses the top-level keys that belong to one outbox. A
// connection URL is never inherited: it names one database.
func (d *decoder) inheritOutboxes(cfg *Config) {
	if len(cfg.Outboxes) == 0 {
		return
	}
	for _, key := range topLevelOnly {
		if o := d.origin[key]; o != "" {
			d.ps.add(key, "set together with outboxes (%s): with outboxes, each entry names its own %s; move it into an entry", o, key)
		}
	}
	for i := range cfg.Outboxes {
		entry := reflect.ValueOf(&cfg.Outboxes[i]).Elem()
		prefix := entryPath("outboxes", i)
		for _, section := range []string{"database", "janitor"} {
			eachLeaf(fieldAt(reflect.ValueOf(cfg).Elem(), section), section, func(path string, v reflect.Value, f field) {
				if f.redact == "dsn" {
					return
				}
				if _, set := d.origin[prefix+"."+path]; !set {
					fieldAt(entry, path).Set(v)
				}
			})
		}
	}
}

// validOutboxName is the rule for outboxes[<n>].name: a Prometheus label value and a
// query parameter that need no quoting.
func validOutboxName(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	return !strings.ContainsFunc(s, func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '_' && r != '-'
	})
}

// outboxes checks every entry of outboxes, each under its index, and the rules between
// them: unique names, and no two entries on one table of one database.
func (v *checker) outboxes(c *Config) {
	names := map[string]int{}
	tables := map[string]int{}
	for i, o := range c.Outboxes {
		key := entryPath("outboxes", i)
		k := func(f string) string { return key + "." + f }
		switch {
		case o.Name == "":
			v.Add(k("name"), "required: it labels the outbox's metrics and selects it in the admin API")
		case !validOutboxName(o.Name):
			v.Add(k("name"), "must be 1 to 63 lower-case letters, digits, '_' or '-', got %s", quoteShort(o.Name))
		default:
			if j, dup := names[o.Name]; dup {
				v.Add(k("name"), "%s is also the name of outboxes[%d]; names must be unique", quoteShort(o.Name), j)
			} else {
				names[o.Name] = i
			}
		}
		if v.Required(k("database_url"), o.DatabaseURL) {
			v.DSN(k("database_url"), o.DatabaseURL)
		}
		v.ident(k("schema"), o.Schema)
		v.ident(k("table"), o.TableName)
		if table.CheckIdent(o.Schema) == nil && table.CheckIdent(o.TableName) == nil {
			if err := table.CheckChannel(o.Table()); err != nil {
				v.Add(k("table"), "%s", strings.TrimPrefix(err.Error(), "table: "))
			}
		}
		v.database(k("database"), o.Database)
		v.janitor(k("janitor"), o.Janitor)
		for _, name := range slices.Sorted(maps.Keys(o.Streams)) {
			v.stream(k("streams."+name), name, o.Streams[name], c.Drivers, o.Streams)
		}
		if where, ok := tableKey(o); ok {
			if j, dup := tables[where]; dup {
				v.Add(k("table"), "%s of this database is also served by outboxes[%d]; one table is one outbox",
					quoteShort(o.Table().String()), j)
			} else {
				tables[where] = i
			}
		}
	}
}

// tableKey identifies the table o names: the server, the database and the table.
// Different spellings of one server (localhost, 127.0.0.1) are not recognised.
func tableKey(o Outbox) (string, bool) {
	pc, err := pgconn.ParseConfig(o.DatabaseURL)
	if err != nil || o.Schema == "" || o.TableName == "" {
		return "", false
	}
	return strings.Join([]string{pc.Host, strconv.Itoa(int(pc.Port)), pc.Database, o.Schema, o.TableName}, "\x00"), true
}
