package main

// outboxd replay: a thin adapter over internal/ops, which the admin API runs too.

import (
	"context"
	"fmt"
	"os/user"
	"time"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/ops"
)

const replayHint = " (flags: --stream S with --since, --until, --key, --topic and --dry-run; or --resume ID; or --cancel ID)"

func replayCmd(ctx context.Context, e env) error {
	fs := newFlags("replay", e.stderr)
	var flags ops.ReplayFlags
	flags.Register(fs)
	asJSON := fs.Bool("json", false, "print the result as one JSON object, as POST /api/v1/messages/replay answers, and no progress")
	outbox := outboxFlag(fs)
	if err := parseNoArgs(fs, e.args); err != nil {
		return err
	}
	req := flags.Request(fs)
	if err := req.Check(time.Now()); err != nil {
		return opsError("replay", replayHint, err)
	}
	return withOps(ctx, e, fs, *outbox, req.Stream, func(o *ops.Ops, _ *config.Config) error {
		opt := ops.ReplayOptions{By: "outboxd replay"}
		if u, err := user.Current(); err == nil {
			opt.By += " (" + u.Username + ")"
		}
		finish := func() {}
		if !*asJSON {
			opt.Progress, finish = ops.ProgressOf(e.stderr, ops.IsTerminal(e.stderr), "replayed")
		}
		res, err := o.Replay(ctx, req, opt)
		finish()
		if err != nil || *asJSON {
			return show(e.stdout, true, res, opsError("replay", replayHint, err))
		}
		fmt.Fprintln(e.stdout, res.Summary())
		return nil
	})
}
