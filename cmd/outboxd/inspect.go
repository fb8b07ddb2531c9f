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
	"github.com/outboxd/outboxd/internal/ops"
)

// inspectTimeout bounds a read command, and each chunk of a bulk requeue.
const inspectTimeout = time.Minute

// opsError maps an operation's error to an exit status: a refused request (ops.ErrInvalid)
// is a usage error, exit 2, with hint appended; anything else, ops.ErrConflict included,
// exits 1 with its text.
func opsError(verb, hint string, err error) error {
	if errors.Is(err, ops.ErrInvalid) {
		return usageError{Msg: verb + ": " + err.Error() + hint}
	}
	return err
}

func statsCmd(ctx context.Context, e env) error {
	fs := newFlags("stats", e.stderr)
	asJSON := fs.Bool("json", false, "print one JSON object, as GET /api/v1/stats answers")
	outbox := outboxFlag(fs)
	if err := parseNoArgs(fs, e.args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, inspectTimeout)
	defer cancel()
	cfg, err := loadConfig(e, fs)
	if err != nil {
		return err
	}
	one := func(o *ops.Ops, cfg *config.Config) (ops.Stats, error) {
		streams, drivers := ops.Describe(cfg)
		// Nothing configured: every stream the table has a backlog for.
		return o.Stats(ctx, ops.StatsRequest{Streams: streams, Drivers: drivers, EveryStream: true})
	}
	if len(cfg.Outboxes) == 0 || *outbox != "" {
		return withOutbox(ctx, cfg, "stats", *outbox, "", func(o *ops.Ops, one1 *config.Config, name string) error {
			st, err := one(o, one1)
			if len(cfg.Outboxes) > 0 {
				st.Outbox = name
			}
			return show(e.stdout, *asJSON, st, opsError("stats", "", err))
		})
	}
	// Every outbox, each on its own: one whose database does not answer is reported in
	// its entry, and the others still show.
	served := cfg.Served()
	names := make([]string, len(served))
	for i, ob := range served {
		names[i] = ob.Name
	}
	all, err := ops.StatsOfEach(names, func(i int) (st ops.Stats, err error) {
		st.Table = served[i].Table().String()
		err = withOutbox(ctx, cfg, "stats", names[i], "", func(o *ops.Ops, one1 *config.Config, _ string) error {
			st, err = one(o, one1)
			return err
		})
		return st, err
	})
	if serr := show(e.stdout, *asJSON, all, nil); serr != nil {
		return serr
	}
	if err != nil {
		return errors.New("stats: some outboxes could not be read (see their entries)")
	}
	return nil
}

func messagesCmd(ctx context.Context, e env) error {
	fs := newFlags("messages", e.stderr)
	var q ops.MessageQuery
	q.Register(fs)
	asJSON := fs.Bool("json", false, "print one JSON object, as GET /api/v1/messages answers")
	outbox := outboxFlag(fs)
	if err := parseNoArgs(fs, e.args); err != nil {
		return err
	}
	if err := q.Check(time.Now()); err != nil {
		return opsError("messages", "", err)
	}
	ctx, cancel := context.WithTimeout(ctx, inspectTimeout)
	defer cancel()
	return withOps(ctx, e, fs, *outbox, q.Stream, func(o *ops.Ops, _ *config.Config) error {
		page, err := o.ListMessages(ctx, q)
		if err = show(e.stdout, *asJSON, page, opsError("messages", "", err)); err == nil && !*asJSON && page.NextCursor != "" {
			fmt.Fprintf(e.stderr, "more messages may match: add --cursor %s for the next page\n", page.NextCursor)
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
	outbox := outboxFlag(fs)
	if err := parseNoArgs(fs, e.args); err != nil {
		return err
	}
	req, err := flags.Request(fs)
	if err != nil {
		return usageError{Msg: "requeue: " + err.Error()}
	}
	if err := req.Check(time.Now()); err != nil {
		return opsError("requeue", requeueHint, err)
	}
	return withOps(ctx, e, fs, *outbox, req.Stream, func(o *ops.Ops, _ *config.Config) error {
		var progress func(done, target int64)
		finish := func() {}
		if !*asJSON {
			progress, finish = ops.Progress(e.stderr, ops.IsTerminal(e.stderr))
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

// outboxFlag declares --outbox, which selects one outbox of a configuration's outboxes
// list, as the admin API's outbox parameter does.
func outboxFlag(fs *flag.FlagSet) *string {
	return fs.String("outbox", "", "the outbox (outboxes[].name) to act on; needed where the configuration lists several "+
		"and the stream does not tell which")
}

// withOps loads the configuration, connects to the table of the outbox the request
// addresses (ops.Pick: --outbox, else the only one, else the one with the stream),
// within inspectTimeout, and runs f with the operations over it.
func withOps(ctx context.Context, e env, fs *flag.FlagSet, outbox, stream string, f func(*ops.Ops, *config.Config) error) error {
	cfg, err := loadConfig(e, fs)
	if err != nil {
		return err
	}
	return withOutbox(ctx, cfg, fs.Name(), outbox, stream, func(o *ops.Ops, one *config.Config, _ string) error { return f(o, one) })
}

// withOutbox connects to the outbox of cfg that outbox and stream pick (app.OpenOutbox)
// and runs f with its operations, its configuration as if the only one, and its name.
func withOutbox(ctx context.Context, cfg *config.Config, verb, outbox, stream string, f func(*ops.Ops, *config.Config, string) error) error {
	openCtx, cancel := context.WithTimeout(ctx, inspectTimeout)
	defer cancel()
	st, one, name, done, err := app.OpenOutbox(openCtx, cfg, outbox, stream)
	if err != nil {
		return opsError(verb, " (flag: --outbox)", err)
	}
	defer done()
	return f(ops.New(st, nil), one, name)
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
		return usageError{Msg: fmt.Sprintf("%s: unexpected argument %q", fs.Name(), fs.Arg(0))}
	}
	return nil
}
