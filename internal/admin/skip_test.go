package admin_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/admin"
	"github.com/outboxd/outboxd/internal/ops"
)

// insertKeyed writes n rows of stream under key, in id order, and returns their ids.
func (f *fixture) insertKeyed(t *testing.T, stream, key string, n int) []int64 {
	t.Helper()
	rows, err := f.pg.Pool.Query(f.ctx, `INSERT INTO `+f.pg.Table.Qualified()+` (stream, topic, key, payload)
		SELECT $1, 'topic', $2, '\x00' FROM generate_series(1, $3) g ORDER BY g RETURNING id`, stream, key, n)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	return ids
}

func (f *fixture) skippedAt(t *testing.T, id int64) *time.Time {
	t.Helper()
	var at *time.Time
	if err := f.pg.Pool.QueryRow(f.ctx, `SELECT skipped_at FROM `+f.pg.Table.Qualified()+` WHERE id = $1`, id).Scan(&at); err != nil {
		t.Fatal(err)
	}
	return at
}

func (f *fixture) deliver(t *testing.T, ids ...int64) {
	t.Helper()
	if _, err := f.pg.Pool.Exec(f.ctx, `UPDATE `+f.pg.Table.Qualified()+`
		SET status = 'delivered', published_at = now() WHERE id = ANY ($1)`, ids); err != nil {
		t.Fatal(err)
	}
}

func withOrderedStreams(o *admin.Options) {
	o.AdminToken = token
	o.Streams = []ops.Stream{{Name: "orders", Driver: "bus", Ordered: true}, {Name: "payments", Driver: "bus"}}
}

