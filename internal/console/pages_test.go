package console

import (
	"go/ast"
	"go/parser"
	"go/token"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/ops"
)

// hostiles are values that would add an element or an attribute, or a script URL, to a
// page that wrote them unescaped.
var hostiles = []string{
	`<script>alert(1)</script>`,
	`"><img src=x onerror=alert(1)>`,
	`' autofocus onfocus='alert(1)`,
	`&lt;b&gt; & &amp; </textarea></pre></title><b>`,
	`javascript:alert(1)`,
	"\x00<svg onload=alert(1)>",
}

// rendered is one page or fragment as written.
type rendered struct{ name, body string }

// renderAll renders every page and the streams fragment with v(…) in every dynamic
// text field and status in the fields a page compares (a message's and a filter's
// status). A page's markup decides by comparing them, so the same status with benign
// or hostile text takes the same branches.
func renderAll(t *testing.T, v func(string) string, status string) []rendered {
	t.Helper()
	c := &console{opt: Options{Mode: config.UIOn}}
	admin := &session{csrf: v("csrf"), role: act}
	at := time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)
	n := int64(3)
	busy := Throughput{PerSlot: make([]int64, activitySlots), DeadLettered: 2}
	busy.PerSlot[3] = 9
	row := func(s string) streamRow {
		return streamRow{StreamStats: ops.StreamStats{Stream: v(s), Driver: v("driver"), Breaker: v("breaker"), Failed: 1,
			Ordered: true, BlockedKeys: &n, BlockedMessages: &n, Unserved: true}, T: busy, FlowsOn: v("flows")}
	}
	stats := streamsPage{{Name: v("box"), Table: v("table"), Activity: true, Error: v("stats"), Streams: []streamRow{row("a"), row("b")}}}
	q := ops.MessageQuery{Stream: v("stream"), Status: status, Since: v("since"), Until: v("until"), Key: v("key"),
		Topic: v("topic"), Error: v("error"), FromID: v("from"), ToID: v("to"), Limit: v("limit")}
	m := ops.Message{ID: 7, Stream: v("stream"), Topic: v("topic"), Key: v("key"), Status: status, LastError: v("last"),
		CreatedAt: at, AvailableAt: at, PublishedAt: &at, Owner: v("owner"), MessageID: v("msgid"), PayloadBytes: 9}
	trace, _ := webLink("https://trace.example/" + v("trace"))
	a := action{Kind: v("kind"), Outbox: v("box"), Stream: v("stream"), Key: v("key"), Since: v("since"), Until: v("until"),
		Topic: v("topic"), Error: v("error"), ID: 4, FromID: 2, ToID: 9, HasKey: true}
	pages := []struct {
		title string
		ct    content
	}{
		{"login", loginData{Mode: v("mode"), Error: v("login")}},
		{"streams", stats},
		{"messages", messagesData{Outbox: v("box"), Outboxes: []string{v("box"), v("other")}, Statuses: []string{status, v("st")},
			Query: q, Page: ops.MessagePage{Messages: []ops.Message{m}, Scanned: 5}, Error: v("list"),
			NextURL: nextURL(v("box"), q, v("cursor")), Short: true, Ordered: true}},
		// The filter without error text or ids, as a replay's form needs.
		{"messages", messagesData{Outbox: v("box"), Query: ops.MessageQuery{Stream: v("stream"), Status: status, Key: v("key"),
			Topic: v("topic"), Since: v("since"), Until: v("until")}}},
		{"message", messageData{Outbox: v("box"), M: ops.MessageDetail{Message: m, Truncated: true},
			Headers: []header{{v("hname"), v("hvalue")}}, Payload: v("payload"), Shown: 3, TraceID: v("traceid"), TraceLink: trace}},
		{"message", messageData{Outbox: v("box"), M: ops.MessageDetail{Message: m}, Payload: v("payload"), Ordered: true, TraceID: v("traceid")}},
		{"replicas", replicasData{Version: v("version"), Uptime: v("uptime"), Outboxes: []outboxHolders{{Name: v("box"), Error: v("holders"),
			Holders: []holderRow{{Holder: ops.Holder{PID: 1, Application: v("app"), ClientAddr: v("addr"), Janitor: true,
				Flows: []string{v("f1"), v("f2")}}, Connected: v("since")}}}}}},
		{"confirm", confirmData{A: a, Count: 2, Note: v("note")}},
		{v("title"), doneData{A: a, Summary: v("summary")}},
		{"error", refusal(v("refusal"))},
	}
	var out []rendered
	for _, p := range pages {
		rec := httptest.NewRecorder()
		c.render(rec, 200, admin, p.title, p.ct)
		out = append(out, rendered{p.title, rec.Body.String()})
	}
	var frag page
	stats.table(&frag)
	return append(out, rendered{"streams table", string(frag.bytes())})
}

