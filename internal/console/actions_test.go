package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/config"
)

func TestAPostWithoutItsCSRFTokenIsRefused(t *testing.T) {
	t.Parallel()
	f := setup(t, config.UIOn)
	id := f.insert(t, "orders", "k", nil, []byte(`{}`))
	f.fail(t, id, "broken")
	c := f.client(t)
	csrf := c.login(t, adminToken)
	for _, tc := range []struct {
		name string
		form url.Values
	}{
		{"A form without a CSRF token is refused.", url.Values{"action": {"requeue"}, "id": {itoa(id)}}},
		{"A form with another session's CSRF token is refused.", url.Values{"csrf": {csrf + "x"}, "action": {"requeue"}, "id": {itoa(id)}}},
		{"A form with an empty CSRF token is refused.", url.Values{"csrf": {""}, "action": {"requeue"}, "id": {itoa(id)}}},
	} {
		for _, path := range []string{"/ui/confirm", "/ui/act"} {
			if p := c.do(t, "POST", path, tc.form); p.status != http.StatusForbidden || !strings.Contains(p.body, "CSRF") {
				t.Errorf("%s POST %s: %d %s, want 403 naming the CSRF token", tc.name, path, p.status, p.body)
			}
		}
	}
	if p := c.do(t, "POST", "/ui/logout", nil); p.status != http.StatusForbidden {
		t.Errorf("logout without the CSRF token: %d, want 403", p.status)
	}
	if s := f.status(t, id); s != "failed" {
		t.Fatalf("after refused posts the message is %s, want still failed", s)
	}
}

func TestAPostFromAnotherOriginIsRefused(t *testing.T) {
	t.Parallel()
	f := setup(t, config.UIOn)
	c := f.client(t)
	csrf := c.login(t, adminToken)
	req, err := http.NewRequestWithContext(f.ctx, "POST", f.srv.URL+"/ui/act",
		strings.NewReader(url.Values{"csrf": {csrf}, "action": {"requeue"}, "id": {"1"}}.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://evil.example")
	res, err := c.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Fatalf("a post with Origin https://evil.example: %d, want 403", res.StatusCode)
	}
}

// TestAReadSessionOrAReadOnlyConsoleRefusesActions: the read token looks but does not
// act, and in readonly mode neither token acts; nothing changes either way.
func TestAReadSessionOrAReadOnlyConsoleRefusesActions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, mode, token, why string
	}{
		{"A session of the read token cannot act.", config.UIOn, readToken, "read token"},
		{"The admin token cannot act in a read-only console.", config.UIReadonly, adminToken, "read-only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t, tc.mode)
			id := f.insert(t, "orders", "k", nil, []byte(`{}`))
			f.fail(t, id, "broken")
			c := f.client(t)
			csrf := c.login(t, tc.token)
			if p := c.get(t, "/ui/message?id="+itoa(id)); p.status != http.StatusOK || strings.Contains(p.body, `action="/ui/confirm"`) {
				t.Errorf("the message page: %d, offers an action: %v", p.status, strings.Contains(p.body, `action="/ui/confirm"`))
			}
			for _, path := range []string{"/ui/confirm", "/ui/act"} {
				p := c.do(t, "POST", path, url.Values{"csrf": {csrf}, "action": {"requeue"}, "id": {itoa(id)}})
				if p.status != http.StatusForbidden || !strings.Contains(p.body, tc.why) {
					t.Errorf("POST %s: %d %s, want 403 naming %q", path, p.status, p.body, tc.why)
				}
			}
			if s := f.status(t, id); s != "failed" {
				t.Fatalf("the message is %s, want still failed", s)
			}
		})
	}
}

