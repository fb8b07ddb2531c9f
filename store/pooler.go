package store

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// poolerRounds is how many alternating rounds BehindPooler asks after the first (asked
// on both at once); one match is proof, so more rounds only make a busy pooler, whose
// idle server session another client took in between, harder to miss.
const poolerRounds = 5

// BehindPooler reports whether connections opened with cfg are served by a pooler that
// hands one server session to several clients in turn (PgBouncer's transaction or
// statement pooling). It opens two connections and asks each, alternately, for its
// server process's pid while the other sits idle outside any transaction. Two sessions
// that are both open never share a server process on PostgreSQL itself, so a shared pid
// proves a pooler and no direct connection can ever be reported as one; a pooler that
// reuses its most recently idle server session first (PgBouncer's default) answers with
// the same pid in the first alternating round. It can miss a pooler that happens to serve the two from different
// server sessions every round, one busy with other clients: database.pooler says so
// without asking. Session pooling, which keeps a client's session, is not reported.
//
// A first round, both asked at once, can settle it sooner: the process id PostgreSQL
// announces as a session begins (in its cancellation key) is the session's own, while a
// pooler announces a key of its own making, since it must route a client's cancel
// requests to whichever server session serves it at the time. When both connections'
// answers are the processes that began them, no pooler stands between, and the
// alternating rounds are not asked.
//
// The probe's own statements use the simple protocol, which every pooler forwards.
func BehindPooler(ctx context.Context, cfg *pgx.ConnConfig) (bool, error) {
	var conns [2]*pgx.Conn
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		for _, conn := range conns {
			if conn != nil {
				_ = conn.Close(closeCtx)
			}
		}
	}()
	// Both connect at once: the probe sits on the way to readiness, and a connection's
	// handshake (TLS included) is most of its cost. Only the questions must alternate.
	var errs [2]error
	var wg sync.WaitGroup
	for i := range conns {
		wg.Go(func() { conns[i], errs[i] = pgx.ConnectConfig(ctx, cfg) })
	}
	wg.Wait()
	if err := cmp.Or(errs[0], errs[1]); err != nil {
		return false, fmt.Errorf("probe for a pooler: connect: %w", err)
	}
	return BehindPoolerOn(ctx, conns[0], conns[1])
}

// BehindPoolerOn is BehindPooler on two connections already open to the same address,
// both idle outside any transaction; it leaves them open, for a caller that has further
// use for them (outboxd's start, which would otherwise open two more).
func BehindPoolerOn(ctx context.Context, first, second *pgx.Conn) (bool, error) {
	pid := func(conn *pgx.Conn) (int32, error) {
		var p int32
		err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`, pgx.QueryExecModeSimpleProtocol).Scan(&p)
		if err != nil {
			return 0, fmt.Errorf("probe for a pooler: %w", err)
		}
		return p, nil
	}
	// The first round asks both at once: on PostgreSQL itself it is the only round, and
	// each answer is a new session's first statement, which costs the server most of a
	// round trip's time. A pooler may serve two questions at once from two server
	// sessions, so a shared pid cannot be looked for here but can be in the rounds after.
	var pids [2]int32
	var errs [2]error
	var wg sync.WaitGroup
	for i, conn := range []*pgx.Conn{first, second} {
		wg.Go(func() { pids[i], errs[i] = pid(conn) })
	}
	wg.Wait()
	if err := cmp.Or(errs[0], errs[1]); err != nil {
		return false, err
	}
	if pids[0] == pids[1] {
		return true, nil
	}
	if uint32(pids[0]) == first.PgConn().PID() && uint32(pids[1]) == second.PgConn().PID() {
		return false, nil // each is the server process that began it: no pooler between
	}
	for range poolerRounds {
		a, err := pid(first)
		if err != nil {
			return false, err
		}
		b, err := pid(second)
		if err != nil {
			return false, err
		}
		if a == b {
			return true, nil
		}
		first, second = second, first
	}
	return false, nil
}
