package app

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/testenv"
)

// With no token configured the API's reads are open, which is what docs/security.md
// promises for the loopback default; on any other address outboxd run says so at start.
func TestOpenReadsOffLoopbackAreWarnedAboutAtStart(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		addr, read string
		warned     bool
	}{
		{"Open reads on every interface are warned about", "0.0.0.0:0", "", true},
		{"Open reads on loopback are not", "127.0.0.1:0", "", false},
		{"A read token on every interface needs no warning", "0.0.0.0:0", "read-token-0123456789abcdef", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := config.Default()
			cfg.HTTP.Addr, cfg.HTTP.ReadToken = c.addr, config.Secret(c.read)
			var logs bytes.Buffer
			stop, err := (&adminServer{}).listen(&cfg, nil, slog.New(slog.NewJSONHandler(&logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(logs.String(), "reads are open to anyone"); got != c.warned {
				t.Fatalf("warned %v, want %v; log:\n%s", got, c.warned, logs.String())
			}
			if c.read != "" && strings.Contains(logs.String(), c.read) {
				t.Fatalf("the read token reached the log:\n%s", logs.String())
			}
		})
	}
}

// The web console is served at /ui/ on the admin address only when http.ui says so;
// off, /ui/ is the admin endpoints' (here still waiting for the database).
func TestTheWebConsoleIsServedOnlyWhenConfigured(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, ui string
		served   bool
	}{
		{"A console that is on serves its login page", config.UIOn, true},
		{"A read-only console serves its login page", config.UIReadonly, true},
		{"A console that is off is not served", config.UIOff, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := config.Default()
			cfg.HTTP.Addr, cfg.HTTP.UI, cfg.HTTP.AdminToken = "127.0.0.1:0", c.ui, "admin-token-0123456789abcdef"
			var logs testenv.SyncBuffer
			stop, err := (&adminServer{}).listen(&cfg, nil, slog.New(slog.NewJSONHandler(&logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := stop(); err != nil {
					t.Error(err)
				}
			}()
			m := regexp.MustCompile(`"msg":"admin endpoints listening","addr":"([^"]+)"`).FindStringSubmatch(logs.String())
			if m == nil {
				t.Fatalf("no listening address logged:\n%s", logs.String())
			}
			res, err := http.Get("http://" + m[1] + "/ui/login")
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(res.Body)
			res.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			served := res.StatusCode == http.StatusOK && strings.Contains(string(body), `action="/ui/login"`)
			if served != c.served {
				t.Fatalf("GET /ui/login with http.ui %s: %d %s; want the login page served: %v", c.ui, res.StatusCode, body, c.served)
			}
		})
	}
}
