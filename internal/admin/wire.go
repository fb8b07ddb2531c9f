package admin

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/outboxd/outboxd/store"
)

// Paging limits of the message listing.
const (
	DefaultPageLimit = 100
	MaxPageLimit     = 1000
)

// Stats is the answer of GET /api/v1/stats and of `outboxd stats --json`.
type Stats struct {
	Table   string        `json:"table"`
	Streams []StreamStats `json:"streams"`
	Drivers []Driver      `json:"drivers"`
}

// StreamStats is one stream's backlog and, where a dispatcher answers, its breaker.
type StreamStats struct {
	Stream string `json:"stream"`
	Driver string `json:"driver,omitempty"`
	// Breaker is closed, open or half-open; omitted where no dispatcher runs (the CLI).
	Breaker                 string  `json:"breaker,omitempty"`
	Pending                 int64   `json:"pending"`
	Leased                  int64   `json:"leased"`
	Failed                  int64   `json:"failed"`
	Deferred                int64   `json:"deferred"`
	OldestPendingAgeSeconds float64 `json:"oldest_pending_age_seconds"`
	// Ordered is set for a stream configured ordered; only such a stream has the
	// blocked counts.
	Ordered bool `json:"ordered,omitempty"`
	// BlockedKeys counts the keys whose head failed for good and was not skipped;
	// BlockedMessages the messages waiting behind them.
	BlockedKeys     *int64 `json:"blocked_keys,omitempty"`
	BlockedMessages *int64 `json:"blocked_messages,omitempty"`
	// Unserved marks a stream that has pending rows but is not configured: no pipeline
	// of a replica sharing this configuration delivers them (outboxd_unserved_messages).
	Unserved bool `json:"unserved,omitempty"`
}

// StatsStore is what CollectStats reads.
type StatsStore interface {
	Backlogs(ctx context.Context, streams []string) ([]store.Backlog, error)
	Blocked(ctx context.Context, streams []string) ([]store.BlockedStream, error)
	UnservedStreams(ctx context.Context, served []string) ([]store.UnservedStream, error)
}

// CollectStats samples the streams' backlogs and, for ordered streams, their blocked
// keys. When streams are configured (they name a driver), the streams that have pending
// rows but are not among them follow, marked unserved, after the configured ones:
// nobody delivers those rows, and a stats view that left them out would hide them.
// Streams without a driver (the CLI's every-stream listing when nothing is configured)
// are listed as given. breakers may be nil.
func CollectStats(ctx context.Context, st StatsStore, tableName string, streams []Stream, drivers []Driver,
	breakers map[string]string) (Stats, error) {
	out := Stats{Table: tableName, Streams: []StreamStats{}, Drivers: drivers}
	if out.Drivers == nil {
		out.Drivers = []Driver{}
	}
	if len(streams) == 0 {
		return out, nil
	}
	names := make([]string, len(streams))
	var ordered, served []string
	for i, s := range streams {
		names[i] = s.Name
		if s.Ordered {
			ordered = append(ordered, s.Name)
		}
		if s.Driver != "" {
			served = append(served, s.Name)
		}
	}
	unserved := map[string]bool{}
	if len(served) > 0 {
		found, err := st.UnservedStreams(ctx, served)
		if err != nil {
			return Stats{}, err
		}
		streams = slices.Clip(streams) // appends below never write into the caller's array
		for _, u := range found {
			if !slices.Contains(names, u.Stream) {
				unserved[u.Stream] = true
				names = append(names, u.Stream)
				streams = append(streams, Stream{Name: u.Stream})
			}
		}
	}
	backlogs, err := st.Backlogs(ctx, names)
	if err != nil {
		return Stats{}, err
	}
	blocked := map[string]store.BlockedStream{}
	if len(ordered) > 0 {
		found, err := st.Blocked(ctx, ordered)
		if err != nil {
			return Stats{}, err
		}
		for _, b := range found {
			blocked[b.Stream] = b
		}
	}
	for i, b := range backlogs {
		s := StreamStats{
			Stream: b.Stream, Driver: streams[i].Driver, Breaker: breakers[b.Stream],
			Pending: b.Pending, Leased: b.Leased, Failed: b.Failed, Deferred: b.Deferred,
			OldestPendingAgeSeconds: b.OldestPendingAge.Seconds(), Unserved: unserved[b.Stream],
		}
		if streams[i].Ordered {
			bl := blocked[b.Stream]
			s.Ordered, s.BlockedKeys, s.BlockedMessages = true, &bl.Keys, &bl.Waiting
		}
		out.Streams = append(out.Streams, s)
	}
	return out, nil
}

