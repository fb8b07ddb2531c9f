package producer_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver for database/sql

	"github.com/outboxd/outboxd/producer"
)

// Enqueue a message in the same pgx transaction as the business change it announces:
// both commit together, or neither does.
func ExampleEnqueue() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, databaseURL())
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx) // a no-op once committed
	// … the business change, e.g. INSERT INTO orders …, on tx …
	_, err = producer.Enqueue(ctx, tx, producer.Message{
		Stream:  "orders",
		Topic:   "orders.created",
		Key:     "order-42",
		Headers: map[string]string{"content-type": "application/json"},
		Payload: []byte(`{"order":42,"total":"19.90"}`),
	})
	if err != nil {
		log.Fatal(err) // the message was checked before anything was sent: tx is still usable
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}

	var topic string
	var payload []byte
	err = pool.QueryRow(ctx, `SELECT topic, payload FROM outbox.messages WHERE stream = 'orders' AND key = 'order-42'`).
		Scan(&topic, &payload)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("pending for the dispatcher: %s %s\n", topic, payload)
	// Output: pending for the dispatcher: orders.created {"order":42,"total":"19.90"}
}

// Enqueue with database/sql: the same, on a *sql.Tx. A rolled-back transaction leaves
// nothing to publish.
func ExampleEnqueueSQL() {
	ctx := context.Background()
	db, err := sql.Open("pgx", databaseURL())
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	for _, commit := range []bool{true, false} {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			log.Fatal(err)
		}
		_, err = producer.EnqueueSQL(ctx, tx, producer.Message{
			Stream: "invoices", Topic: "invoices.issued", Key: fmt.Sprint("committed=", commit), Payload: []byte(`{"invoice":7}`),
		})
		if err != nil {
			log.Fatal(err)
		}
		if commit {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
		}
		if err != nil {
			log.Fatal(err)
		}
	}

	var keys []string
	rows, err := db.QueryContext(ctx, `SELECT key FROM outbox.messages WHERE stream = 'invoices' ORDER BY id`)
	if err != nil {
		log.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			log.Fatal(err)
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("in the outbox:", keys)
	// Output: in the outbox: [committed=true]
}

// EnqueueBatch writes many messages in one statement, still inside your transaction.
func ExampleEnqueueBatch() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, databaseURL())
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	msgs := make([]producer.Message, 0, 3)
	for _, sku := range []string{"sku-1", "sku-2", "sku-3"} {
		msgs = append(msgs, producer.Message{
			Stream: "stock", Topic: "stock.reserved", Key: sku, Payload: []byte(`{"quantity":1}`),
		})
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := producer.EnqueueBatch(ctx, tx, msgs); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}

	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox.messages WHERE stream = 'stock'`).Scan(&n); err != nil {
		log.Fatal(err)
	}
	fmt.Println("messages enqueued:", n)
	// Output: messages enqueued: 3
}

// LockKey makes transactions writing the same key of an ordered stream take turns, so
// the key's messages are delivered in the order their transactions committed.
func ExampleLockKey() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, databaseURL())
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	for _, event := range []string{"account.opened", "account.credited"} {
		tx, err := pool.Begin(ctx)
		if err != nil {
			log.Fatal(err)
		}
		// Held until commit or rollback; another transaction locking account-9 of
		// "ledger" waits here until then.
		if err := producer.LockKey(ctx, tx, "ledger", "account-9"); err != nil {
			log.Fatal(err)
		}
		_, err = producer.Enqueue(ctx, tx, producer.Message{
			Stream: "ledger", Topic: event, Key: "account-9", Payload: []byte(`{}`),
		})
		if err != nil {
			log.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			log.Fatal(err)
		}
	}

	rows, err := pool.Query(ctx, `SELECT topic FROM outbox.messages WHERE stream = 'ledger' AND key = 'account-9' ORDER BY id`)
	if err != nil {
		log.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var topic string
		if err := rows.Scan(&topic); err != nil {
			log.Fatal(err)
		}
		fmt.Println(topic)
	}
	if err := rows.Err(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// account.opened
	// account.credited
}
