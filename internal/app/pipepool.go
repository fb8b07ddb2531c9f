package app

import (
	"math"
	"runtime"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/config"
)

// pipelineSessions is the pool configuration of the pipelines' claims and write-backs:
// at most database.max_conns connections (pipelineConns), whatever the number of
// streams, and synchronous_commit off unless database_url sets it. Such a commit returns
// before its WAL is flushed; a database crash within the next few hundred milliseconds
// can then undo it, which at-least-once delivery absorbs: an undone claim leaves its
// rows pending, an undone write-back leaves them leased until reclaimed, and either way
// they are published again, never lost. Operators' requeues and skips, the janitor and
// migrations keep the server's setting. Measured: docs/benchmarks.md.
//
// A batch that finds every connection busy waits for one (within its claim's deadline).
// The flow locks, when they share this pool, hold at most half of it (store.TryFlow), so
// a flowing pipeline always finds connections to claim with.
//
// The pool opens up front, and keeps open, what one stream's burst takes at once (its
// batches in flight, the claim after them and its flow lock; the whole pool if smaller),
// reopening a lost connection within pipelineRefill: a claim that finds no connection
// idle while the pool could grow waits for a new one's handshake, even if another is
// released a millisecond later, and under load a handshake took 260 ms, holding every
// message committed meanwhile. A burst from idle met it at once: a flow's lock took the
// last idle connection and the claim after it waited (the bench's 1,000 msg/s phase had a
// p99 of 61–273 ms where the rest of the run's was 11–37; docs/benchmarks.md). Beyond
// that the pool grows on demand and closes what stays idle for pipelineIdle.
//
// Behind a transaction pooler the server's setting stays: the pooler would refuse the
// startup parameter.
func pipelineSessions(base *pgxpool.Config, db config.Database, streams map[string]config.Stream, behind bool) *pgxpool.Config {
	c := base.Copy()
	c.MaxConns = pipelineConns(db, streams)
	c.MinConns = min(c.MaxConns, burstConns(streams))
	c.MaxConnIdleTime = min(c.MaxConnIdleTime, pipelineIdle)
	c.HealthCheckPeriod = pipelineRefill
	if _, set := c.ConnConfig.RuntimeParams["synchronous_commit"]; !set && !behind {
		c.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	}
	return c
}

// pipelineRefill is how often the pipelines' pool reopens connections it lost, and
// pipelineIdle how long one beyond its minimum may stay idle before it is closed.
const (
	pipelineRefill = time.Second
	pipelineIdle   = 30 * time.Second
)

// streamConns is what one stream's burst holds at once: its batches in flight, a claim
// and a flow lock.
func streamConns(s config.Stream) int { return s.Concurrency + 2 }

// burstConns is what the busiest stream's burst holds at once.
func burstConns(streams map[string]config.Stream) int32 {
	n := 0
	for _, s := range streams {
		n = max(n, streamConns(s))
	}
	return int32(min(n, math.MaxInt32))
}

// pipelineConns is the bound of the pipelines' pool: database.max_conns when set, else
// what every stream could use at once (streamConns each) but no more than four per CPU
// and at least 10. Beyond a few connections per core the database serves no more
// statements a second, it only queues them.
func pipelineConns(db config.Database, streams map[string]config.Stream) int32 {
	if db.MaxConns > 0 {
		return int32(min(db.MaxConns, math.MaxInt32))
	}
	want := 0
	for _, s := range streams {
		want += streamConns(s)
	}
	return int32(max(2, min(want, max(10, 4*runtime.GOMAXPROCS(0)))))
}
