package admin_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/admin"
)

const readToken = "read-token-0123456789abcdef"

func withBothTokens(o *admin.Options) { o.AdminToken, o.ReadToken = token, readToken }

// reads are the API's GET endpoints; each lists rows or counts an outsider must not see.
var reads = []string{"/api/v1/stats", "/api/v1/messages"}

// A listing leaks keys, topics, owners and last_error texts: with a token configured,
// nothing of it is answered to a request that presents none, or a wrong one.
func TestEveryAPIReadNeedsATokenOnceOneIsConfigured(t *testing.T) {
	t.Parallel()
	f := setup(t, withBothTokens)
	ids := f.insert(t, "orders", 1)
	f.fail(t, ids...)
	for _, path := range reads {
		for _, c := range []struct {
			name   string
			header []string
			want   string
		}{
			{"no Authorization header", nil, "needs the header Authorization: Bearer"},
			{"another scheme", []string{"Authorization", "Basic " + readToken}, "needs the header Authorization: Bearer"},
			{"a wrong token", bearer("read-token-0123456789abcdeX"), "does not match"},
			{"a prefix of the read token", bearer(readToken[:20]), "does not match"},
			{"the read token with a byte more", bearer(readToken + "x"), "does not match"},
		} {
			res := f.do(t, "GET", path, "", c.header...)
			if res.Status != http.StatusUnauthorized || !strings.Contains(res.errorText(t), c.want) ||
				res.Header.Get("WWW-Authenticate") == "" {
				t.Fatalf("GET %s with %s: status %d %.300s; want 401 saying %q", path, c.name, res.Status, res.Body, c.want)
			}
			if strings.Contains(res.Body, "NOT_ENOUGH_REPLICAS") || strings.Contains(res.Body, `"orders"`) {
				t.Fatalf("GET %s with %s leaked rows: %s", path, c.name, res.Body)
			}
		}
		for name, tok := range map[string]string{"the read token": readToken, "the admin token": token} {
			if res := f.do(t, "GET", path, "", bearer(tok)...); res.Status != http.StatusOK {
				t.Fatalf("GET %s with %s: status %d %.300s; want 200", path, name, res.Status, res.Body)
			}
		}
	}
	// Probes and metrics stay open: an orchestrator and a scraper hold no token.
	for _, path := range []string{"/healthz", "/readyz"} {
		if res := f.do(t, "GET", path, ""); res.Status != http.StatusOK {
			t.Fatalf("GET %s without a token: %d %s; want 200", path, res.Status, res.Body)
		}
	}
	if strings.Contains(f.logs.String(), readToken[:20]) {
		t.Fatalf("a presented token reached the log:\n%s", f.logs)
	}
}

func TestTheReadTokenChangesNothing(t *testing.T) {
	t.Parallel()
	f := setup(t, func(o *admin.Options) {
		withOrderedStreams(o)
		o.ReadToken = readToken
	})
	ids := f.insert(t, "orders", 2)
	f.fail(t, ids...)
	for _, c := range []struct{ path, body string }{
		{"/api/v1/messages/requeue", fmt.Sprintf(`{"ids": [%d]}`, ids[0])},
		{"/api/v1/messages/skip", fmt.Sprintf(`{"ids": [%d]}`, ids[1])},
	} {
		res := f.do(t, "POST", c.path, c.body, bearer(readToken)...)
		if res.Status != http.StatusForbidden || !strings.Contains(res.errorText(t), "the read token cannot change anything") {
			t.Fatalf("POST %s with the read token: %d %s; want 403 saying the read token cannot change anything", c.path, res.Status, res.Body)
		}
	}
	if s := f.state(t, ids[0]); s.Status != "failed" || f.skippedAt(t, ids[1]) != nil {
		t.Fatalf("a write with the read token changed a row: %+v", s)
	}
	if res := f.do(t, "POST", "/api/v1/messages/requeue", fmt.Sprintf(`{"ids": [%d]}`, ids[0]), bearer(token)...); res.Status != http.StatusOK {
		t.Fatalf("requeue with the admin token beside a read token: %d %s", res.Status, res.Body)
	}
}

// What each configuration of tokens admits: reads and writes, without a token, with the
// read token and with the admin token.
func TestEachTokenConfigurationAdmitsWhatTheDocsSay(t *testing.T) {
	t.Parallel()
	const (
		open = iota
		unauthorized
		forbidden
	)
	cases := []struct {
		name        string
		admin, read string
		// read and write outcomes for: no token, the read token, the admin token.
		reads, writes [3]int
	}{
		{"With no token configured reads are open and writes refused", "", "",
			[3]int{open, open, open}, [3]int{forbidden, forbidden, forbidden}},
		{"With only a read token reads need it and writes are refused", "", readToken,
			[3]int{unauthorized, open, unauthorized}, [3]int{forbidden, forbidden, forbidden}},
		{"With only an admin token everything needs it", token, "",
			[3]int{unauthorized, unauthorized, open}, [3]int{unauthorized, unauthorized, open}},
		{"With both tokens reads take either and writes the admin token", token, readToken,
			[3]int{unauthorized, open, open}, [3]int{unauthorized, forbidden, open}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			g := setup(t, func(o *admin.Options) { o.AdminToken, o.ReadToken = config.Secret(c.admin), config.Secret(c.read) })
			ids := g.insert(t, "orders", 1)
			g.fail(t, ids...)
			headers := [3][]string{nil, bearer(readToken), bearer(token)}
			who := [3]string{"no token", "the read token", "the admin token"}
			check := func(method, path, body string, header []string, outcome int, label string) {
				t.Helper()
				res := g.do(t, method, path, body, header...)
				switch outcome {
				case open:
					if res.Status != http.StatusOK {
						t.Fatalf("%s %s with %s: %d %.300s; want 200", method, path, label, res.Status, res.Body)
					}
				case unauthorized:
					if res.Status != http.StatusUnauthorized {
						t.Fatalf("%s %s with %s: %d %.300s; want 401", method, path, label, res.Status, res.Body)
					}
				case forbidden:
					if res.Status != http.StatusForbidden {
						t.Fatalf("%s %s with %s: %d %.300s; want 403", method, path, label, res.Status, res.Body)
					}
				}
			}
			for i := range headers {
				for _, path := range reads {
					check("GET", path, "", headers[i], c.reads[i], who[i])
				}
				// A requeue of a pending id changes nothing even when admitted, so the
				// cases stay independent.
				check("POST", "/api/v1/messages/requeue", `{"ids": [999999]}`, headers[i], c.writes[i], who[i])
			}
			if s := g.state(t, ids[0]); s.Status != "failed" {
				t.Fatalf("row changed: %+v", s)
			}
		})
	}
}
