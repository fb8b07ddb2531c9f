package admin_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/admin"
)

// The bad-input catalogue, HTTP: requests the API must refuse with a status and a JSON
// error naming what is wrong, never a 500 for the client's own mistake. The cases
// TestMistakesAreRefusedWithAMessageNamingThem already covers are not repeated.

func cursorOf(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func TestEveryMalformedRequestIsRefusedNamingWhatIsWrong(t *testing.T) {
	t.Parallel()
	f := setup(t, withToken)
	ids := f.insert(t, "orders", 1)
	f.fail(t, ids...)
	auth := bearer(token)
	jsonAuth := append([]string{"Content-Type", "application/json"}, auth...)
	requeue := "/api/v1/messages/requeue"
	skip := "/api/v1/messages/skip"
	cases := []struct {
		name   string
		method string
		path   string
		body   string
		header []string
		status int
		want   string
	}{
		// Bodies that are JSON but not the object asked for.
		{"A body that is a JSON array is refused", "POST", requeue, `[1, 2]`, jsonAuth, 400, "the request body must be a JSON object, got a JSON array"},
		{"A body that is a JSON string is refused", "POST", requeue, `"ids"`, jsonAuth, 400, "the request body must be a JSON object, got a JSON string"},
		{"A body that is JSON null asks for what to requeue", "POST", requeue, `null`, jsonAuth, 400, "name the messages to requeue"},
		{"An id beyond 64 bits is refused", "POST", requeue, `{"ids": [99999999999999999999]}`, jsonAuth, 400, `field "ids" must be an integer, got a JSON number 99999999999999999999`},
		{"A fractional id is refused", "POST", requeue, `{"ids": [1.5]}`, jsonAuth, 400, `field "ids" must be an integer, got a JSON number 1.5`},
		{"A limit given as a string is refused", "POST", requeue, `{"stream": "orders", "limit": "10"}`, jsonAuth, 400, `field "limit" must be an integer, got a JSON string`},
		{"A zero limit is refused", "POST", requeue, `{"stream": "orders", "limit": 0}`, jsonAuth, 400, "limit: want at least 1, got 0"},
		{"A filter without a bound is refused, not read as the first thousand", "POST", requeue, `{"stream": "orders"}`, jsonAuth, 400, "give one bound: limit N (at most N messages, oldest first) or all"},
		{"A filter with both bounds is refused", "POST", requeue, `{"stream": "orders", "limit": 5, "all": true}`, jsonAuth, 400, "give one bound"},
		{"More than 10000 ids are refused", "POST", requeue, `{"ids": [` + strings.Repeat("1,", 10000) + `1]}`, jsonAuth, 400, "ids: want 1 to 10000 ids, got 10001"},
		{"JSON nested beyond the decoder's depth is refused", "POST", requeue, strings.Repeat("[", 20000), jsonAuth, 400, "exceeded max depth"},
		{"A body starting with a byte-order mark is refused", "POST", requeue, "\ufeff{\"ids\": [1]}", jsonAuth, 400, "not valid JSON at byte 1"},
		{"A stream holding NUL in the body is refused, not passed to the database", "POST", requeue, `{"stream": "or\u0000ders"}`, jsonAuth, 400, "stream: contains a NUL character"},
		{"A window that ends before it starts is refused", "POST", requeue, `{"stream": "orders", "since": "1h", "until": "2h"}`, jsonAuth, 400, "until must be after since"},
		{"A time with an impossible offset is refused", "POST", requeue, `{"stream": "orders", "since": "2024-05-01T12:00:00+25:00"}`, jsonAuth, 400, `since: "2024-05-01T12:00:00+25:00" is neither`},
		// Skip bodies.
		{"A skip naming ids and a key together is refused", "POST", skip, `{"ids": [1], "stream": "orders", "key": "k"}`, jsonAuth, 400, "give either ids or a stream and a key, not both"},
		{"A skip of an empty id list is refused", "POST", skip, `{"ids": []}`, jsonAuth, 400, "ids: want 1 to 10000 ids, got 0"},
		{"A skip of more than 10000 ids is refused", "POST", skip, `{"ids": [` + strings.Repeat("1,", 10000) + `1]}`, jsonAuth, 400, "ids: want 1 to 10000 ids, got 10001"},
		{"A skip of a negative id is refused", "POST", skip, `{"ids": [-4]}`, jsonAuth, 400, "ids: -4 is not a message id"},
		{"A skip of a zero id is refused", "POST", skip, `{"ids": [0]}`, jsonAuth, 400, "ids: 0 is not a message id"},
		{"A skip of a stream without a key is refused", "POST", skip, `{"stream": "orders"}`, jsonAuth, 400, "stream: the head to skip is named with its key too"},
		{"A skip of a key without a stream is refused", "POST", skip, `{"key": "order-42"}`, jsonAuth, 400, "key: the head of a key is named with its stream too"},
		{"A skip of nothing is refused", "POST", skip, `{}`, jsonAuth, 400, "name the messages to skip"},
		{"A skip body that is JSON null asks what to skip", "POST", skip, `null`, jsonAuth, 400, "name the messages to skip"},
		{"A skip with a key that is a number is refused", "POST", skip, `{"stream": "orders", "key": 42}`, jsonAuth, 400, `field "key" must be a string, got a JSON number`},
		{"A skip with a key holding NUL is refused, not passed to the database", "POST", skip, `{"stream": "orders", "key": "or\u0000der"}`, jsonAuth, 400, "key: contains a NUL character, which no key holds"},
		{"A skip with a stream holding NUL is refused, not passed to the database", "POST", skip, `{"stream": "or\u0000ders", "key": "k"}`, jsonAuth, 400, "stream: contains a NUL character"},
		{"A skip with an unknown field is refused", "POST", skip, `{"ids": [1], "all": true}`, jsonAuth, 400, `unknown field "all"`},
		{"A skip body that is a JSON array is refused", "POST", skip, `[1]`, jsonAuth, 400, "the request body must be a JSON object, got a JSON array"},
		{"A skip without a body is refused", "POST", skip, "", auth, 400, "the request body is empty"},
		{"A skip sent as a form is refused", "POST", skip, `ids=1`, append([]string{"Content-Type", "application/x-www-form-urlencoded"}, auth...), 415, "must be JSON"},
		{"A skip with a query parameter is refused", "POST", skip + "?force=1", `{"ids": [1]}`, jsonAuth, 400, "this endpoint takes no query parameters, got force"},
		{"GET on the skip endpoint is refused", "GET", skip, "", nil, 405, "GET is not allowed on /api/v1/messages/skip; use POST"},
		// Content types.
		{"A JSON-lookalike content type is refused", "POST", requeue, `{"ids": [1]}`, append([]string{"Content-Type", "application/jsonp"}, auth...), 415, `got "application/jsonp"`},
		{"JSON in UTF-16 is refused", "POST", requeue, `{"ids": [1]}`, append([]string{"Content-Type", "application/json; charset=utf-16"}, auth...), 415, "must be JSON"},
		{"Plain text is refused", "POST", requeue, `{"ids": [1]}`, append([]string{"Content-Type", "text/plain"}, auth...), 415, "must be JSON"},
		{"A content type that does not parse is refused", "POST", requeue, `{"ids": [1]}`, append([]string{"Content-Type", "application/json; charset"}, auth...), 415, "must be JSON"},
		// Query parameters.
		{"A stream holding NUL in the query is refused, not passed to the database", "GET", "/api/v1/messages?stream=or%00ders", "", auth, 400, "stream: contains a NUL character"},
		{"A stream that is not UTF-8 in the query is refused", "GET", "/api/v1/messages?stream=or%FFders", "", auth, 400, "stream: is not valid UTF-8"},
		{"A cursor beyond 64 bits is refused", "GET", "/api/v1/messages?cursor=" + cursorOf("9223372036854775808"), "", auth, 400, "is not one this API handed out"},
		{"A cursor of zero is refused", "GET", "/api/v1/messages?cursor=" + cursorOf("0"), "", auth, 400, "is not one this API handed out"},
		{"A negative cursor is refused", "GET", "/api/v1/messages?cursor=" + cursorOf("-1"), "", auth, 400, "is not one this API handed out"},
		{"A padded cursor is refused", "GET", "/api/v1/messages?cursor=" + base64.URLEncoding.EncodeToString([]byte("7")), "", auth, 400, "is not one this API handed out"},
		{"A negative duration is refused", "GET", "/api/v1/messages?since=-2h", "", auth, 400, `since: "-2h" is neither`},
		{"A duration beyond Go's range is refused", "GET", "/api/v1/messages?since=3000000h", "", auth, 400, `since: "3000000h" is neither`},
		{"A five-digit year is refused", "GET", "/api/v1/messages?until=10000-01-01T00:00:00Z", "", auth, 400, `until: "10000-01-01T00:00:00Z" is neither`},
		{"A time without a zone is refused", "GET", "/api/v1/messages?since=2024-05-01T12:00:00", "", auth, 400, "since:"},
		{"A limit in exponent notation is refused", "GET", "/api/v1/messages?limit=1e3", "", auth, 400, `limit: want a whole number from 1 to 1000, got "1e3"`},
		{"A negative limit is refused", "GET", "/api/v1/messages?limit=-1", "", auth, 400, `got "-1"`},
		{"A token in the query string is refused as an unknown parameter", "POST", requeue + "?token=" + token, `{"ids": [1]}`, jsonAuth, 400, "this endpoint takes no query parameters, got token"},
		// Methods.
		{"HEAD on the requeue endpoint is refused", "HEAD", requeue, "", nil, 405, ""},
		{"DELETE on the listing is refused", "DELETE", "/api/v1/messages", "", nil, 405, "DELETE is not allowed on /api/v1/messages; use GET"},
		{"PUT on stats is refused", "PUT", "/api/v1/stats", "{}", nil, 405, "use GET"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := f.do(t, c.method, c.path, c.body, c.header...)
			if res.Status != c.status {
				t.Fatalf("status %d, body %.300s; want %d", res.Status, res.Body, c.status)
			}
			if c.want != "" && !strings.Contains(res.errorText(t), c.want) {
				t.Fatalf("error %.300s; want it to say %q", res.Body, c.want)
			}
		})
	}
	if strings.Contains(f.logs.String(), `"level":"ERROR"`) {
		t.Fatalf("a client's mistake was logged as a server error:\n%s", f.logs)
	}
	if s := f.state(t, ids[0]); s.Status != "failed" || f.skippedAt(t, ids[0]) != nil {
		t.Fatalf("a refused request changed a row: %+v", s)
	}
	// The charset the decoder reads is accepted when named.
	res := f.do(t, "POST", requeue, fmt.Sprintf(`{"ids": [%d]}`, ids[0]), append([]string{"Content-Type", "application/json; charset=UTF-8"}, auth...)...)
	if res.Status != http.StatusOK {
		t.Fatalf("JSON declared as UTF-8: %d %s", res.Status, res.Body)
	}
}

