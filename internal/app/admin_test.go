package app

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/config"
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
