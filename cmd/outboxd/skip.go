package main

// outboxd skip: POST /api/v1/messages/skip, run straight against the database. A skip
// gives up on a message for good and lets the later messages of its key continue: the
// way past a failed head of an ordered stream (docs/operations.md).

import (
	"context"
	"flag"
	"fmt"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/ops"
)

func skipCmd(ctx context.Context, e env) error {
	fs := newFlags("skip", e.stderr)
	var ids ops.IDList
	fs.Var(&ids, "id", "skip this message, by id (repeat --id for several)")
	stream := fs.String("stream", "", "with --key: the stream of the key whose head to skip")
	key := fs.String("key", "", "with --stream: skip the head of this key, its first message not yet delivered")
	asJSON := fs.Bool("json", false, `print the answer as POST /api/v1/messages/skip gives it: {"skipped": N, "id": ID}`)
	outbox := outboxFlag(fs)
	if err := parseNoArgs(fs, e.args); err != nil {
		return err
	}
	// The flags' own combinations, in their names; the request is then checked by ops.
	keyGiven := given(fs, "key")
	req := ops.SkipRequest{Stream: *stream}
	switch {
	case len(ids) > 0 && (*stream != "" || keyGiven):
		return usageError{Msg: "skip: give either --id or --stream and --key, not both"}
	case len(ids) > 0:
		req.IDs = ids
	case *stream == "" && !keyGiven:
		return usageError{Msg: "skip: name what to skip: --id N [--id M …], or --stream S --key K for the head of key K"}
	case *stream == "":
		return usageError{Msg: "skip: --key needs --stream: a key is named within its stream"}
	case !keyGiven:
		return usageError{Msg: "skip: --stream needs --key: name the key whose head to skip"}
	default:
		req.Key = key
	}
	if err := req.Check(); err != nil {
		return opsError("skip", "", err)
	}
	ctx, cancel := context.WithTimeout(ctx, inspectTimeout)
	defer cancel()
	return withOps(ctx, e, fs, *outbox, req.Stream, func(o *ops.Ops, _ *config.Config) error {
		res, err := o.Skip(ctx, req)
		if err != nil || *asJSON {
			return show(e.stdout, true, res, opsError("skip", "", err))
		}
		fmt.Fprintln(e.stdout, res.Summary(req))
		return nil
	})
}

// given reports whether the flag name was set on the command line, even to "".
func given(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}
