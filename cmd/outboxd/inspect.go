package main

// outboxd stats, messages, requeue and skip: thin adapters over internal/ops, which the
// admin API runs too. Each verb turns its flags into an ops request, checks it before it
// connects, runs it straight against the database and prints the result as a table or,
// with --json, exactly as the API answers. opsError is where an operation's error
// becomes an exit status.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/app"
	"github.com/outboxd/outboxd/internal/bench"
	"github.com/outboxd/outboxd/internal/ops"
)

// inspectTimeout bounds a read command, and each chunk of a bulk requeue.
const inspectTimeout = time.Minute

// opsError maps an operation's error to an exit status: a refused request (ops.ErrInvalid)
// is a usage error, exit 2, with hint appended; anything else, ops.ErrConflict included,
// exits 1 with its text.
func opsError(verb, hint string, err error) error {
	if errors.Is(err, ops.ErrInvalid) {
		return usageError{msg: verb + ": " + err.Error() + hint}
	}
	return err
}

func statsCmd(ctx context.Context, e env) error {
	fs := newFlags("stats", e.stderr)
	asJSON := fs.Bool("json", false, "print one JSON object, as GET /api/v1/stats answers")
	if err := parseNoArgs(fs, e.args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, inspectTimeout)
	defer cancel()
	return withOps(ctx, e, fs, func(o *ops.Ops, cfg *config.Config) error {
		streams, drivers := ops.Describe(cfg)
		// Nothing configured: every stream the table has a backlog for.
		st, err := o.Stats(ctx, ops.StatsRequest{Streams: streams, Drivers: drivers, EveryStream: true})
		return show(e.stdout, *asJSON, st, opsError("stats", "", err))
	})
}

func messagesCmd(ctx context.Context, e env) error {
	fs := newFlags("messages", e.stderr)
	var q ops.MessageQuery
	q.Register(fs)
	asJSON := fs.Bool("json", false, "print one JSON object, as GET /api/v1/messages answers")
	if err := parseNoArgs(fs, e.args); err != nil {
		return err
	}
	if err := q.Check(time.Now()); err != nil {
		return opsError("messages", "", err)
	}
	ctx, cancel := context.WithTimeout(ctx, inspectTimeout)
	defer cancel()
	return withOps(ctx, e, fs, func(o *ops.Ops, _ *config.Config) error {
		page, err := o.ListMessages(ctx, q)
		if err = show(e.stdout, *asJSON, page, opsError("messages", "", err)); err == nil && !*asJSON && page.NextCursor != "" {
			fmt.Fprintf(e.stderr, "more messages match: add --cursor %s for the next page\n", page.NextCursor)
		}
		return err
	})
}

const requeueHint = " (flags: --ids, or --stream with --since, --until and --limit N or --all)"

func requeueCmd(ctx context.Context, e env) error {
	fs := newFlags("requeue", e.stderr)
	var flags ops.RequeueFlags
	flags.Register(fs)
	asJSON := fs.Bool("json", false, `print {"requeued": N} and no progress`)
	if err := parseNoArgs(fs, e.args); err != nil {
		return err
	}
	req, err := flags.Request(fs)
	if err != nil {
		return usageError{msg: "requeue: " + err.Error()}
	}
	if err := req.Check(time.Now()); err != nil {
		return opsError("requeue", requeueHint, err)
	}
	return withOps(ctx, e, fs, func(o *ops.Ops, _ *config.Config) error {
		var progress func(done, target int64)
		finish := func() {}
		if !*asJSON {
			progress, finish = ops.Progress(e.stderr, bench.IsTerminal(e.stderr))
		}
		res, err := o.Requeue(ctx, req, progress)
		finish()
		if err != nil || *asJSON {
			return show(e.stdout, true, res, opsError("requeue", requeueHint, err))
		}
		fmt.Fprintln(e.stdout, res.Summary(req))
		return nil
	})
}

// withOps loads the configuration, connects to its table (within inspectTimeout) and
// runs f with the operations over it.
func withOps(ctx context.Context, e env, fs *flag.FlagSet, f func(*ops.Ops, *config.Config) error) error {
	cfg, err := loadConfig(e, fs)
	if err != nil {
		return err
	}
	openCtx, cancel := context.WithTimeout(ctx, inspectTimeout)
	defer cancel()
	st, done, err := app.OpenStore(openCtx, cfg)
	if err != nil {
		return err
	}
	defer done()
	return f(ops.New(st, nil), cfg)
}

// show prints an operation's result (ops.Show), or returns its error.
func show(w io.Writer, asJSON bool, v any, err error) error {
	if err != nil {
		return err
	}
	return ops.Show(w, asJSON, v)
}

func parseNoArgs(fs *flag.FlagSet, args []string) error {
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{msg: fmt.Sprintf("%s: unexpected argument %q", fs.Name(), fs.Arg(0))}
	}
	return nil
}
