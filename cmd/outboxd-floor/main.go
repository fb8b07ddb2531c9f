// Command outboxd-floor is the floor under a dispatcher's start: a program that opens
// one PostgreSQL connection (OUTBOXD_DATABASE_URL), listens for HTTP
// (OUTBOXD_HTTP__ADDR), logs the two lines outboxd run logs on the way to ready, and
// answers GET /readyz with a SELECT 1 on that connection. `outboxd bench` starts it
// beside `outboxd run` and times both from exec, so that outboxd's exec → ready is read
// against what this machine cannot go below.
//
// Built with -tags linked (outboxd-floor-linked, linked.go) it also links every package
// outboxd links, and so pays outboxd's process start before doing the same least.
//
// Invariant: it does the least any dispatcher's start must do and nothing else. Its own
// code uses only the standard library and pgx (the linked build adds packages whose
// inits run and nothing of which is called), reads no configuration beyond those two
// variables, and exits 0 on SIGTERM or SIGINT.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// The log lines the bench waits for, as outboxd run writes them.
const (
	adminListening = "admin endpoints listening"
	dispatching    = "dispatching"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "version" {
		fmt.Println("outboxd-floor")
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Getenv, os.Stderr)
	stop()
	if err != nil {
		logLine(os.Stderr, entry{Msg: "outboxd-floor failed", Error: err.Error()})
		os.Exit(1)
	}
}

// entry is one JSON log line.
type entry struct {
	Msg   string `json:"msg"`
	Addr  string `json:"addr,omitempty"`
	Error string `json:"error,omitempty"`
}

func logLine(w io.Writer, e entry) {
	line, _ := json.Marshal(e)
	_, _ = w.Write(append(line, '\n'))
}

// run connects, listens, says so and serves /readyz until ctx ends.
func run(ctx context.Context, getenv func(string) string, logs io.Writer) error {
	dsn, addr := getenv("OUTBOXD_DATABASE_URL"), getenv("OUTBOXD_HTTP__ADDR")
	if dsn == "" || addr == "" {
		return errors.New("set OUTBOXD_DATABASE_URL and OUTBOXD_HTTP__ADDR")
	}
	connectCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	conn, err := pgx.Connect(connectCtx, dsn)
	cancel()
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	var mu sync.Mutex // a pgx.Conn serves one query at a time
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		qctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		mu.Lock()
		_, err := conn.Exec(qctx, "SELECT 1")
		mu.Unlock()
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	logLine(logs, entry{Msg: adminListening, Addr: ln.Addr().String()})
	logLine(logs, entry{Msg: dispatching})
	select {
	case <-ctx.Done():
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shut down the HTTP server: %w", err)
	}
	return nil
}
