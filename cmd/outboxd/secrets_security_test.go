package main

import (
	"context"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outboxd/outboxd/internal/testenv"
)

// tcpProxy forwards one local port to an upstream address until it is cut; restore
// listens on the same port again. It stands between outboxd and PostgreSQL so that a
// test can make the database unreachable mid-run.
type tcpProxy struct {
	t        *testing.T
	upstream string
	addr     string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
}

func newProxy(t *testing.T, upstream string) *tcpProxy {
	t.Helper()
	p := &tcpProxy{t: t, upstream: upstream, conns: map[net.Conn]struct{}{}}
	p.listen("127.0.0.1:0")
	t.Cleanup(p.cut)
	return p
}

func (p *tcpProxy) listen(addr string) {
	p.t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		p.t.Fatalf("proxy: listen on %s: %v", addr, err)
	}
	p.mu.Lock()
	p.ln, p.addr = ln, ln.Addr().String()
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.upstream)
			if err != nil {
				c.Close()
				continue
			}
			if !p.track(c, up) {
				return
			}
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
}

// track records a forwarded pair, unless the proxy was cut meanwhile.
func (p *tcpProxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

// cut closes the listener and every forwarded connection.
func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func (p *tcpProxy) restore() { p.listen(p.addr) }

// The secrets a deployment holds never reach a log line, a metric, an API answer or an
// error, whatever goes wrong: here the database goes away mid-run, a NATS driver and the
// Kafka driver present credentials their brokers refuse, and admin requests come with
// wrong tokens.
func TestSecretsReachNoLogMetricAPIAnswerOrErrorEvenWhenThingsFail(t *testing.T) {
	t.Parallel()
	const (
		dbPassword    = "Dbpw7c1e90secret"
		natsToken     = "Natstok4b2a77secret"
		wrongToken    = "Natsbad9d3e01secret"
		natsURLPass   = "Natsurlpw5f6c02secret"
		kafkaPassword = "Kafkapw8e1d33secret"
		adminToken    = "Admintok3a9f5b0c7e21d4secret"
		readToken     = "Readtok8c2e4f6a1b3d5secret"
		tracePassword = "Tracepw6b0e41secret"
	)
	secrets := []string{dbPassword, natsToken, wrongToken, natsURLPass, kafkaPassword, adminToken, readToken, tracePassword,
		base64.StdEncoding.EncodeToString([]byte("collector:" + tracePassword))}

	dsn := testenv.EmptyDatabase(t)
	u, err := url.Parse(dsn)
	must(t, err)
	proxy := newProxy(t, u.Host)
	u.Host, u.User = proxy.addr, url.UserPassword(u.User.Username(), dbPassword)
	natsAuth := startNATS(t, &server.Options{Authorization: natsToken})
	natsUsers := startNATS(t, &server.Options{Username: "outboxd", Password: natsURLPass})
	k, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(),
		kfake.Superuser("SCRAM-SHA-256", "outboxd", "the-right-kafka-password"), kfake.SeedTopics(1, "orders"))
	must(t, err)
	t.Cleanup(k.Close)

	environ := []string{
		"OUTBOXD_DATABASE_URL=" + u.String(),
		"OUTBOXD_REPLICA_ID=secrets-test",
		"OUTBOXD_HTTP__ADDR=127.0.0.1:0",
		"OUTBOXD_HTTP__ADMIN_TOKEN=" + adminToken,
		"OUTBOXD_HTTP__READ_TOKEN=" + readToken,
		"OUTBOXD_LOG__LEVEL=debug",
		"OUTBOXD_JANITOR__INTERVAL=200ms",
		"OUTBOXD_JANITOR__STATS_INTERVAL=200ms",
		"OUTBOXD_TRACING__ENABLED=true",
		"OUTBOXD_TRACING__ENDPOINT=http://collector:" + tracePassword + "@127.0.0.1:1/v1/traces",
		// Delivers: the right token.
		"OUTBOXD_DRIVERS__GOOD__TYPE=nats", "OUTBOXD_DRIVERS__GOOD__URL=" + natsAuth, "OUTBOXD_DRIVERS__GOOD__TOKEN=" + natsToken,
		"OUTBOXD_STREAMS__PAYMENTS__DRIVER=good", "OUTBOXD_STREAMS__PAYMENTS__POLL_INTERVAL=50ms",
		// Refused: a wrong token.
		"OUTBOXD_DRIVERS__BAD__TYPE=nats", "OUTBOXD_DRIVERS__BAD__URL=" + natsAuth, "OUTBOXD_DRIVERS__BAD__TOKEN=" + wrongToken,
		"OUTBOXD_STREAMS__REFUNDS__DRIVER=bad", "OUTBOXD_STREAMS__REFUNDS__POLL_INTERVAL=50ms",
		// Delivers: user and password in the URL.
		"OUTBOXD_DRIVERS__URLAUTH__TYPE=jetstream",
		"OUTBOXD_DRIVERS__URLAUTH__URL=" + strings.Replace(natsUsers, "nats://", "nats://outboxd:"+natsURLPass+"@", 1),
		"OUTBOXD_STREAMS__AUDIT__DRIVER=urlauth",
		// Refused: a wrong SASL password.
		"OUTBOXD_DRIVERS__BUS__TYPE=kafka", "OUTBOXD_DRIVERS__BUS__BROKERS=" + k.ListenAddrs()[0],
		"OUTBOXD_DRIVERS__BUS__SASL__MECHANISM=scram-sha-256", "OUTBOXD_DRIVERS__BUS__SASL__USERNAME=outboxd",
		"OUTBOXD_DRIVERS__BUS__SASL__PASSWORD=" + kafkaPassword,
		"OUTBOXD_STREAMS__ORDERS__DRIVER=bus", "OUTBOXD_STREAMS__ORDERS__POLL_INTERVAL=50ms",
	}
	var seen []string // every text a client or operator could read
	look := func(what, text string) { seen = append(seen, what+":\n"+text) }

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs testenv.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, env{args: []string{"run", "--migrate"}, environ: environ, stdout: &logs, stderr: &logs})
	}()
	conn := testenv.Connect(t, dsn) // straight to the database, past the proxy
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s did not happen within 60s\n%s", what, logs.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitFor("the migration", func() bool {
		_, err := conn.Exec(ctx, `INSERT INTO outbox.messages (stream, topic, payload)
			VALUES ('payments', 'captured', 'x'), ('refunds', 'issued', 'x'), ('orders', 'orders', 'x'), ('audit', 'a', 'x')`)
		return err == nil
	})
	count := func(where string) int {
		var n int
		must(t, conn.QueryRow(ctx, `SELECT count(*) FROM outbox.messages WHERE `+where).Scan(&n))
		return n
	}
	waitFor("delivery through the good NATS driver", func() bool { return count("stream = 'payments' AND status = 'delivered'") == 1 })
	waitFor("the refused credentials to be recorded", func() bool {
		return count("stream IN ('refunds', 'orders') AND last_error IS NOT NULL") == 2
	})

	base := "http://" + adminAddr(t, &logs)
	get := func(method, path, body string, header ...string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
		must(t, err)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		res, err := http.DefaultClient.Do(req)
		must(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		look(method+" "+path, string(b))
		return res.StatusCode, string(b)
	}
	reader := []string{"Authorization", "Bearer " + readToken}
	for _, path := range []string{"/api/v1/stats", "/metrics", "/readyz", "/api/v1/messages?limit=1000"} {
		if status, body := get("GET", path, "", reader...); status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, status, body)
		}
	}
	for _, path := range []string{"/api/v1/stats", "/api/v1/messages"} {
		if status, body := get("GET", path, ""); status != http.StatusUnauthorized {
			t.Fatalf("GET %s without a token: %d %s; want 401", path, status, body)
		}
	}
	for _, tok := range []string{"", "Bearer " + wrongToken, "Bearer " + adminToken + "x", "Basic " + adminToken} {
		if status, _ := get("POST", "/api/v1/messages/requeue", `{"ids": [1]}`, "Authorization", tok, "Content-Type", "application/json"); status != http.StatusUnauthorized {
			t.Fatalf("requeue with %q: %d, want 401", tok, status)
		}
	}
	if status, body := get("POST", "/api/v1/messages/requeue", `{"stream": "orders", "all": true}`, "Authorization", "Bearer "+adminToken); status != http.StatusOK {
		t.Fatalf("requeue with the token: %d %s", status, body)
	}

	// The database goes away: every loop meets errors, and the API reports them.
	proxy.cut()
	waitFor("the readiness check to see the database gone", func() bool {
		status, _ := get("GET", "/readyz", "")
		return status == http.StatusServiceUnavailable
	})
	get("GET", "/api/v1/stats", "", reader...)
	get("GET", "/api/v1/messages", "", reader...)
	get("POST", "/api/v1/messages/requeue", `{"stream": "orders", "all": true}`, "Authorization", "Bearer "+adminToken)
	waitFor("the pipelines to log their failed claims", func() bool { return strings.Contains(logs.String(), "claim failed") })
	proxy.restore()
	waitFor("readiness to return with the database", func() bool {
		status, _ := get("GET", "/readyz", "")
		return status == http.StatusOK
	})
	get("GET", "/metrics", "")

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("run exited %d", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not stop within 30s")
	}
	look("logs", logs.String())
	rows, err := conn.Query(context.Background(), `SELECT coalesce(last_error, '') FROM outbox.messages`)
	must(t, err)
	for rows.Next() {
		var e string
		must(t, rows.Scan(&e))
		look("last_error", e)
	}
	must(t, rows.Err())

	// The run must actually have met the failures this test is about.
	all := strings.Join(seen, "\n")
	for _, want := range []string{"Authorization Violation", "claim failed", `"ready": false`, "outboxd_messages_published_total"} {
		if !strings.Contains(all, want) {
			t.Errorf("nothing said %q: the failure this test looks for did not happen\n%s", want, all)
		}
	}
	for _, text := range seen {
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("the secret %q reached %s", s, text)
			}
		}
	}
}

