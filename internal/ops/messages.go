package ops

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"time"

	"github.com/outboxd/outboxd/store"
)

// Paging limits of the message listing.
const (
	DefaultPageLimit = 100
	MaxPageLimit     = 1000
)

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
// NextCursor is set when more rows match: pass it as cursor to get them. Scanned is
// set when the query filtered by something no index covers (MessageQuery.Scans): the
// page then examined at most ScanBudget rows, and NextCursor is also set when the
// budget ran out before the page filled (more may match).
type MessagePage struct {
	Messages   []Message `json:"messages"`
	NextCursor string    `json:"next_cursor,omitempty"`
	Scanned    int64     `json:"scanned,omitempty"`
}

// ScanBudget is how many rows one page with a filter no index covers examines at most.
const ScanBudget = 10000

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

// MessageQuery is a listing request as text, from URL parameters or command-line flags.
// FromID and ToID bound the ids (both included); Key and Topic match exactly; Error is
// a case-insensitive substring of the last error.
type MessageQuery struct {
	Status, Stream, Since, Until, Cursor, Limit string
	FromID, ToID, Key, Topic, Error             string
}

// Scans says whether q filters by something no index covers, so that a page examines
// a bounded number of rows (ScanBudget): key, topic or error text always; stream or
// creation time unless the status is a backlog one, whose partial indexes lead with
// the stream and hold few rows.
func (q MessageQuery) Scans() bool {
	switch q.Status {
	case "pending", "leased", "failed", "expired":
		return q.Key != "" || q.Topic != "" || q.Error != ""
	}
	return q.Key != "" || q.Topic != "" || q.Error != "" || q.Stream != "" || q.Since != "" || q.Until != ""
}

// Check refuses a query ListMessages would refuse, naming every problem.
func (q MessageQuery) Check(now time.Time) error {
	_, err := q.filter(now)
	return err
}

// filter checks every field and returns the store filter, or every problem found,
// each naming its field. Relative times count back from now.
func (q MessageQuery) filter(now time.Time) (store.ScanFilter, error) {
	f := store.ScanFilter{MessageFilter: store.MessageFilter{Stream: q.Stream, Status: q.Status, Limit: DefaultPageLimit},
		Key: q.Key, Topic: q.Topic, ErrorContains: q.Error, Scan: ScanBudget}
	var found []string
	for _, t := range []struct{ name, v string }{{"stream", q.Stream}, {"key", q.Key}, {"topic", q.Topic}, {"error", q.Error}} {
		if msg := textProblem(t.v); msg != "" {
			found = append(found, t.name+": "+msg)
		}
	}
	from, fromErr := idBound("from_id", q.FromID)
	to, toErr := idBound("to_id", q.ToID)
	for _, err := range []error{fromErr, toErr} {
		if err != nil {
			found = append(found, err.Error())
		}
	}
	if from > 0 && to > 0 && to < from {
		found = append(found, fmt.Sprintf("to_id (%d) must not be below from_id (%d)", to, from))
	}
	f.ToID = to
	if q.Status != "" {
		if err := store.CheckStatus(q.Status); err != nil {
			found = append(found, "status: "+err.Error())
		}
	}
	var err error
	if f.Since, err = ParseTime(q.Since, now); err != nil {
		found = append(found, "since: "+err.Error())
	}
	if f.Until, err = ParseTime(q.Until, now); err != nil {
		found = append(found, "until: "+err.Error())
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since) {
		found = append(found, fmt.Sprintf("until (%s) must be after since (%s)",
			f.Until.Format(time.RFC3339), f.Since.Format(time.RFC3339)))
	}
	if q.Cursor != "" {
		if f.AfterID, err = decodeCursor(q.Cursor); err != nil {
			found = append(found, err.Error())
		}
	}
	f.AfterID = max(f.AfterID, from-1)
	if q.Limit != "" {
		n, err := strconv.Atoi(q.Limit)
		if err != nil || n < 1 || n > MaxPageLimit {
			found = append(found, fmt.Sprintf("limit: want a whole number from 1 to %d, got %q", MaxPageLimit, q.Limit))
		}
		f.Limit = n
	}
	if err := problems(found); err != nil {
		return store.ScanFilter{}, err
	}
	return f, nil
}

// idBound reads an id bound of a filter: empty, or a whole number from 1.
func idBound(name, v string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil || id < 1 {
		return 0, fmt.Errorf("%s: want a message id, a whole number from 1, got %q", name, v)
	}
	return id, nil
}

// ListMessages reads one page of what q matches (q.Limit rows at most) and the cursor
// of the next page, if any row is left: it asks for one row more than it returns.
func (o *Ops) ListMessages(ctx context.Context, q MessageQuery) (MessagePage, error) {
	f, err := q.filter(o.now())
	if err != nil {
		return MessagePage{}, err
	}
	limit := f.Limit
	f.Limit++
	var rows []store.MessageSummary
	var scan store.ScanPage
	if q.Scans() {
		scan, err = o.store.ScanMessages(ctx, f)
		rows = scan.Rows
	} else {
		rows, err = o.store.ListMessages(ctx, f.MessageFilter)
	}
	if err != nil {
		return MessagePage{}, err
	}
	page := MessagePage{Messages: make([]Message, 0, min(len(rows), limit)), Scanned: scan.Scanned}
	for i, r := range rows {
		if i == limit {
			page.NextCursor = encodeCursor(rows[i-1].ID)
			break
		}
		page.Messages = append(page.Messages, newMessage(r))
	}
	if page.NextCursor == "" && scan.Scanned == int64(f.Scan) && scan.LastScanned > 0 {
		page.NextCursor = encodeCursor(scan.LastScanned) // the budget ran out: more may match
	}
	return page, nil
}

// encodeCursor makes the opaque cursor that resumes a listing after id.
func encodeCursor(id int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(id, 10)))
}

// decodeCursor reads a cursor made by encodeCursor.
func decodeCursor(c string) (int64, error) {
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
