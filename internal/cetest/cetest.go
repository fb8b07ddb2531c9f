// Package cetest holds each driver to the CloudEvents binary content mode of its
// protocol, as a consumer's SDK reads it: the conformance check publishes rows through a
// CloudEvents route to the real broker, reads them back and decodes them with the
// CloudEvents SDK for Go. It is for tests only.
//
// Invariant: every message of a cloudevents stream arrives as a valid CloudEvent
// (event.Validate) whose id is the same on every publish of its row, whose time parses
// and whose data is the payload, unchanged.
package cetest

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/routertest"
)

// Decode turns a received message into the event a consumer's SDK reads from it.
type Decode func(r routertest.Received) (*event.Event, error)

// Options describe what a destination does beyond the binding.
type Options struct {
	// DefaultContentType is the datacontenttype a row without a content-type header
	// arrives with (the HTTP driver sends application/octet-stream), or "".
	DefaultContentType string
	// Deduplicates says the destination keeps one message per event id (a JetStream
	// stream's duplicate window, the PostgreSQL inbox), so that a row published twice
	// arrives once.
	Deduplicates bool
}

// Check publishes three rows twice through a cloudevents route over h.Driver, receives
// them (six messages, or three where the destination de-duplicates on the event id)
// and decodes each with decode, failing t unless each is the event its row describes.
func Check(t *testing.T, h *routertest.Harness, decode Decode, o Options) {
	t.Helper()
	t.Cleanup(func() { _ = h.Driver.Close() })
	ce := &router.CloudEvents{Type: "com.example.order.placed", Source: "urn:example:shop", SubjectFromKey: true}
	r, err := router.New([]router.Route{{Stream: "conformance", DriverName: "under-test", Driver: h.Driver, CloudEvents: ce}})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := r.Publisher("conformance")
	if err != nil {
		t.Fatal(err)
	}
	topic := h.Topic(t)
	created := time.Date(2026, 5, 1, 12, 30, 0, 123_456_000, time.UTC)
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	rows := []router.Message{
		{ID: 1, Stream: "conformance", Topic: topic, Key: []byte("order-1"), Payload: []byte(`{"n":1}`),
			Headers: map[string]string{"content-type": "application/json"}, RowDedupID: run + "-1", CreatedAt: created},
		{ID: 2, Stream: "conformance", Topic: topic, Payload: []byte("plain text"), RowDedupID: run + "-2", CreatedAt: created,
			Headers: map[string]string{"ce-type": "com.example.order.paid", "ce-source": "/shop/eu", "ce-region": "eu1", "tenant": "t7"}},
		{ID: 3, Stream: "conformance", Topic: topic, Key: []byte("order-3"), Payload: []byte{0, 1, 2, 0xff},
			MessageID: "producer-chosen-" + run, CreatedAt: created},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for round := range 2 {
		for i, err := range pub.Publish(ctx, rows) {
			if err != nil {
				t.Fatalf("publish %d of row %d: %v", round+1, rows[i].ID, err)
			}
		}
	}
	copies := 2
	if o.Deduplicates {
		copies = 1
	}
	got := h.Receive(t, topic, copies*len(rows))
	byData := map[string][]*event.Event{}
	for _, m := range got {
		ev, err := decode(m)
		if err != nil {
			t.Fatalf("the SDK could not decode %v: %v", m, err)
		}
		if err := ev.Validate(); err != nil {
			t.Fatalf("decoded event %v is not valid: %v", ev, err)
		}
		byData[string(ev.Data())] = append(byData[string(ev.Data())], ev)
	}
	want := []struct {
		id, typ, source, subject, contentType, region string
	}{
		{run + "-1", "com.example.order.placed", "urn:example:shop", "order-1", "application/json", ""},
		{run + "-2", "com.example.order.paid", "/shop/eu", "", o.DefaultContentType, "eu1"},
		{"producer-chosen-" + run, "com.example.order.placed", "urn:example:shop", "order-3", o.DefaultContentType, ""},
	}
	for i, w := range want {
		evs := byData[string(rows[i].Payload)]
		if len(evs) != copies {
			t.Fatalf("row %d: %d events carry its payload %q as data, want %d; data seen: %q",
				rows[i].ID, len(evs), rows[i].Payload, copies, keys(byData))
		}
		for _, ev := range evs {
			if ev.ID() != w.id || ev.Type() != w.typ || ev.Source() != w.source || ev.Subject() != w.subject ||
				ev.DataContentType() != w.contentType || ev.SpecVersion() != "1.0" {
				t.Errorf("row %d: event id=%q type=%q source=%q subject=%q datacontenttype=%q specversion=%q; "+
					"want id=%q type=%q source=%q subject=%q datacontenttype=%q specversion=1.0", rows[i].ID,
					ev.ID(), ev.Type(), ev.Source(), ev.Subject(), ev.DataContentType(), ev.SpecVersion(),
					w.id, w.typ, w.source, w.subject, w.contentType)
			}
			if !ev.Time().Equal(created) {
				t.Errorf("row %d: event time %s, want the row's created_at %s", rows[i].ID, ev.Time(), created)
			}
			if region, _ := ev.Extensions()["region"].(string); region != w.region {
				t.Errorf("row %d: extension region %q, want %q", rows[i].ID, region, w.region)
			}
		}
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// FromHeaders decodes a binary-mode message whose attributes are the headers named
// prefix and the attribute, and whose datacontenttype is the header contentType (any
// case), through the SDK's binding layer as its protocol modules do.
func FromHeaders(prefix, contentType string) Decode {
	versions := spec.WithPrefix(prefix)
	return func(r routertest.Received) (*event.Event, error) {
		return binding.ToEvent(context.Background(), &headerMessage{r: r, versions: versions, contentType: contentType})
	}
}

// headerMessage is a received message as a binding.Message in binary mode.
type headerMessage struct {
	r           routertest.Received
	versions    *spec.Versions
	contentType string
}

func (m *headerMessage) version() spec.Version {
	return m.versions.Version(m.r.Headers[m.versions.PrefixedSpecVersionName()])
}

func (m *headerMessage) ReadEncoding() binding.Encoding {
	if m.version() == nil {
		return binding.EncodingUnknown
	}
	return binding.EncodingBinary
}

func (m *headerMessage) ReadStructured(context.Context, binding.StructuredWriter) error {
	return binding.ErrNotStructured
}

func (m *headerMessage) ReadBinary(_ context.Context, w binding.BinaryWriter) error {
	v := m.version()
	if v == nil {
		return binding.ErrUnknownEncoding
	}
	for name, value := range m.r.Headers {
		switch {
		case strings.EqualFold(name, m.contentType):
			if err := w.SetAttribute(v.AttributeFromKind(spec.DataContentType), value); err != nil {
				return err
			}
		case strings.HasPrefix(name, m.versions.Prefix()):
			if attr := v.Attribute(name); attr != nil {
				if err := w.SetAttribute(attr, value); err != nil {
					return err
				}
			} else if err := w.SetExtension(strings.TrimPrefix(name, m.versions.Prefix()), value); err != nil {
				return err
			}
		}
	}
	return w.SetData(bytes.NewReader(m.r.Payload))
}

func (m *headerMessage) Finish(error) error { return nil }

// GetAttribute and GetExtension serve the SDK's readers of metadata.
func (m *headerMessage) GetAttribute(k spec.Kind) (spec.Attribute, any) {
	v := m.version()
	if v == nil {
		return nil, nil
	}
	attr := v.AttributeFromKind(k)
	if attr == nil {
		return nil, nil
	}
	if k == spec.DataContentType {
		return attr, m.r.Headers[m.contentType]
	}
	return attr, m.r.Headers[attr.PrefixedName()]
}

func (m *headerMessage) GetExtension(name string) any { return m.r.Headers[m.versions.Prefix()+name] }

var (
	_ binding.Message               = (*headerMessage)(nil)
	_ binding.MessageMetadataReader = (*headerMessage)(nil)
)

// HeaderName is one case of HeaderNames: the attribute, and the header (or property)
// its binding carries it in.
type HeaderName struct{ Name, Attr, Want string }

// HeaderNames checks, a subtest per case, that b names each attribute's header as the
// case says.
func HeaderNames(t *testing.T, b router.EventBinding, cases []HeaderName) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			if got := b.EventHeader(tc.Attr); got != tc.Want {
				t.Fatalf("EventHeader(%q) = %q, want %q", tc.Attr, got, tc.Want)
			}
		})
	}
}