// Wrong tokens of every length are refused alike: the comparison is of SHA-256 digests in
// constant time, so neither the response nor its cost depends on how much of the token
// matched or on its length.
func TestEveryWrongTokenIsRefusedAlikeAndChangesNothing(t *testing.T) {
	t.Parallel()
	f := setup(t, withToken)
	ids := f.insert(t, "orders", 1)
	f.fail(t, ids...)
	body := fmt.Sprintf(`{"ids": [%d]}`, ids[0])
	var first string
	for _, tok := range []string{"x", token[:len(token)-1], token + "x", strings.ToUpper(token), token[1:] + "a",
		strings.Repeat("a", 10000), "Bearer " + token} {
		res := f.do(t, "POST", "/api/v1/messages/requeue", body, bearer(tok)...)
		if res.Status != http.StatusUnauthorized {
			t.Fatalf("token of %d bytes: %d %s", len(tok), res.Status, res.Body)
		}
		if first == "" {
			first = res.Body
		}
		if res.Body != first {
			t.Fatalf("responses differ between wrong tokens:\n%s\n%s", first, res.Body)
		}
	}
	if s := f.state(t, ids[0]); s.Status != "failed" {
		t.Fatalf("a wrong token changed a row: %+v", s)
	}
	if strings.Contains(f.logs.String(), token[:20]) {
		t.Fatalf("a presented token reached the log:\n%s", f.logs)
	}
}