// Message is one row in a listing: every column but the payload and headers.
type Message struct {
	ID            int64      `json:"id"`
	Stream        string     `json:"stream"`
	Topic         string     `json:"topic"`
	Key           string     `json:"key"`
	Status        string     `json:"status"`
	Attempts      int        `json:"attempts"`
	LastError     string     `json:"last_error"`
	CreatedAt     time.Time  `json:"created_at"`
	AvailableAt   time.Time  `json:"available_at"`
	PublishedAt   *time.Time `json:"published_at"`
	DeferredSince *time.Time `json:"deferred_since"`
	Owner         string     `json:"owner"`
	LeaseUntil    *time.Time `json:"lease_until"`
	MessageID     string     `json:"message_id"`
	PayloadBytes  int64      `json:"payload_bytes"`
}

// MessagePage is the answer of GET /api/v1/messages and of `outboxd messages --json`.
// NextCursor is set when more rows match: pass it as cursor to get them.
type MessagePage struct {
	Messages   []Message `json:"messages"`
	NextCursor string    `json:"next_cursor,omitempty"`
}

func newMessage(m store.MessageSummary) Message {
	opt := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		return &t
	}
	return Message{
		ID: m.ID, Stream: m.Stream, Topic: m.Topic, Key: m.Key, Status: m.Status, Attempts: m.Attempts,
		LastError: m.LastError, CreatedAt: m.CreatedAt, AvailableAt: m.AvailableAt,
		PublishedAt: opt(m.PublishedAt), DeferredSince: opt(m.DeferredSince), Owner: m.Owner,
		LeaseUntil: opt(m.LeaseUntil), MessageID: m.MessageID, PayloadBytes: m.PayloadBytes,
	}
}

// Lister is what ListPage reads.
type Lister interface {
	ListMessages(ctx context.Context, f store.MessageFilter) ([]store.MessageSummary, error)
}

// ListPage reads one page of f (f.Limit rows at most) and the cursor of the next page,
// if any row is left: it asks for one row more than it returns.
func ListPage(ctx context.Context, st Lister, f store.MessageFilter) (MessagePage, error) {
	limit := f.Limit
	f.Limit++
	rows, err := st.ListMessages(ctx, f)
	if err != nil {
		return MessagePage{}, err
	}
	page := MessagePage{Messages: make([]Message, 0, min(len(rows), limit))}
	for i, r := range rows {
		if i == limit {
			page.NextCursor = EncodeCursor(rows[i-1].ID)
			break
		}
		page.Messages = append(page.Messages, newMessage(r))
	}
	return page, nil
}

// EncodeCursor makes the opaque cursor that resumes a listing after id.
func EncodeCursor(id int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(id, 10)))
}

// DecodeCursor reads a cursor made by EncodeCursor.
func DecodeCursor(c string) (int64, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	var id int64
	if err == nil {
		id, err = strconv.ParseInt(string(b), 10, 64)
	}
	if err != nil || id < 1 {
		return 0, fmt.Errorf("cursor %q is not one this API handed out: pass next_cursor from the previous page unchanged", c)
	}
	return id, nil
}

// MessageQuery is a listing request as text, from URL parameters or command-line flags.
type MessageQuery struct {
	Status, Stream, Since, Until, Cursor, Limit string
}

// Filter checks every field and returns the store filter, or every problem found,
// each naming its field. Relative times count back from now.
func (q MessageQuery) Filter(now time.Time) (store.MessageFilter, error) {
	f := store.MessageFilter{Stream: q.Stream, Status: q.Status, Limit: DefaultPageLimit}
	var problems []string
	if msg := textProblem(q.Stream); msg != "" {
		problems = append(problems, "stream: "+msg)
	}
	if q.Status != "" {
		if err := store.CheckStatus(q.Status); err != nil {
			problems = append(problems, "status: "+err.Error())
		}
	}
	var err error
	if f.Since, err = ParseTime(q.Since, now); err != nil {
		problems = append(problems, "since: "+err.Error())
	}
	if f.Until, err = ParseTime(q.Until, now); err != nil {
		problems = append(problems, "until: "+err.Error())
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since) {
		problems = append(problems, fmt.Sprintf("until (%s) must be after since (%s)",
			f.Until.Format(time.RFC3339), f.Since.Format(time.RFC3339)))
	}
	if q.Cursor != "" {
		if f.AfterID, err = DecodeCursor(q.Cursor); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if q.Limit != "" {
		n, err := strconv.Atoi(q.Limit)
		if err != nil || n < 1 || n > MaxPageLimit {
			problems = append(problems, fmt.Sprintf("limit: want a whole number from 1 to %d, got %q", MaxPageLimit, q.Limit))
		}
		f.Limit = n
	}
	if len(problems) > 0 {
		return store.MessageFilter{}, errors.New(strings.Join(problems, "; "))
	}
	return f, nil
}

// ParseTime reads an RFC 3339 time (2024-05-01T12:00:00Z) or a duration before now
// (90m, 2h, 36h); "" is the zero time (no bound).
func ParseTime(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time such as 2024-05-01T12:00:00Z "+
		"nor a positive duration before now such as 90m or 2h", s)
}

