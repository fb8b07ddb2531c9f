package migrations_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/table"
)

// lockKey calls n's key lock function in tx. lock_timeout turns a wait into error 55P03
// at once, so a lock that conflicts is seen as an error, never as a slow test.
func lockKey(ctx context.Context, tx pgx.Tx, n table.Name, stream, key string) error {
	if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '100ms'"); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, "SELECT "+n.Derived("lock_key")+"($1, $2)", stream, key)
	return err
}

func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}

// The lock function is created for every table name and both layouts: one table's key
// lock excludes the same key of the same table only, and a NULL stream or key is refused.
func TestTheKeyLockFunctionIsRenderedPerTableOnBothLayouts(t *testing.T) {
	t.Parallel()
	dsn := testenv.EmptyDatabase(t)
	first, ctx := connect(t, dsn)
	second, _ := connect(t, dsn)
	tables := []struct {
		n      table.Name
		layout migrations.Layout
	}{
		{table.Default, migrations.Plain},
		{table.Name{Schema: "outbox", Table: "messages_p"}, migrations.Partitioned},
		{table.Name{Schema: "shop", Table: "order"}, migrations.Plain}, // a reserved word
		{table.Name{Schema: "shop", Table: "billing_outbox"}, migrations.Partitioned},
	}
	for _, tb := range tables {
		if err := tb.layout.Up(ctx, dsn, tb.n); err != nil {
			t.Fatalf("up %s (%s): %v", tb.n, tb.layout, err)
		}
	}
	for _, tb := range tables {
		t.Run(tb.n.String()+" ("+tb.layout.String()+")", func(t *testing.T) {
			holder, err := first.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Rollback(ctx)
			if err := lockKey(ctx, holder, tb.n, "orders", "customer-42"); err != nil {
				t.Fatalf("lock: %v", err)
			}
			try := func(n table.Name, stream, key string) error {
				tx, err := second.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback(ctx)
				return lockKey(ctx, tx, n, stream, key)
			}
			if err := try(tb.n, "orders", "customer-42"); !isLockTimeout(err) {
				t.Fatalf("the same key of the same table: %v, want a wait (lock timeout)", err)
			}
			if err := try(tb.n, "orders", "customer-43"); err != nil {
				t.Fatalf("another key waited or failed: %v", err)
			}
			if err := try(tb.n, "payments", "customer-42"); err != nil {
				t.Fatalf("the same key of another stream waited or failed: %v", err)
			}
			for _, other := range tables {
				if other.n != tb.n {
					if err := try(other.n, "orders", "customer-42"); err != nil {
						t.Fatalf("the same key of %s waited or failed: %v", other.n, err)
					}
				}
			}
			// A stream/key pair whose concatenation spells the same text is another lock.
			if err := try(tb.n, "orders"+"\x1fcustomer", "42"); err != nil {
				t.Fatalf("a pair spelling the same concatenation waited or failed: %v", err)
			}
			for _, bad := range [][2]*string{{nil, ptr("k")}, {ptr("orders"), nil}} {
				tx, err := second.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				_, err = tx.Exec(ctx, "SELECT "+tb.n.Derived("lock_key")+"($1, $2)", bad[0], bad[1])
				_ = tx.Rollback(ctx)
				var pgErr *pgconn.PgError
				if !errors.As(err, &pgErr) || pgErr.Code != "22004" {
					t.Fatalf("a NULL stream or key: %v, want null_value_not_allowed (22004)", err)
				}
			}
		})
	}
}

func ptr(s string) *string { return &s }

// A producer role needs no grant to take the lock, even in a database whose default
// privileges take EXECUTE on new functions away from PUBLIC.
func TestARoleWithoutGrantsMayTakeTheKeyLockWhereDefaultPrivilegesRevokeExecute(t *testing.T) {
	t.Parallel()
	dsn := testenv.EmptyDatabase(t)
	admin, ctx := connect(t, dsn)
	if _, err := admin.Exec(ctx, "ALTER DEFAULT PRIVILEGES REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC"); err != nil {
		t.Fatal(err)
	}
	n := table.Default
	if err := migrations.Up(ctx, dsn, n); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	role := "lock_producer_" + hex.EncodeToString(b) // roles are cluster-wide
	for _, stmt := range []string{"CREATE ROLE " + role + " LOGIN", "GRANT USAGE ON SCHEMA outbox TO " + role} {
		if _, err := admin.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.Exec(c, "DROP OWNED BY "+role+"; DROP ROLE "+role); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	producer, _ := connect(t, u.String())
	tx, err := producer.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := lockKey(ctx, tx, n, "orders", "customer-42"); err != nil {
		t.Fatalf("%s, with USAGE on the schema only, could not take the key lock: %v", role, err)
	}
}
