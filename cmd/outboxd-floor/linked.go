//go:build linked

package main

// Built with -tags linked (bin/outboxd-floor-linked), the floor links every package
// outboxd links, so that its process start pays what outboxd's does before main (the
// runtime's set-up of a binary that size and every package's init: the broker clients',
// metrics', tracing's) and runs none of it. The bench times it beside the floor: the
// two differ by what outboxd's dependencies cost a start, which no code of outboxd's
// after main can win back (docs/benchmarks.md, exec → ready).
import (
	_ "github.com/outboxd/outboxd/config"
	_ "github.com/outboxd/outboxd/internal/app"
	_ "github.com/outboxd/outboxd/internal/cli"
	_ "github.com/outboxd/outboxd/internal/ops"
	_ "github.com/outboxd/outboxd/router/drivers"
)
