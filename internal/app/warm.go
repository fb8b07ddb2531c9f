package app

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The pipelines' pool keeps its busiest stream's burst of connections open (MinConns,
// pipelineSessions). pgxpool opens them once when it is built and then from its health
// check, every HealthCheckPeriod (pipelineRefill). Opened when it is built, during the
// start, their handshakes took the CPU that the start's own statements and the first
// /readyz were waiting for (docs/benchmarks.md, exec → ready); and a fill held back
// instead would hold as many of the pool's places while it waits. So that first fill is
// refused before it dials, and the health check opens them a second after start.
// Connections a claim asks for are never refused: a backlog met at start is claimed at
// once.

// firstFill marks the context the pipelines' pool is built with, from which pgxpool
// derives the context of its first fill; a claim's connection has the claim's context,
// the health check's its own.
type firstFill struct{}

var errFirstFill = errors.New("the pipelines' standing connections open after the start")

// skipFirstFill makes the pool built from c with the context it returns skip its first
// fill.
func skipFirstFill(ctx context.Context, c *pgxpool.Config) context.Context {
	before := c.BeforeConnect
	c.BeforeConnect = func(ctx context.Context, cc *pgx.ConnConfig) error {
		if ctx.Value(firstFill{}) != nil {
			return errFirstFill
		}
		if before != nil {
			return before(ctx, cc)
		}
		return nil
	}
	return context.WithValue(ctx, firstFill{}, true)
}
