package main

// outboxd stats, messages and requeue: the admin API's operator endpoints, run
// straight against the database. They share the API's wire types and request parsing
// (package admin), so --json prints what the API answers.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/admin"
	"github.com/outboxd/outboxd/store"
)

// inspectTimeout bounds a read command, and each chunk of a bulk requeue.
const inspectTimeout = time.Minute

func statsCmd(ctx context.Context, e env) error {
	fs := newFlags("stats", e.stderr)
	asJSON := fs.Bool("json", false, "print one JSON object, as GET /api/v1/stats answers")
	if err := parseNoArgs(fs, e.args); err != nil {
		return err
	}
	cfg, err := loadConfig(e, fs)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, inspectTimeout)
	defer cancel()
	st, done, err := openInspectStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer done()

	streams, drivers := admin.Describe(cfg)
	if len(streams) == 0 { // nothing configured: every stream the table has a backlog for
		names, err := st.Streams(ctx)
		if err != nil {
			return err
		}
		for _, n := range names {
			streams = append(streams, admin.Stream{Name: n})
		}
	}
	stats, err := admin.CollectStats(ctx, st, cfg.Table().String(), streams, drivers, nil)
	if err != nil {
		return err
	}
	if *asJSON {
		return printInspectJSON(e.stdout, stats)
	}
	if len(stats.Streams) == 0 {
		fmt.Fprintf(e.stdout, "%s: no stream is configured and none has pending, leased or failed messages\n", stats.Table)
		return nil
	}
	ordered := false // only then the blocked-key columns
	for _, s := range stats.Streams {
		ordered = ordered || s.Ordered
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	header := "STREAM\tDRIVER\tPENDING\tLEASED\tFAILED\tDEFERRED\tOLDEST PENDING"
	if ordered {
		header += "\tBLOCKED KEYS\tWAITING BEHIND"
	}
	fmt.Fprintln(tw, header)
	unserved := 0
	for _, s := range stats.Streams {
		age := "-"
		if d := time.Duration(s.OldestPendingAgeSeconds * float64(time.Second)); d >= time.Second {
			age = d.Round(time.Second).String()
		} else if d > 0 {
			age = d.Round(time.Millisecond).String()
		}
		driver := orDash(s.Driver)
		if s.Unserved {
			driver, unserved = "UNSERVED", unserved+1
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s", s.Stream, driver, s.Pending, s.Leased, s.Failed, s.Deferred, age)
		switch {
		case s.BlockedKeys != nil:
			fmt.Fprintf(tw, "\t%d\t%d", *s.BlockedKeys, *s.BlockedMessages)
		case ordered:
			fmt.Fprint(tw, "\t-\t-") // not ordered: no key is ever blocked
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if unserved > 0 {
		fmt.Fprintf(e.stdout, "\n%d UNSERVED stream(s): pending rows under a stream no configured stream names; "+
			"nobody delivers them (a producer's typo, or a stream not configured yet). See OutboxdUnservedMessages in docs/operations.md.\n", unserved)
	}
	return nil
}

func messagesCmd(ctx context.Context, e env) error {
	fs := newFlags("messages", e.stderr)
	var q admin.MessageQuery
	fs.StringVar(&q.Status, "status", "", "only rows in this status: pending, leased, delivered or failed")
	fs.StringVar(&q.Stream, "stream", "", "only rows of this stream")
	fs.StringVar(&q.Since, "since", "", "only rows created at or after this RFC 3339 time, or this long ago (2h)")
	fs.StringVar(&q.Until, "until", "", "only rows created before this RFC 3339 time, or this long ago")
	fs.StringVar(&q.Limit, "limit", "", fmt.Sprintf("rows per page, 1 to %d (default %d)", admin.MaxPageLimit, admin.DefaultPageLimit))
	fs.StringVar(&q.Cursor, "cursor", "", "continue after the page that printed this cursor")
	asJSON := fs.Bool("json", false, "print one JSON object, as GET /api/v1/messages answers")
	if err := parseNoArgs(fs, e.args); err != nil {
		return err
	}
	f, err := q.Filter(time.Now())
	if err != nil {
		return usageError{msg: "messages: " + err.Error()}
	}
	cfg, err := loadConfig(e, fs)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, inspectTimeout)
	defer cancel()
	st, done, err := openInspectStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer done()

	page, err := admin.ListPage(ctx, st, f)
	if err != nil {
		return err
	}
	if *asJSON {
		return printInspectJSON(e.stdout, page)
	}
	if len(page.Messages) == 0 {
		fmt.Fprintln(e.stdout, "no messages match")
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTREAM\tTOPIC\tSTATUS\tATTEMPTS\tCREATED\tLAST ERROR")
	for _, m := range page.Messages {
		status := m.Status
		switch {
		case m.DeferredSince != nil:
			status += " (deferred since " + m.DeferredSince.Local().Format(time.DateTime) + ")"
		case m.LeaseUntil != nil:
			status += " (by " + m.Owner + " until " + m.LeaseUntil.Local().Format(time.TimeOnly) + ")"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%s\n", m.ID, m.Stream, m.Topic, status, m.Attempts,
			m.CreatedAt.Local().Format(time.DateTime), orDash(oneLine(m.LastError, 80)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if page.NextCursor != "" {
		fmt.Fprintf(e.stderr, "more messages match: add --cursor %s for the next page\n", page.NextCursor)
	}
	return nil
}

func requeueCmd(ctx context.Context, e env) error {
	fs := newFlags("requeue", e.stderr)
	idList := fs.String("ids", "", "requeue these failed messages, by id (comma-separated)")
	stream := fs.String("stream", "", "requeue failed messages of this stream")
	since := fs.String("since", "", "with --stream: only messages created at or after this RFC 3339 time, or this long ago (2h)")
	until := fs.String("until", "", "with --stream: only messages created before this RFC 3339 time, or this long ago")
	limit := fs.Int("limit", 0, "with --stream: requeue at most this many, oldest first")
	all := fs.Bool("all", false, "with --stream: requeue every matching failed message")
	asJSON := fs.Bool("json", false, `print {"requeued": N} and no progress`)
	if err := parseNoArgs(fs, e.args); err != nil {
		return err
	}
	// The flags become the request the HTTP API takes, checked by the same Plan.
	req := admin.RequeueRequest{Stream: *stream, Since: *since, Until: *until, All: *all}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "limit" {
			req.Limit = limit
		}
	})
	if *idList != "" {
		ids, err := parseIDList(*idList)
		if err != nil {
			return usageError{msg: "requeue: --ids: " + err.Error()}
		}
		req.IDs = ids
	}
	plan, err := req.Plan(time.Now())
	if err != nil {
		return usageError{msg: "requeue: " + err.Error() + " (flags: --ids, or --stream with --since, --until and --limit N or --all)"}
	}
	cfg, err := loadConfig(e, fs)
	if err != nil {
		return err
	}
	openCtx, cancel := context.WithTimeout(ctx, inspectTimeout)
	defer cancel()
	st, done, err := openInspectStore(openCtx, cfg)
	if err != nil {
		return err
	}
	defer done()

	var show *requeueProgress
	var progress func(done, target int64)
	if !*asJSON {
		show = newRequeueProgress(e.stderr)
		progress = func(done, target int64) { show.update(fmt.Sprintf("requeued %d/%d", done, target)) }
	}
	n, err := admin.Requeue(ctx, st, plan, progress)
	if show != nil {
		show.end()
	}
	if err != nil {
		return err
	}
	switch byIDs, named := plan.ByIDs(); {
	case *asJSON:
		return printInspectJSON(e.stdout, admin.RequeueResponse{Requeued: n})
	case byIDs:
		fmt.Fprintf(e.stdout, "requeued %d of the %d messages named (a message that is not failed is left alone)\n", n, named)
	default:
		fmt.Fprintf(e.stdout, "requeued %d failed messages of stream %s\n", n, plan.Stream())
	}
	return nil
}

// requeueProgress shows a changing line: rewritten in place on a terminal, one line per
// update elsewhere.
type requeueProgress struct {
	w        io.Writer
	terminal bool
	shown    bool
}

func newRequeueProgress(w io.Writer) *requeueProgress {
	return &requeueProgress{w: w, terminal: isTerminal(w)}
}

func (p *requeueProgress) update(s string) {
	switch {
	case p.w == nil:
	case p.terminal:
		fmt.Fprintf(p.w, "\r\033[K%s", s)
		p.shown = true
	default:
		fmt.Fprintln(p.w, s)
	}
}

func (p *requeueProgress) end() {
	if p.w != nil && p.terminal && p.shown {
		fmt.Fprintln(p.w)
		p.shown = false
	}
}

// openInspectStore connects to the configured database with a small pool, for one command,
// and refuses a schema this build does not expect.
func openInspectStore(ctx context.Context, cfg *config.Config) (*store.Store, func(), error) {
	pc, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, nil, fmt.Errorf("database_url: %w", config.RedactParseError(err))
	}
	pc.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("connect to database: %w", err)
	}
	st, err := store.New(pool, cfg.Table())
	if err == nil {
		err = checkSchema(ctx, st, cfg.DatabaseURL)
	}
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return st, pool.Close, nil
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

func parseIDList(s string) ([]int64, error) {
	parts := strings.Split(s, ",")
	ids := make([]int64, 0, len(parts))
	for _, p := range parts {
		p = strings.TrimSpace(p)
		id, err := strconv.ParseInt(p, 10, 64)
		if err != nil || id < 1 {
			return nil, fmt.Errorf("%q is not a message id; want positive whole numbers separated by commas", p)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

func printInspectJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine flattens s to one line of at most n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