// TestARequeueShowsItsCountThenChangesOnlyWhenConfirmed: the confirmation counts and
// changes nothing; the confirmed action requeues through ops and is logged with who.
func TestARequeueShowsItsCountThenChangesOnlyWhenConfirmed(t *testing.T) {
	t.Parallel()
	f := setup(t, config.UIOn)
	var ids []int64
	for range 3 {
		id := f.insert(t, "orders", "k", nil, []byte(`{}`))
		f.fail(t, id, "broken")
		ids = append(ids, id)
	}
	c := f.client(t)
	csrf := c.login(t, adminToken)
	form := url.Values{"csrf": {csrf}, "action": {"requeue"}, "stream": {"orders"}, "since": {""}, "until": {""}}
	p := c.do(t, "POST", "/ui/confirm", form)
	if p.status != http.StatusOK || !strings.Contains(p.body, "<strong>3</strong> message(s)") {
		t.Fatalf("confirm a requeue of the stream: %d %s, want 200 counting 3", p.status, p.body)
	}
	if s := f.status(t, ids[0]); s != "failed" {
		t.Fatalf("after the confirmation page the message is %s, want still failed", s)
	}
	p = c.do(t, "POST", "/ui/act", form)
	if p.status != http.StatusOK || !strings.Contains(p.body, "requeued 3 message(s)") {
		t.Fatalf("requeue: %d %s, want 200 and 3 requeued", p.status, p.body)
	}
	for _, id := range ids {
		if s := f.status(t, id); s != "pending" {
			t.Errorf("message %d after the requeue: %s, want pending", id, s)
		}
	}
	if logs := f.logs.String(); !strings.Contains(logs, `"msg":"console action","component":"console","action":"requeue","by":"admin"`) {
		t.Errorf("the requeue was not logged with who did it: %s", logs)
	}

	// One message, from its page.
	f.fail(t, ids[0], "again")
	p = c.get(t, "/ui/message?id="+itoa(ids[0]))
	if !strings.Contains(p.body, `name="action" value="requeue"`) {
		t.Fatalf("a failed message's page offers no requeue: %s", p.body)
	}
	p = c.do(t, "POST", "/ui/act", url.Values{"csrf": {csrf}, "action": {"requeue"}, "id": {itoa(ids[0])}})
	if p.status != http.StatusOK || f.status(t, ids[0]) != "pending" {
		t.Fatalf("requeue of one message: %d %s, status %s", p.status, p.body, f.status(t, ids[0]))
	}
}

func TestSkippingTheHeadOfAKeyNeedsItToBeFailed(t *testing.T) {
	t.Parallel()
	f := setup(t, config.UIOn)
	head := f.insert(t, "payments", "acct-1", nil, []byte(`{}`))
	next := f.insert(t, "payments", "acct-1", nil, []byte(`{}`))
	c := f.client(t)
	csrf := c.login(t, adminToken)
	form := url.Values{"csrf": {csrf}, "action": {"skip"}, "stream": {"payments"}, "key": {"acct-1"}}
	if p := c.do(t, "POST", "/ui/act", form); p.status != http.StatusConflict {
		t.Fatalf("skip of a head that never failed: %d %s, want 409", p.status, p.body)
	}
	f.fail(t, head, "poison")
	if p := c.do(t, "POST", "/ui/confirm", form); p.status != http.StatusOK || !strings.Contains(p.body, "skip the head of key &#34;acct-1&#34;") {
		t.Fatalf("confirm a skip: %d %s", p.status, p.body)
	}
	if p := c.do(t, "POST", "/ui/act", form); p.status != http.StatusOK || !strings.Contains(p.body, "skipped message "+itoa(head)) {
		t.Fatalf("skip: %d %s", p.status, p.body)
	}
	if s := f.status(t, next); s != "pending" {
		t.Errorf("the message behind the head: %s, want pending", s)
	}
}

func TestAReplayConfirmationCountsTheDeliveredMessages(t *testing.T) {
	t.Parallel()
	f := setup(t, config.UIOn)
	for range 4 {
		id := f.insert(t, "orders", "k", nil, []byte(`{}`))
		f.exec(t, `UPDATE {{table}} SET status = 'delivered', published_at = now() WHERE id = $1`, id)
	}
	c := f.client(t)
	csrf := c.login(t, adminToken)
	form := url.Values{"csrf": {csrf}, "action": {"replay"}, "stream": {"orders"}, "since": {""}, "until": {""}}
	if p := c.do(t, "POST", "/ui/confirm", form); p.status != http.StatusOK || !strings.Contains(p.body, "<strong>4</strong> message(s)") {
		t.Fatalf("confirm a replay: %d %s, want 4 counted", p.status, p.body)
	}
	p := c.do(t, "POST", "/ui/act", form)
	if p.status != http.StatusOK || !strings.Contains(p.body, "done, 4 of 4 copied") {
		t.Fatalf("replay: %d %s", p.status, p.body)
	}
	var pending int
	if err := f.pg.Pool.QueryRow(f.ctx, `SELECT count(*) FROM `+f.pg.Table.Qualified()+` WHERE status = 'pending'`).Scan(&pending); err != nil {
		t.Fatal(err)
	}
	if pending != 4 {
		t.Fatalf("after the replay %d pending copies, want 4", pending)
	}
}

