package ops

// What the command line needs of the operations beyond the requests themselves: flags
// that fill a request, message ids as a flag value, and the results as text or JSON.

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Register declares outboxd messages' filter flags on fs, each filling its field of q.
func (q *MessageQuery) Register(fs *flag.FlagSet) {
	fs.StringVar(&q.Status, "status", "", "only rows in this status: pending, leased, delivered, failed or expired")
	fs.StringVar(&q.Stream, "stream", "", "only rows of this stream")
	fs.StringVar(&q.Since, "since", "", "only rows created at or after this RFC 3339 time, or this long ago (2h)")
	fs.StringVar(&q.Until, "until", "", "only rows created before this RFC 3339 time, or this long ago")
	fs.StringVar(&q.Limit, "limit", "", fmt.Sprintf("rows per page, 1 to %d (default %d)", MaxPageLimit, DefaultPageLimit))
	fs.StringVar(&q.Cursor, "cursor", "", "continue after the page that printed this cursor")
	fs.StringVar(&q.FromID, "from-id", "", "only rows with this id or a greater one")
	fs.StringVar(&q.ToID, "to-id", "", "only rows with this id or a smaller one")
	fs.StringVar(&q.Key, "key", "", fmt.Sprintf("only rows of this key (a page examines at most %d rows; see the cursor)", ScanBudget))
	fs.StringVar(&q.Topic, "topic", "", fmt.Sprintf("only rows of this topic (a page examines at most %d rows)", ScanBudget))
	fs.StringVar(&q.Error, "error", "", fmt.Sprintf("only rows whose last error contains this text, in any case (a page examines at most %d rows)", ScanBudget))
}

// IDList is a flag value collecting message ids, given once each or with commas.
type IDList []int64

func (l *IDList) String() string {
	return strings.ReplaceAll(strings.Trim(fmt.Sprint([]int64(*l)), "[]"), " ", ",")
}

// Set adds the ids of s, a comma-separated list.
func (l *IDList) Set(s string) error {
	ids, err := ParseIDs(s)
	*l = append(*l, ids...)
	return err
}