// shape is a page's elements and their attributes' names, in order, as a browser
// parses it; and its text and attribute values, decoded.
func shape(t *testing.T, r rendered) (tags []string, text string) {
	t.Helper()
	var nodes []*html.Node
	var err error
	if r.name == "streams table" {
		nodes, err = html.ParseFragment(strings.NewReader(r.body), &html.Node{Type: html.ElementNode, Data: "div", DataAtom: atom.Div})
	} else {
		var doc *html.Node
		doc, err = html.Parse(strings.NewReader(r.body))
		nodes = []*html.Node{doc}
	}
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		switch n.Type {
		case html.ElementNode:
			tag := n.Data
			for _, a := range n.Attr {
				tag += " " + a.Key
				b.WriteString(a.Val + "\n")
				if a.Key == "href" && !strings.HasPrefix(a.Val, "/ui/") && !strings.HasPrefix(a.Val, "https://trace.example/") {
					t.Errorf("%s: a link to %q", r.name, a.Val)
				}
			}
			tags = append(tags, tag)
		case html.TextNode:
			b.WriteString(n.Data + "\n")
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	for _, n := range nodes {
		walk(n)
	}
	return tags, b.String()
}

// TestHostileValuesAddNoElementNorAttribute renders every page with a hostile value in
// every field it shows and compares what a browser would parse with the same page
// holding plain words: no element or attribute the page does not have (one may be left
// out: a trace link that is no http URL), and the hostile value shown as text.
func TestHostileValuesAddNoElementNorAttribute(t *testing.T) {
	plain := func(s string) string { return "plain-" + s }
	for _, status := range []string{"failed", "pending", "delivered", hostiles[0]} {
		want := renderAll(t, plain, status)
		for _, h := range hostiles {
			got := renderAll(t, func(s string) string { return s + h }, status)
			for i := range got {
				wantTags, _ := shape(t, want[i])
				gotTags, text := shape(t, got[i])
				if !subsequence(gotTags, wantTags) {
					t.Errorf("%s with status %q and value %q: elements or attributes the page does not have:\n got %q\nwant %q\n%s",
						got[i].name, status, h, gotTags, wantTags, got[i].body)
					continue
				}
				shown := strings.ReplaceAll(h, "\x00", "\uFFFD")
				if !strings.Contains(text, shown) {
					t.Errorf("%s with status %q: the value %q is not shown:\n%s", got[i].name, status, h, got[i].body)
				}
			}
		}
	}
}

// subsequence says got is want with some elements left out (a trace link refused),
// none added or changed.
func subsequence(got, want []string) bool {
	for _, g := range got {
		for len(want) > 0 && want[0] != g {
			want = want[1:]
		}
		if len(want) == 0 {
			return false
		}
		want = want[1:]
	}
	return true
}

func TestOnlyAnHTTPURLIsALink(t *testing.T) {
	for _, s := range []string{"javascript:alert(1)", "JavaScript:alert(1)", " javascript:alert(1)", "data:text/html,<b>",
		"vbscript:x", "//evil.example/x", "/relative", "https:", "http:///path", "mailto:a@b"} {
		if l, ok := webLink(s); ok {
			t.Errorf("webLink(%q) = %q, want none", s, l.s)
		}
	}
	for s, want := range map[string]string{
		"https://jaeger.example/trace/4bf9":  "https://jaeger.example/trace/4bf9",
		"HTTP://grafana.example/x?a=1&b=\"2": "http://grafana.example/x?a=1&b=\"2",
		"https://t.example/a b<c>":           "https://t.example/a%20b%3Cc%3E",
	} {
		if l, ok := webLink(s); !ok || l.s != want {
			t.Errorf("webLink(%q) = %q, %v; want %q", s, l.s, ok, want)
		}
	}
}

func TestAttrRefusesURLScriptAndStyleAttributes(t *testing.T) {
	for _, name := range []markup{"href", "SRC", "onclick", "style", "action", "formaction"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("attr(%q, …) wrote the attribute", name)
				}
			}()
			var p page
			p.attr(name, "x")
		}()
	}
}

// TestNoValueBecomesMarkupOrALink: markup is written as is, so only constants may be
// markup: no code of the package converts to it. A link is made, and a page's buffer
// written, only in html.go, where values are checked or escaped.
func TestNoValueBecomesMarkupOrALink(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				if id, ok := ast.Unparen(n.Fun).(*ast.Ident); ok && id.Name == "markup" {
					t.Errorf("%s: a conversion to markup", fset.Position(n.Pos()))
				}
			case *ast.CompositeLit:
				if id, ok := n.Type.(*ast.Ident); ok && id.Name == "link" && name != "html.go" {
					t.Errorf("%s: a link made outside html.go", fset.Position(n.Pos()))
				}
			case *ast.SelectorExpr:
				if n.Sel.Name == "html" && name != "html.go" {
					t.Errorf("%s: a page's buffer used outside html.go", fset.Position(n.Pos()))
				}
			}
			return true
		})
	}
}