func TestStreamsAndMessagesPagesShowTheOutbox(t *testing.T) {
	t.Parallel()
	f := setup(t, config.UIOn)
	id := f.insert(t, "orders", "k", nil, []byte(`{}`))
	f.fail(t, id, "broken")
	f.insert(t, "orders", "k", nil, []byte(`{}`))
	c := f.client(t)
	c.login(t, readToken)
	for _, path := range []string{"/ui/streams", "/ui/streams/table"} {
		p := c.get(t, path)
		for _, want := range []string{"Outbox main", "<td>orders</td>", `class="breaker-open">open`, "status=failed\">1</a>", "<td>payments</td>"} {
			if !strings.Contains(p.body, want) {
				t.Errorf("GET %s: %d, no %q in\n%s", path, p.status, want, p.body)
			}
		}
	}
	p := c.get(t, "/ui/messages?stream=orders&status=failed")
	if p.status != http.StatusOK || !strings.Contains(p.body, "broken") || strings.Count(p.body, "/ui/message?") != 1 {
		t.Errorf("the failed messages of orders: %d\n%s", p.status, p.body)
	}
	p = c.get(t, "/ui/messages?status=bogus&since=yesterday")
	if p.status != http.StatusBadRequest || !strings.Contains(p.body, "status:") || !strings.Contains(p.body, "since:") {
		t.Errorf("a bad filter: %d, want 400 naming status and since\n%s", p.status, p.body)
	}
	if p := c.get(t, "/ui/message?id=999999"); p.status != http.StatusConflict {
		t.Errorf("a message that does not exist: %d, want 409", p.status)
	}
	if p := c.get(t, "/ui/static/console.js"); p.status != http.StatusOK {
		t.Errorf("the script: %d", p.status)
	}
}

// TestAMessageOfAnUnorderedStreamIsSkippedByItsID: only an ordered stream has a head
// to skip; elsewhere the page offers the message itself.
func TestAMessageOfAnUnorderedStreamIsSkippedByItsID(t *testing.T) {
	t.Parallel()
	f := setup(t, config.UIOn)
	id := f.insert(t, "orders", "k", nil, []byte(`{}`))
	f.fail(t, id, "poison")
	head := f.insert(t, "payments", "acct-1", nil, []byte(`{}`))
	f.fail(t, head, "poison")
	c := f.client(t)
	csrf := c.login(t, adminToken)
	if p := c.get(t, "/ui/message?id="+itoa(id)); !strings.Contains(p.body, "Skip this message") || strings.Contains(p.body, "Skip the head") {
		t.Errorf("a failed message of an unordered stream should offer to skip itself, not a head:\n%s", p.body)
	}
	if p := c.get(t, "/ui/message?id="+itoa(head)); !strings.Contains(p.body, "Skip the head of this key") {
		t.Errorf("a failed head of an ordered stream should offer to skip the head:\n%s", p.body)
	}
	form := url.Values{"csrf": {csrf}, "action": {"skip"}, "id": {itoa(id)}}
	if p := c.do(t, "POST", "/ui/confirm", form); p.status != http.StatusOK || !strings.Contains(p.body, "skip message "+itoa(id)) {
		t.Fatalf("confirm a skip by id: %d %s", p.status, p.body)
	}
	if p := c.do(t, "POST", "/ui/act", form); p.status != http.StatusOK || !strings.Contains(p.body, "skipped 1 message(s)") {
		t.Fatalf("skip by id: %d %s", p.status, p.body)
	}
	var skipped bool
	if err := f.pg.Pool.QueryRow(f.ctx, `SELECT skipped_at IS NOT NULL FROM `+f.pg.Table.Qualified()+` WHERE id = $1`, id).Scan(&skipped); err != nil {
		t.Fatal(err)
	}
	if !skipped {
		t.Fatalf("message %d after a skip by id is not skipped", id)
	}
}