// The listener caps what a client may send before any handler runs: headers, the
// request line, and a body sent without a length.
func TestTheServerCapsHeadersAndBodiesItReads(t *testing.T) {
	t.Parallel()
	f := setup(t, withToken)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- admin.ServeListener(ctx, ln, admin.New(admin.Options{Store: f.store, AdminToken: token}))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	base := "http://" + ln.Addr().String()

	send := func(req *http.Request) (int, string) {
		t.Helper()
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	req, _ := http.NewRequest("GET", base+"/api/v1/stats", nil)
	req.Header.Set("X-Padding", strings.Repeat("p", 100<<10))
	if status, body := send(req); status != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("100 KiB of headers: %d %.200s; want 431", status, body)
	}
	req, _ = http.NewRequest("GET", base+"/api/v1/messages?stream="+strings.Repeat("s", 100<<10), nil)
	if status, body := send(req); status != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("a 100 KiB request line: %d %.200s; want 431", status, body)
	}

	// A body of unknown length, streamed: cut at the cap, answered 413.
	pr, pw := io.Pipe()
	go func() {
		if _, err := pw.Write([]byte(`{"ids": [1`)); err != nil {
			return
		}
		chunk := []byte(strings.Repeat(", 1", 1000))
		for i := 0; i < 1000; i++ {
			if _, err := pw.Write(chunk); err != nil {
				return
			}
		}
		pw.Close()
	}()
	req, _ = http.NewRequest("POST", base+"/api/v1/messages/requeue", pr)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	status, body := send(req)
	pr.CloseWithError(io.ErrClosedPipe)
	if status != http.StatusRequestEntityTooLarge || !strings.Contains(body, "larger than 1048576 bytes") {
		t.Fatalf("a streamed body of 3 MB: %d %.200s; want 413", status, body)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("refusing the streamed body took %s", d)
	}
}

