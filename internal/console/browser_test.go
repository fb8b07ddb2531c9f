package console_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/events"
	"github.com/outboxd/outboxd/internal/app"
	"github.com/outboxd/outboxd/internal/console"
	"github.com/outboxd/outboxd/internal/ops"
	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/router/discard"
)

// chromiumPath is Debian's chromium, which scripts/ensure-services.sh installs.
const chromiumPath = "/usr/bin/chromium"

// TestABrowserRequeuesAFailedMessageAndSeesItDelivered drives a real browser through
// the console of a running dispatcher: log in, see the streams, open a failed message,
// requeue it (confirming the count), and watch it become delivered. Screenshots of the
// streams page and of the message page are kept as test artifacts (go test -artifacts).
func TestABrowserRequeuesAFailedMessageAndSeesItDelivered(t *testing.T) {
	if _, err := exec.LookPath(chromiumPath); err != nil {
		if os.Getenv("OUTBOXD_REQUIRE_SERVICES") == "1" {
			t.Fatalf("%s is missing and OUTBOXD_REQUIRE_SERVICES=1: install it with apt-get install -y chromium (scripts/ensure-services.sh does)", chromiumPath)
		}
		t.Skipf("%s is missing: install it with apt-get install -y chromium (scripts/ensure-services.sh does) to run the browser test", chromiumPath)
	}
	pg := testenv.NewPG(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)

	cfg := config.Default()
	cfg.DatabaseURL, cfg.Schema, cfg.TableName = pg.DSN, pg.Table.Schema, pg.Table.Table
	cfg.Drivers = map[string]config.Driver{"sink": {Type: discard.Type, Options: discard.Options{}}}
	s := config.DefaultStream()
	s.Driver = "sink"
	cfg.Streams = map[string]config.Stream{"orders": s}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	activity := console.NewActivity(nil)
	d, err := app.NewDispatcher(ctx, &cfg, slog.New(slog.DiscardHandler), app.Options{Subscribe: func(bus *events.Bus) {
		bus.Subscribe("console-activity", activity.Observe, events.Filter(console.IsActivity))
	}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stopRun := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- d.Run(runCtx) }()
	t.Cleanup(func() {
		stopRun()
		if err := <-ran; err != nil {
			t.Errorf("dispatcher: %v", err)
		}
	})

	streams, _ := ops.Describe(&cfg)
	box := console.Outbox{Name: "main", Store: d.Store(), Streams: streams, Activity: activity}
	srv := httptest.NewServer(console.New(console.Options{Mode: config.UIOn, AdminToken: adminToken,
		Outboxes: func() []console.Outbox { return []console.Outbox{box} }}))
	t.Cleanup(srv.Close)

	f := &fixture{pg: pg, ctx: ctx}
	id := f.insert(t, "orders", "cust-1", map[string]string{"trace": "abc"}, []byte(`{"order":42}`))
	waitStatus(t, f, id, "delivered")
	f.fail(t, id, "broker said no")

	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, chromedp.ExecPath(chromiumPath), chromedp.Headless,
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.NoFirstRun, chromedp.WindowSize(1280, 900), chromedp.Flag("log-level", "3"))
	t.Cleanup(cancelAlloc)
	browser, cancelBrowser := chromedp.NewContext(alloc)
	t.Cleanup(cancelBrowser)

	b := &browserRun{t: t, ctx: browser}
	b.do("open the console", chromedp.Navigate(srv.URL+"/ui/streams"))
	b.do("see the login form", chromedp.WaitVisible(css(`input[name=token]`)))
	b.do("log in", chromedp.SendKeys(css(`input[name=token]`), adminToken), chromedp.Submit(css(`main form`)))
	b.do("see the streams", chromedp.WaitVisible(css(`#streams table`)))
	if table := b.text(`#streams`); !strings.Contains(table, "orders") {
		t.Fatalf("the streams page does not show orders: %q", table)
	}
	streamsShot := b.shot()
	b.do("open the failed message", chromedp.Navigate(srv.URL+"/ui/messages?stream=orders&status=failed"),
		chromedp.WaitVisible(css(`a[href*="/ui/message?"]`)), chromedp.Click(css(`a[href*="/ui/message?"]`)),
		chromedp.WaitVisible(css(`pre.payload`)))
	if status := b.text(`td.status-failed`); status != "failed" {
		t.Fatalf("the message page shows status %q, want failed", status)
	}
	messageShot := b.shot()
	b.do("ask to requeue it", chromedp.Click(css(`input[value=requeue] ~ button`)), chromedp.WaitVisible(css(`button.danger`)))
	confirm := b.text(`p.count`)
	b.do("confirm", chromedp.Click(css(`button.danger`)), chromedp.WaitVisible(css(`p.done`)))
	if summary := b.text(`p.done`); !strings.Contains(confirm, "1 message(s)") || summary != "requeued 1 message(s)" {
		t.Fatalf("confirmation %q, then %q; want 1 counted, then 1 requeued", confirm, summary)
	}
	// Reloaded from here, not by a script inside the poll: a reload under an evaluation
	// ends it with "Inspected target navigated or closed" on a loaded machine.
	for deadline := time.Now().Add(30 * time.Second); ; {
		b.do("watch it become delivered", chromedp.Navigate(srv.URL+"/ui/message?id="+itoa(id)),
			chromedp.WaitVisible(css(`pre.payload`)))
		delivered, err := chromedp.Run(b.timeout(), chromedp.Evaluate[bool](`document.querySelector("td.status-delivered") !== null`))
		if err != nil {
			t.Fatalf("read the message's status: %v", err)
		}
		if delivered {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the requeued message did not show delivered within 30s: %q", b.text(`td[class^=status-]`))
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The streams table refreshes itself (the console's script, under its CSP): a
	// message failing now shows up without the page being loaded again.
	b.do("back to the streams", chromedp.Navigate(srv.URL+"/ui/streams"), chromedp.WaitVisible(css(`#streams table`)))
	if _, err := chromedp.Run(b.timeout(), chromedp.Evaluate[bool](`window.notReloaded = true`)); err != nil {
		t.Fatal(err)
	}
	f.fail(t, id, "broker said no again")
	if _, err := chromedp.Run(b.timeout(), chromedp.Poll[bool](
		`window.notReloaded === true && document.querySelector('#streams a[href*="status=failed"]') !== null`,
		chromedp.WithPollingTimeout(15*time.Second))); err != nil {
		t.Fatalf("the streams table did not show the new failure by itself within 15s: %v", err)
	}

	// A filter's whole result: the failed messages whose error says timeout, requeued at
	// once; the one failed for another reason stays.
	var timeouts []int64
	for _, why := range []string{"Timeout waiting for the broker", "message too large", "timeout again"} {
		m := f.insert(t, "orders", "cust-2", nil, []byte(`{"order":43}`))
		waitStatus(t, f, m, "delivered")
		f.fail(t, m, why)
		if strings.Contains(strings.ToLower(why), "timeout") {
			timeouts = append(timeouts, m)
		}
	}
	other := timeouts[len(timeouts)-1] - 1
	b.do("filter the failed messages by error text", chromedp.Navigate(srv.URL+"/ui/messages"),
		chromedp.WaitVisible(css(`input[name=error]`)),
		chromedp.SendKeys(css(`form.filter input[name=stream]`), "orders"),
		chromedp.SetValue(css(`form.filter select[name=status]`), "failed"),
		chromedp.SendKeys(css(`form.filter input[name=error]`), "timeout"),
		chromedp.Submit(css(`form.filter`)),
		chromedp.WaitVisible(css(`input[value=requeue] ~ button`)))
	if rows := b.text(`tbody`); strings.Count(rows, "orders") != 2 || strings.Contains(rows, "too large") {
		t.Fatalf("the filtered listing: %q, want the two timeouts only", rows)
	}
	messagesShot := b.shot()
	b.do("ask to requeue the filter's result", chromedp.Click(css(`input[value=requeue] ~ button`)), chromedp.WaitVisible(css(`button.danger`)))
	confirm = b.text(`p.count`)
	b.do("confirm the bulk requeue", chromedp.Click(css(`button.danger`)), chromedp.WaitVisible(css(`p.done`)))
	if summary := b.text(`p.done`); !strings.Contains(confirm, "2 message(s)") || summary != "requeued 2 message(s)" {
		t.Fatalf("bulk confirmation %q, then %q; want 2 counted, then 2 requeued", confirm, summary)
	}
	for _, m := range timeouts {
		waitStatus(t, f, m, "delivered")
	}
	if s := f.status(t, other); s != "failed" {
		t.Errorf("the message outside the filter is %s, want still failed", s)
	}

	dir := t.ArtifactDir()
	for name, shot := range map[string][]byte{"console-streams.png": streamsShot, "console-message.png": messageShot,
		"console-messages.png": messagesShot} {
		if err := os.WriteFile(filepath.Join(dir, name), shot, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("screenshots in %s", dir)
}

func css(sel string) chromedp.CSS { return chromedp.CSS(sel) }

// browserRun runs steps in one browser tab, each step bounded, failing the test with
// the step's name.
type browserRun struct {
	t   *testing.T
	ctx context.Context
}

func (b *browserRun) timeout() context.Context {
	ctx, cancel := context.WithTimeout(b.ctx, 45*time.Second)
	b.t.Cleanup(cancel)
	return ctx
}

func (b *browserRun) do(step string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.timeout(), steps...); err != nil {
		b.t.Fatalf("%s: %v", step, err)
	}
}

func (b *browserRun) text(sel string) string {
	b.t.Helper()
	v, err := chromedp.Run(b.timeout(), chromedp.Text(css(sel)))
	if err != nil {
		b.t.Fatalf("read %s: %v", sel, err)
	}
	return strings.TrimSpace(v)
}

func (b *browserRun) shot() []byte {
	b.t.Helper()
	png, err := chromedp.Run(b.timeout(), chromedp.FullScreenshot(100)) // 100: PNG; below, JPEG
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	return png
}

func waitStatus(t *testing.T, f *fixture, id int64, want string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); f.status(t, id) != want; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("message %d is %s after 30s, want %s", id, f.status(t, id), want)
		}
	}
}
