package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/admin"
)

// The backoff between attempts to reach PostgreSQL at start: doubling from the first to
// the cap, so a database that is minutes away is asked a few times a minute, not flooded.
const (
	connectBackoffInitial = 250 * time.Millisecond
	connectBackoffMax     = 15 * time.Second
	connectAttemptTimeout = 5 * time.Second
)

// waitForDatabase returns once PostgreSQL at cfg.DatabaseURL answers, with the two
// connections it opened to learn that (startConns), retrying with capped exponential
// backoff and logging one line per failed attempt. It gives up when ctx ends or, if
// database.connect_timeout is set, once that has passed. A database_url that does not
// parse, or credentials the server refuses, are not worth waiting for and fail at once.
// notReady hears why the database is not reachable yet, for /readyz. The first attempt
// is first's when it has one (begun earlier, tryStart).
func waitForDatabase(ctx context.Context, cfg *config.Config, logger *slog.Logger, notReady func(string), first *startTry) (*startConns, error) {
	if _, err := pgx.ParseConfig(cfg.DatabaseURL); err != nil {
		first.discard()
		return nil, fmt.Errorf("database_url: %w", config.RedactParseError(err))
	}
	start := time.Now()
	var deadline <-chan time.Time
	if limit := cfg.Database.ConnectTimeout; limit > 0 {
		timer := time.NewTimer(limit)
		defer timer.Stop()
		deadline = timer.C
	}
	wait := connectBackoffInitial
	for attempt := 1; ; attempt++ {
		conns, tried, err := first.take(ctx)
		if !tried {
			conns, err = openStart(ctx, cfg)
		}
		if err == nil {
			if attempt > 1 {
				logger.Info("database reachable", "attempts", attempt, "waited", time.Since(start).Round(time.Millisecond).String())
			}
			return conns, nil
		}
		if refusedUs(err) {
			return nil, fmt.Errorf("connect to database: %w", err)
		}
		notReady(fmt.Sprintf("waiting for the database: %v", err))
		logger.Warn("database unreachable at start; retrying", "attempt", attempt, "retry_in", wait.String(), "err", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("stopped while waiting for the database: %w", err)
		case <-deadline:
			return nil, fmt.Errorf("the database did not answer within database.connect_timeout (%s, %d attempts): %w",
				cfg.Database.ConnectTimeout, attempt, err)
		case <-time.After(wait):
		}
		wait = min(2*wait, connectBackoffMax)
	}
}

// refusedUs reports a server that answered and refused our credentials (SQLSTATE class
// 28): a mistake in the configuration that waiting does not mend, so run fails at once.
func refusedUs(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "28")
}

// waitingHandler serves the admin address while run waits for the database: alive, not
// ready (with the reason), metrics as usual, and 503 for the API, which needs the store.
func waitingHandler(metrics http.Handler, reason *atomic.Pointer[string]) http.Handler {
	mux := http.NewServeMux()
	reply := func(w http.ResponseWriter, status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	why := func() string {
		if r := reason.Load(); r != nil {
			return *r
		}
		return "waiting for the database"
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		reply(w, http.StatusOK, map[string]string{"status": "alive"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		reply(w, http.StatusServiceUnavailable, admin.Readiness{Checks: []admin.CheckResult{{Name: "database", Error: why()}}})
	})
	if metrics != nil {
		mux.Handle("GET /metrics", metrics)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		reply(w, http.StatusServiceUnavailable, map[string]string{"error": why()})
	})
	return mux
}