func TestSkipIsRefusedWithoutTheTokenAndSkipsAKeysHeadOrNamedMessagesWithIt(t *testing.T) {
	t.Parallel()
	f := setup(t, withOrderedStreams)
	stuck := f.insertKeyed(t, "orders", "order-42", 4)
	head, behind := stuck[0], stuck[1:]
	f.fail(t, head)
	body := `{"stream": "orders", "key": "order-42"}`

	for _, c := range []struct {
		name   string
		header []string
		want   string
	}{
		{"no Authorization header", nil, "needs the header Authorization: Bearer"},
		{"a wrong token", bearer("admin-token-0123456789abcdeX"), "does not match http.admin_token"},
	} {
		res := f.do(t, "POST", "/api/v1/messages/skip", body, c.header...)
		if res.Status != http.StatusUnauthorized || !strings.Contains(res.errorText(t), c.want) ||
			res.Header.Get("WWW-Authenticate") == "" {
			t.Fatalf("%s: status %d %s; want 401 saying %q", c.name, res.Status, res.Body, c.want)
		}
	}
	if at := f.skippedAt(t, head); at != nil {
		t.Fatalf("a refused skip skipped the head at %v", at)
	}

	// The stats of the ordered stream show the blocked key; the other stream has no such counts.
	stats := func() map[string]ops.StreamStats {
		t.Helper()
		res := f.do(t, "GET", "/api/v1/stats", "", bearer(token)...)
		var st ops.Stats
		res.decode(t, &st)
		out := map[string]ops.StreamStats{}
		for _, s := range st.Streams {
			out[s.Stream] = s
		}
		if res.Status != http.StatusOK || strings.Count(res.Body, `"blocked_keys"`) != 1 {
			t.Fatalf("stats: %d %s; want blocked counts for the one ordered stream", res.Status, res.Body)
		}
		return out
	}
	if s := stats()["orders"]; !s.Ordered || s.BlockedKeys == nil || *s.BlockedKeys != 1 || *s.BlockedMessages != 3 {
		t.Fatalf("stats of the ordered stream with a failed head: %+v; want 1 blocked key, 3 messages behind", s)
	}

	res := f.do(t, "POST", "/api/v1/messages/skip", body, bearer(token)...)
	var got ops.SkipResult
	res.decode(t, &got)
	if res.Status != http.StatusOK || got != (ops.SkipResult{Skipped: 1, ID: head}) {
		t.Fatalf("skip by key: %d %s; want 200 skipping %d", res.Status, res.Body, head)
	}
	if s := f.state(t, head); s.Status != "failed" || f.skippedAt(t, head) == nil || s.LastError == nil || *s.LastError != "NOT_ENOUGH_REPLICAS" {
		t.Fatalf("the skipped head: %+v; want failed, skipped, its last_error kept", s)
	}
	for _, id := range behind {
		if s := f.state(t, id); s.Status != "pending" {
			t.Fatalf("a message behind the skipped head changed: %+v", s)
		}
	}
	if s := stats()["orders"]; *s.BlockedKeys != 0 || *s.BlockedMessages != 0 {
		t.Fatalf("stats after the skip: %+v; want 0 blocked", s)
	}
	if !strings.Contains(f.logs.String(), "skipped messages") || strings.Contains(f.logs.String(), token) {
		t.Fatalf("a skip must leave a trace in the log, and no token:\n%s", f.logs)
	}

	// By ids: the failed one is skipped, the delivered one left alone.
	other := f.insertKeyed(t, "orders", "order-7", 2)
	f.fail(t, other[0])
	f.deliver(t, other[1])
	res = f.do(t, "POST", "/api/v1/messages/skip", fmt.Sprintf(`{"ids": [%d, %d]}`, other[0], other[1]), bearer(token)...)
	got = ops.SkipResult{}
	res.decode(t, &got)
	if res.Status != http.StatusOK || got != (ops.SkipResult{Skipped: 1}) {
		t.Fatalf("skip by ids: %d %s; want 1 skipped", res.Status, res.Body)
	}
	if f.skippedAt(t, other[0]) == nil || f.skippedAt(t, other[1]) != nil || f.state(t, other[1]).Status != "delivered" {
		t.Fatal("skip by ids skipped the wrong rows")
	}

	// Nothing to skip: a key whose head is leased, a key with nothing waiting, messages
	// that cannot be skipped.
	leased := f.insertKeyed(t, "orders", "in-flight", 2)
	f.setLeased(t, leased[0])
	for _, c := range []struct {
		name, body, want string
	}{
		{"a key whose head is being published", `{"stream": "orders", "key": "in-flight"}`, `key "in-flight" of stream "orders" has no head to skip: its head is leased`},
		{"a key nothing of which waits", `{"stream": "orders", "key": "nobody"}`, "has no head to skip"},
		{"an id that is delivered", fmt.Sprintf(`{"ids": [%d]}`, other[1]), fmt.Sprintf("message %d was not skipped", other[1])},
		{"ids already skipped", fmt.Sprintf(`{"ids": [%d, %d]}`, head, other[0]), "none of the 2 messages named was skipped"},
	} {
		res := f.do(t, "POST", "/api/v1/messages/skip", c.body, bearer(token)...)
		if res.Status != http.StatusConflict || !strings.Contains(res.errorText(t), c.want) {
			t.Fatalf("%s: %d %s; want 409 saying %q", c.name, res.Status, res.Body, c.want)
		}
	}
	if s := f.state(t, leased[0]); s.Status != "leased" || f.skippedAt(t, leased[1]) != nil {
		t.Fatal("a refused skip changed the leased key")
	}
}

func (f *fixture) setLeased(t *testing.T, ids ...int64) {
	t.Helper()
	if _, err := f.pg.Pool.Exec(f.ctx, `UPDATE `+f.pg.Table.Qualified()+`
		SET status = 'leased', lease_token = gen_random_uuid(), owner = 'elsewhere', lease_until = now() + interval '1 minute'
		WHERE id = ANY ($1)`, ids); err != nil {
		t.Fatal(err)
	}
}

func TestSkipIsDisabledWhenNoTokenIsConfigured(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	ids := f.insertKeyed(t, "orders", "order-42", 2)
	f.fail(t, ids[0])
	for _, header := range [][]string{nil, bearer(token)} {
		res := f.do(t, "POST", "/api/v1/messages/skip", `{"stream": "orders", "key": "order-42"}`, header...)
		if res.Status != http.StatusForbidden || !strings.Contains(res.errorText(t), "requeue and skip over HTTP") {
			t.Fatalf("status %d %s; want 403 saying mutation is disabled", res.Status, res.Body)
		}
	}
	if at := f.skippedAt(t, ids[0]); at != nil {
		t.Fatalf("row skipped with mutation disabled at %v", at)
	}
}