// textProblem says why s cannot be a stream name, or "": PostgreSQL text holds neither
// NUL nor invalid UTF-8, and passing either on would turn a client's mistake into a
// database error.
func textProblem(s string) string {
	switch {
	case strings.IndexByte(s, 0) >= 0:
		return "contains a NUL character, which no stream name holds"
	case !utf8.ValidString(s):
		return "is not valid UTF-8"
	}
	return ""
}

// SkipRequest is the body of POST /api/v1/messages/skip, and what `outboxd skip` asks:
// either IDs, or a Stream and a Key, whose head (its first message not yet delivered)
// is skipped. Key is a pointer so that the empty key can be named.
type SkipRequest struct {
	IDs    []int64 `json:"ids,omitempty"`
	Stream string  `json:"stream,omitempty"`
	Key    *string `json:"key,omitempty"`
}

// SkipResponse is the answer to a skip, and `outboxd skip --json`. ID is the head a skip
// by stream and key skipped.
type SkipResponse struct {
	Skipped int64 `json:"skipped"`
	ID      int64 `json:"id,omitempty"`
}

// Check refuses a request that names no messages, or names them both ways, saying why.
func (r SkipRequest) Check() error {
	keyed := r.Stream != "" || r.Key != nil
	switch {
	case r.IDs != nil && keyed:
		return errors.New("give either ids or a stream and a key, not both")
	case r.IDs != nil:
		if len(r.IDs) == 0 || len(r.IDs) > store.MaxRequeueBatch {
			return fmt.Errorf("ids: want 1 to %d ids, got %d", store.MaxRequeueBatch, len(r.IDs))
		}
		for _, id := range r.IDs {
			if id < 1 {
				return fmt.Errorf("ids: %d is not a message id (ids are positive)", id)
			}
		}
		return nil
	case r.Stream == "" && r.Key == nil:
		return errors.New(`name the messages to skip: {"ids": [...]}, or {"stream": "...", "key": "..."} for the head of a key`)
	case r.Stream == "":
		return errors.New("key: the head of a key is named with its stream too; give stream")
	case r.Key == nil:
		return errors.New("stream: the head to skip is named with its key too; give key")
	}
	var problems []string
	if msg := textProblem(r.Stream); msg != "" {
		problems = append(problems, "stream: "+msg)
	}
	if msg := textProblem(*r.Key); msg != "" {
		problems = append(problems, "key: "+strings.Replace(msg, "stream name", "key", 1))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// Skipper is what Skip changes.
type Skipper interface {
	Skip(ctx context.Context, ids []int64) (int64, error)
	SkipHead(ctx context.Context, stream, key string) (id int64, ok bool, err error)
}

// Skip skips what req names: each of its IDs that is failed (and not yet skipped) or
// pending, or the head of its Stream's Key when that head is failed or pending. A
// request that does not Check is refused (400); one that skips nothing is refused
// (409) naming why, since an operator who asked for a skip expects one.
func Skip(ctx context.Context, st Skipper, req SkipRequest) (SkipResponse, error) {
	if err := req.Check(); err != nil {
		return SkipResponse{}, badRequest("%v", err)
	}
	if req.IDs != nil {
		n, err := st.Skip(ctx, req.IDs)
		if err != nil {
			return SkipResponse{}, err
		}
		if n == 0 {
			return SkipResponse{}, &requestError{status: http.StatusConflict, msg: nothingSkipped(req.IDs)}
		}
		return SkipResponse{Skipped: n}, nil
	}
	id, ok, err := st.SkipHead(ctx, req.Stream, *req.Key)
	if err != nil {
		return SkipResponse{}, err
	}
	if !ok {
		return SkipResponse{}, &requestError{status: http.StatusConflict, msg: fmt.Sprintf(
			"key %q of stream %q has no head to skip: its head is leased (being published right now: try again "+
				"in a moment), or has never failed (skip by id to give up on a message that was never tried), or nothing "+
				"of the key is waiting (every message delivered or skipped, or no such stream or key)",
			*req.Key, req.Stream)}
	}
	return SkipResponse{Skipped: 1, ID: id}, nil
}

func nothingSkipped(ids []int64) string {
	const why = "a message is skipped only while failed (and not skipped yet) or pending; one that is leased " +
		"(being published right now: try again in a moment), delivered or already skipped, or that does not exist, is left alone"
	if len(ids) == 1 {
		return fmt.Sprintf("message %d was not skipped: %s", ids[0], why)
	}
	return fmt.Sprintf("none of the %d messages named was skipped: %s", len(ids), why)
}