// A query string Go cannot parse loses the pairs it cannot read: answering the rest would
// list every row for `?status=';drop table x;--`, a filter the client never asked to drop.
// It is refused whole, as is a parameter given with no value, which would read as no
// filter too.
func TestAQueryThatDoesNotParseIsRefusedNotReadAsNoFilter(t *testing.T) {
	t.Parallel()
	f := setup(t, withToken)
	ids := f.insert(t, "orders", 2)
	f.fail(t, ids[0])
	auth := bearer(token)
	jsonAuth := append([]string{"Content-Type", "application/json"}, auth...)
	cases := []struct {
		name   string
		method string
		path   string
		body   string
		header []string
		want   string
	}{
		{"A filter holding a semicolon is refused, not dropped", "GET", "/api/v1/messages?status=%27;drop%20table%20x;--", "", auth,
			"the query string does not parse: invalid semicolon separator in query; separate parameters with &"},
		{"Parameters separated by semicolons are refused", "GET", "/api/v1/messages?status=failed;limit=1", "", auth, "invalid semicolon separator"},
		{"A semicolon after a good filter is refused", "GET", "/api/v1/messages?status=failed&stream=orders;x", "", auth, "invalid semicolon separator"},
		{"A broken percent escape is refused", "GET", "/api/v1/messages?stream=%zz", "", auth, `the query string does not parse: invalid URL escape "%zz"`},
		{"A broken percent escape in a name is refused", "GET", "/api/v1/messages?st%atus=failed", "", auth, "the query string does not parse"},
		{"A semicolon on stats is refused", "GET", "/api/v1/stats?;", "", auth, "invalid semicolon separator"},
		{"A semicolon on requeue is refused", "POST", "/api/v1/messages/requeue?a;b", fmt.Sprintf(`{"ids": [%d]}`, ids[0]), jsonAuth, "invalid semicolon separator"},
		{"A semicolon on skip is refused", "POST", "/api/v1/messages/skip?;", fmt.Sprintf(`{"ids": [%d]}`, ids[0]), jsonAuth, "invalid semicolon separator"},
		{"A status with no value is refused, not read as any status", "GET", "/api/v1/messages?status=", "", auth, "query parameter status has no value; leave it out for no filter"},
		{"A status with no equals sign is refused", "GET", "/api/v1/messages?status", "", auth, "query parameter status has no value"},
		{"An empty limit is refused", "GET", "/api/v1/messages?limit=", "", auth, "query parameter limit has no value"},
		{"A parameter with no name is refused", "GET", "/api/v1/messages?=failed", "", auth, `unknown query parameter ""`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := f.do(t, c.method, c.path, c.body, c.header...)
			if res.Status != http.StatusBadRequest || !strings.Contains(res.errorText(t), c.want) {
				t.Fatalf("status %d, body %.300s; want 400 saying %q", res.Status, res.Body, c.want)
			}
		})
	}
	if s := f.state(t, ids[0]); s.Status != "failed" || f.skippedAt(t, ids[0]) != nil {
		t.Fatalf("a refused request changed a row: %+v", s)
	}
}
