package tracing_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/events/tracing"
	"github.com/outboxd/outboxd/router"
)

// export is one request a fake collector received.
type export struct {
	path, auth, contentType string
	req                     *coltrace.ExportTraceServiceRequest
	err                     error
}

// collector starts an OTLP/HTTP endpoint that records every export on the returned channel.
func collector(t *testing.T) (*httptest.Server, <-chan export) {
	t.Helper()
	got := make(chan export, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e := export{path: r.URL.Path, auth: r.Header.Get("Authorization"), contentType: r.Header.Get("Content-Type")}
		body, err := io.ReadAll(r.Body)
		if err == nil {
			e.req = &coltrace.ExportTraceServiceRequest{}
			err = proto.Unmarshal(body, e.req)
		}
		e.err = err
		got <- e
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

func TestSetupExportsOverOTLPHTTPToTheCollectorsTracesPath(t *testing.T) {
	t.Parallel()
	srv, got := collector(t)
	base := strings.TrimPrefix(srv.URL, "http://")
	cases := []struct {
		name, endpoint, path, auth string
	}{
		{"a base URL gets the traces path", "http://" + base, "/v1/traces", ""},
		{"a base URL with a path keeps it", "http://" + base + "/otlp/", "/otlp/v1/traces", ""},
		{"a URL that already names the traces path is used as it is", "http://" + base + "/v1/traces", "/v1/traces", ""},
		// "collector:s3cret" in base64.
		{"user info becomes basic authentication", "http://collector:s3cret@" + base, "/v1/traces", "Basic Y29sbGVjdG9yOnMzY3JldA=="},
	}
	for _, c := range cases {
		// Serial: the cases share one collector and read its exports in turn.
		tp, shutdown, err := tracing.Setup(context.Background(), config.Tracing{
			Enabled: true, Endpoint: c.endpoint, SampleRatio: 1, ServiceName: "shop-outboxd",
		}, "v1.2.3")
		if err != nil {
			t.Fatalf("%s: Setup: %v", c.name, err)
		}
		pub := tracing.Wrap((&recorder{}).Publish, tp, "jetstream")
		pub(context.Background(), []router.Message{{ID: 5, Stream: "orders", Topic: "shop.orders"}})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := shutdown(ctx); err != nil {
			t.Errorf("%s: shutdown: %v", c.name, err)
		}
		cancel()

		var e export
		select {
		case e = <-got:
		default:
			t.Fatalf("%s: shutdown returned and the collector received nothing", c.name)
		}
		if e.err != nil {
			t.Fatalf("%s: collector could not decode the export: %v", c.name, e.err)
		}
		if e.path != c.path || e.auth != c.auth || e.contentType != "application/x-protobuf" {
			t.Errorf("%s: export to %q, Authorization %q, Content-Type %q; want %q, %q, application/x-protobuf",
				c.name, e.path, e.auth, e.contentType, c.path, c.auth)
		}
		rs := e.req.GetResourceSpans()
		if len(rs) != 1 {
			t.Fatalf("%s: %d resource spans, want 1", c.name, len(rs))
		}
		res := map[string]string{}
		for _, kv := range rs[0].GetResource().GetAttributes() {
			res[kv.GetKey()] = kv.GetValue().GetStringValue()
		}
		if res["service.name"] != "shop-outboxd" || res["service.version"] != "v1.2.3" || rs[0].GetSchemaUrl() != semconv.SchemaURL {
			t.Errorf("%s: resource %v with schema %q, want service shop-outboxd v1.2.3 and schema %s",
				c.name, res, rs[0].GetSchemaUrl(), semconv.SchemaURL)
		}
		if ss := rs[0].GetScopeSpans(); len(ss) != 1 || len(ss[0].GetSpans()) != 1 || ss[0].GetSpans()[0].GetName() != "publish shop.orders" {
			t.Errorf("%s: exported %v, want the one publish span", c.name, ss)
		}
	}
}

func TestSetupRefusesAnEndpointThatIsNotAnHTTPURLWithoutQuotingIt(t *testing.T) {
	t.Parallel()
	for _, endpoint := range []string{"", "collector:4318", "grpc://user:hunter2@collector:4317", "http://"} {
		_, _, err := tracing.Setup(context.Background(), config.Tracing{Enabled: true, Endpoint: endpoint, SampleRatio: 1, ServiceName: "s"}, "v")
		if err == nil {
			t.Errorf("endpoint %q accepted, want an error", endpoint)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("endpoint %q: error %q quotes the password", endpoint, err)
		}
	}
}

func TestSetupStartsWithoutACollector(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	endpoint := srv.URL
	srv.Close() // nothing listens there any more

	tp, shutdown, err := tracing.Setup(context.Background(), config.Tracing{Enabled: true, Endpoint: endpoint, SampleRatio: 1, ServiceName: "s"}, "v")
	if err != nil {
		t.Fatalf("Setup with the collector down: %v, want a provider that exports later", err)
	}
	pub := tracing.Wrap((&recorder{}).Publish, tp, "nats")
	if errs := pub(context.Background(), []router.Message{{ID: 1, Stream: "s", Topic: "t"}}); errs[0] != nil {
		t.Errorf("publish with the collector down: %v, want the publisher's own result", errs[0])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_ = shutdown(ctx) // the export fails and would be retried: ctx bounds it
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("shutdown took %s with a 200ms context", took)
	}
}
