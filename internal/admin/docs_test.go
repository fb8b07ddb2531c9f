package admin_test

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/outboxd/outboxd/internal/admin"
)

// The routes are held to the documents as the configuration keys are held to
// docs/configuration.md: the table in docs/security.md lists every route the handler
// serves with its access, and no document names an /api/ path or a method the handler
// does not serve.

const securityDoc = "../../docs/security.md"

var (
	// routeRow is a row of the route table: | `GET /healthz` | open | … |
	routeRow = regexp.MustCompile("(?m)^\\| `(GET|POST|PUT|PATCH|DELETE|HEAD) (/[^` ]*)` \\| ([a-z]+) \\|")
	// methodPath is a method and a path written together anywhere in a document.
	methodPath = regexp.MustCompile(`\b(GET|POST|PUT|PATCH|DELETE|HEAD) (/[A-Za-z0-9_./-]*)`)
	// apiPath is any path under /api/, in prose, a URL or a code block.
	apiPath = regexp.MustCompile(`/api/[A-Za-z0-9_./-]*[A-Za-z0-9_]`)
)

func readDocs(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil || len(files) == 0 {
		t.Fatalf("no docs found: %v", err)
	}
	out := map[string]string{}
	for _, f := range append(files, "../../README.md") {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[f] = string(b)
	}
	return out
}

func TestTheSecurityDocsListEveryRouteWithItsAccessAndNoOther(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(securityDoc)
	if err != nil {
		t.Fatal(err)
	}
	var documented []admin.Route
	for _, m := range routeRow.FindAllStringSubmatch(string(b), -1) {
		documented = append(documented, admin.Route{Method: m[1], Path: m[2], Access: admin.Access(m[3])})
	}
	routes := admin.Routes()
	for _, r := range routes {
		if !slices.Contains(documented, r) {
			t.Errorf("%s has no row | `%s %s` | %s |", securityDoc, r.Method, r.Path, r.Access)
		}
	}
	for _, d := range documented {
		if !slices.Contains(routes, d) {
			t.Errorf("%s lists `%s %s` as %s, which is not a route the handler serves so", securityDoc, d.Method, d.Path, d.Access)
		}
	}
}

func TestEveryRouteTheDocsNameIsServed(t *testing.T) {
	t.Parallel()
	methods := map[string][]string{}
	for _, r := range admin.Routes() {
		methods[r.Path] = append(methods[r.Path], r.Method)
	}
	for file, text := range readDocs(t) {
		for _, m := range methodPath.FindAllStringSubmatch(text, -1) {
			if got, ok := methods[m[2]]; !ok || !slices.Contains(got, m[1]) {
				t.Errorf("%s names `%s %s`, which the admin handler does not serve", file, m[1], m[2])
			}
		}
		for _, p := range apiPath.FindAllString(text, -1) {
			if _, ok := methods[p]; !ok {
				t.Errorf("%s names %s, which is not an admin route", file, p)
			}
		}
	}
}

// Routes is what the handler serves: each answers its method with anything but 404, and
// any other method with 405.
func TestTheHandlerServesEveryRouteItLists(t *testing.T) {
	t.Parallel()
	f := setup(t, func(o *admin.Options) { o.Metrics = http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}) })
	for _, r := range admin.Routes() {
		res := f.do(t, r.Method, r.Path, "{}")
		if res.Status == http.StatusMethodNotAllowed || res.Status == http.StatusNotFound {
			t.Errorf("%s %s: %d %s", r.Method, r.Path, res.Status, res.Body)
		}
		other := http.MethodPost
		if r.Method == http.MethodPost {
			other = http.MethodGet
		}
		if res := f.do(t, other, r.Path, ""); res.Status != http.StatusMethodNotAllowed {
			t.Errorf("%s %s: %d, want 405", other, r.Path, res.Status)
		}
	}
}
