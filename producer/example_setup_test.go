package producer_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/table"
)

// The examples run against a database of their own with the default outbox.messages,
// created on first use and dropped by TestMain. An Example takes no *testing.T, so a
// database that cannot be had panics with the reason instead of passing silently.
var example struct {
	once sync.Once
	name string
	dsn  string
}

// databaseURL is the examples' database: in a program, the URL of your own.
func databaseURL() string {
	example.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var b [6]byte
		_, _ = rand.Read(b[:])
		name := "outboxd_example_" + hex.EncodeToString(b[:])
		admin, err := pgx.Connect(ctx, testenv.AdminDSN())
		if err != nil {
			panic(fmt.Sprintf("examples need PostgreSQL (%s): %v", testenv.EnvDatabaseURL, err))
		}
		defer admin.Close(ctx)
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
			panic(fmt.Sprintf("examples: create database: %v", err))
		}
		example.name = name
		u, err := url.Parse(testenv.AdminDSN())
		if err != nil {
			panic(err)
		}
		u.Path = "/" + name
		example.dsn = u.String()
		if err := migrations.Up(ctx, example.dsn, table.Name{Schema: "outbox", Table: "messages"}); err != nil {
			panic(fmt.Sprintf("examples: migrate: %v", err))
		}
	})
	return example.dsn
}

// dropExampleDatabase removes the examples' database, if one was created.
func dropExampleDatabase() {
	if example.name == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, testenv.AdminDSN())
	if err == nil {
		_, err = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+example.name+" WITH (FORCE)")
		admin.Close(ctx)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "examples: drop database %s: %v\n", example.name, err)
	}
}