// startNATS starts an embedded NATS server with opts for t and returns its URL.
func startNATS(t *testing.T, opts *server.Options) string {
	t.Helper()
	opts.Host, opts.Port, opts.NoLog, opts.NoSigs = "127.0.0.1", server.RANDOM_PORT, true, true
	opts.JetStream, opts.StoreDir = true, t.TempDir()
	s, err := server.NewServer(opts)
	must(t, err)
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s.ClientURL()
}

// Commands that fail before anything runs, on a DSN whose password pgx's own redaction
// misses, print their reason without the password.
func TestCommandsFailingOnABadDSNNeverPrintItsPassword(t *testing.T) {
	t.Parallel()
	const secret = "Kvpw0e7b44secret"
	for _, dsn := range []string{
		"host=127.0.0.1 password = " + secret + " sslrootcert=/nonexistent/ca.pem sslmode=verify-full",
		`host=127.0.0.1 password='it\'s ` + secret + `' sslrootcert=/nonexistent/ca.pem sslmode=verify-full`,
		"host=127.0.0.1 password = " + secret + " sslmode=verify-everything",
		"postgres://app:" + secret + "@127.0.0.1:1/app?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
	} {
		environ := []string{"OUTBOXD_DATABASE_URL=" + dsn, "OUTBOXD_DRIVERS__BUS__TYPE=discard", "OUTBOXD_STREAMS__ORDERS__DRIVER=bus",
			"OUTBOXD_HTTP__ADDR="}
		for _, args := range [][]string{{"run"}, {"run", "--migrate"}, {"migrate", "up"}, {"stats"}, {"config", "check"}} {
			code, out, errOut := outboxd(t, environ, args...)
			if strings.Contains(out+errOut, secret) {
				t.Errorf("outboxd %s with DSN %q printed the password:\n%s%s", strings.Join(args, " "), dsn, out, errOut)
			}
			if args[0] != "config" && code == 0 {
				t.Errorf("outboxd %s with DSN %q succeeded", strings.Join(args, " "), dsn)
			}
		}
	}
}