// ParseIDs reads a comma-separated list of message ids, each a positive whole number.
func ParseIDs(s string) ([]int64, error) {
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

// Show writes an operation's result to w: as text when it writes itself as text and
// asJSON is false, else as indented JSON, the shape the HTTP API answers with.
func Show(w io.Writer, asJSON bool, v any) error {
	if t, ok := v.(interface{ WriteText(io.Writer) error }); ok && !asJSON {
		return t.WriteText(w)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// Summary is the one line that says, for a person, what a requeue of req did.
func (r RequeueResult) Summary(req RequeueRequest) string {
	if req.IDs != nil {
		return fmt.Sprintf("requeued %d of the %d messages named (a message that is not failed is left alone)", r.Requeued, len(req.IDs))
	}
	return fmt.Sprintf("requeued %d failed messages of stream %s", r.Requeued, req.Stream)
}

// Summary is the one line that says, for a person, what a skip of req did.
func (r SkipResult) Summary(req SkipRequest) string {
	if req.Key != nil {
		return fmt.Sprintf("skipped message %d, the head of key %q of stream %s: the key continues with its next message",
			r.ID, *req.Key, req.Stream)
	}
	return fmt.Sprintf("skipped %d of the %d messages named (a message that is leased, delivered or already skipped is left alone)",
		r.Skipped, len(req.IDs))
}

// Progress returns a progress callback for a bulk requeue that writes to w: on a
// terminal one line rewritten in place, which done ends; else a line per report.
func Progress(w io.Writer, terminal bool) (progress func(done, target int64), done func()) {
	return ProgressOf(w, terminal, "requeued")
}

// IsTerminal reports whether w is a terminal, where a line rewritten in place reads as
// progress; in a pipe or a file the same bytes are noise. The progress of the CLI's bulk
// operations, of the bench and of the demo asks it.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// ProgressOf is Progress for any bulk operation, each report saying "<verb> done/target".
func ProgressOf(w io.Writer, terminal bool, verb string) (progress func(done, target int64), done func()) {
	shown := false
	progress = func(done, target int64) {
		if terminal {
			fmt.Fprintf(w, "\r\033[K%s %d/%d", verb, done, target)
			shown = true
		} else {
			fmt.Fprintf(w, "%s %d/%d\n", verb, done, target)
		}
	}
	return progress, func() {
		if shown {
			fmt.Fprintln(w)
		}
	}
}

// RequeueFlags are outboxd requeue's flags: the request's own fields, and the ids and
// the limit as the command line gives them. Request turns them into the request.
type RequeueFlags struct {
	RequeueRequest
	ids   string
	limit int
}

// Register declares outboxd requeue's flags on fs, except --json.
func (f *RequeueFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.ids, "ids", "", "requeue these failed messages, by id (comma-separated)")
	fs.StringVar(&f.Stream, "stream", "", "requeue failed messages of this stream")
	fs.StringVar(&f.Since, "since", "", "with --stream: only messages created at or after this RFC 3339 time, or this long ago (2h)")
	fs.StringVar(&f.Until, "until", "", "with --stream: only messages created before this RFC 3339 time, or this long ago")
	fs.IntVar(&f.limit, "limit", 0, "with --stream: requeue at most this many, oldest first")
	fs.BoolVar(&f.All, "all", false, "with --stream: requeue every matching failed message")
	fs.Int64Var(&f.FromID, "from-id", 0, "with --stream: only messages with this id or a greater one")
	fs.Int64Var(&f.ToID, "to-id", 0, "with --stream: only messages with this id or a smaller one")
	fs.StringVar(&f.Key, "key", "", "with --stream: only messages of this key")
	fs.StringVar(&f.Topic, "topic", "", "with --stream: only messages of this topic")
	fs.StringVar(&f.ErrorContains, "error", "", "with --stream: only messages whose last error contains this text, in any case")
}

// Request is the request the parsed flags of fs make: a limit only when --limit was
// given, even as 0, and the ids of --ids; an error names a bad --ids.
func (f *RequeueFlags) Request(fs *flag.FlagSet) (RequeueRequest, error) {
	req := f.RequeueRequest
	fs.Visit(func(fl *flag.Flag) {
		if fl.Name == "limit" {
			req.Limit = &f.limit
		}
	})
	if f.ids != "" {
		ids, err := ParseIDs(f.ids)
		if err != nil {
			return req, fmt.Errorf("--ids: %w", err)
		}
		req.IDs = ids
	}
	return req, nil
}

// ReplayFlags are outboxd replay's flags: the request's own fields, and the key as the
// command line gives it. Request turns them into the request.
type ReplayFlags struct {
	ReplayRequest
	key string
}

// Register declares outboxd replay's flags on fs, except --json.
func (f *ReplayFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.Stream, "stream", "", "replay delivered messages of this stream")
	fs.StringVar(&f.Since, "since", "", "only messages created at or after this RFC 3339 time, or this long ago (2h)")
	fs.StringVar(&f.Until, "until", "", "only messages created before this RFC 3339 time, or this long ago")
	fs.StringVar(&f.key, "key", "", "only messages of this key")
	fs.StringVar(&f.Topic, "topic", "", "only messages of this topic (as the row holds it, without the stream's prefix)")
	fs.BoolVar(&f.DryRun, "dry-run", false, "count what would be replayed; copy nothing")
	fs.Int64Var(&f.Resume, "resume", 0, "go on with the replay of this id, from where it stopped")
	fs.Int64Var(&f.Cancel, "cancel", 0, "stop the running replay of this id; what it copied stays in line")
}

// Request is the request the parsed flags of fs make: a key only when --key was given.
func (f *ReplayFlags) Request(fs *flag.FlagSet) ReplayRequest {
	req := f.ReplayRequest
	fs.Visit(func(fl *flag.Flag) {
		if fl.Name == "key" {
			req.Key = &f.key
		}
	})
	return req
}
