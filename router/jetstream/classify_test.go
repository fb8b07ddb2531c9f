package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxd/outboxd/router"
)

// fromServer returns the error a PubAck carrying e decodes to in the client: the
// server's own error value, through the JSON the server sends.
func fromServer(t *testing.T, e *server.ApiError) error {
	t.Helper()
	wire, err := json.Marshal(map[string]any{"error": e})
	if err != nil {
		t.Fatal(err)
	}
	var resp struct {
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(wire, &resp); err != nil || resp.Error == nil {
		t.Fatalf("decode %s: %v", wire, err)
	}
	return resp.Error
}

func TestClassify(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		err  func(t *testing.T) error
		want router.Kind
	}{
		// No stream.
		{"a subject no stream captures is permanent", static(jetstream.ErrNoStreamResponse), router.KindPermanent},
		{"no responders on the subject is permanent", static(nats.ErrNoResponders), router.KindPermanent},
		{"a stream-not-found reply is permanent", apiErr(server.NewJSStreamNotFoundError()), router.KindPermanent},
		{"a reply that was not a PubAck, on a subject the server says no stream captures, is permanent", static(fmt.Errorf("%w: %w", errNoStream, jetstream.ErrInvalidJSAck)), router.KindPermanent},
		{"no reply within the publish timeout, on a subject the server says no stream captures, is permanent", static(fmt.Errorf("%w: %w", errNoStream, jetstream.ErrAsyncPublishTimeout)), router.KindPermanent},
		// Size.
		{"a payload over the server's max_payload is permanent", static(nats.ErrMaxPayload), router.KindPermanent},
		{"a message over the stream's maximum size is permanent", apiErr(server.NewJSStreamMessageExceedsMaximumError()), router.KindPermanent},
		{"the library's message-exceeds-maximum error is permanent", static(jetstream.ErrStreamMessageExceedsMaximum), router.KindPermanent},
		{"a store failure for a message too large is permanent", apiErr(server.NewJSStreamStoreFailedError(server.ErrMsgTooLarge)), router.KindPermanent},
		// Storage limits.
		{"a stream at its message limit is retryable", apiErr(server.NewJSStreamStoreFailedError(server.ErrMaxMsgs)), router.KindRetryable},
		{"a stream at its byte limit is retryable", apiErr(server.NewJSStreamStoreFailedError(server.ErrMaxBytes)), router.KindRetryable},
		{"a subject at its per-subject limit is retryable", apiErr(server.NewJSStreamStoreFailedError(server.ErrMaxMsgsPerSubject)), router.KindRetryable},
		{"insufficient resources are retryable", apiErr(server.NewJSInsufficientResourcesError()), router.KindRetryable},
		{"exhausted storage resources are retryable", apiErr(server.NewJSStorageResourcesExceededError()), router.KindRetryable},
		{"exhausted memory resources are retryable", apiErr(server.NewJSMemoryResourcesExceededError()), router.KindRetryable},
		{"an account over its resource limits is retryable", apiErr(server.NewJSAccountResourcesExceededError()), router.KindRetryable},
		// Availability.
		{"JetStream temporarily unavailable is retryable", apiErr(server.NewJSClusterNotAvailError()), router.KindRetryable},
		{"an offline stream is retryable", apiErr(server.NewJSStreamOfflineError()), router.KindRetryable},
		{"no PubAck within the publish timeout is retryable", static(jetstream.ErrAsyncPublishTimeout), router.KindRetryable},
		{"a stalled async publisher is retryable", static(jetstream.ErrTooManyStalledMsgs), router.KindRetryable},
		{"an unreadable PubAck is retryable", static(jetstream.ErrInvalidJSAck), router.KindRetryable},
		{"an API error outboxd does not know is retryable", static(&jetstream.APIError{Code: 500, ErrorCode: 65000, Description: "new"}), router.KindRetryable},
		// Producer expectations and stream state.
		{"a wrong expected stream is permanent", apiErr(server.NewJSStreamNotMatchError()), router.KindPermanent},
		{"a wrong expected last message id is permanent", apiErr(server.NewJSStreamWrongLastMsgIDError("m-1")), router.KindPermanent},
		{"a wrong expected last sequence is permanent", apiErr(server.NewJSStreamWrongLastSequenceError(7)), router.KindPermanent},
		{"a wrong expected last sequence on a replicated stream is permanent", apiErr(server.NewJSStreamWrongLastSequenceConstantError()), router.KindPermanent},
		{"a missing sequence for an expected per-subject sequence is permanent", apiErr(server.NewJSStreamExpectedLastSeqPerSubjectInvalidError()), router.KindPermanent},
		{"a sealed stream is permanent", apiErr(server.NewJSStreamSealedError()), router.KindPermanent},
		{"an invalid per-message TTL is permanent", apiErr(server.NewJSMessageTTLInvalidError()), router.KindPermanent},
		{"a per-message TTL on a stream without them is permanent", apiErr(server.NewJSMessageTTLDisabledError()), router.KindPermanent},
		{"a schedule on a stream without schedules is permanent", apiErr(server.NewJSMessageSchedulesDisabledError()), router.KindPermanent},
		{"an invalid schedule pattern is permanent", apiErr(server.NewJSMessageSchedulesPatternInvalidError()), router.KindPermanent},
		// Connection.
		{"a connection lost while awaiting the PubAck is unreachable", static(nats.ErrDisconnected), router.KindUnreachable},
		{"a publish while reconnecting is unreachable", static(nats.ErrReconnectBufExceeded), router.KindUnreachable},
		{"a closed connection is unreachable", static(nats.ErrConnectionClosed), router.KindUnreachable},
		{"the caller's cancellation is canceled", static(context.Canceled), router.KindCanceled},
		{"an error nobody classified is retryable", static(errors.New("something else")), router.KindRetryable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cause := c.err(t)
			got := classify("orders.created", cause)
			if k := router.KindOf(got); k != c.want {
				t.Fatalf("classify(%v) is %s, want %s", cause, k, c.want)
			}
			if !errors.Is(got, cause) {
				t.Fatalf("classify(%v) = %v lost the cause", cause, got)
			}
			if !strings.Contains(got.Error(), "orders.created") {
				t.Fatalf("classify(%v) = %q does not name the subject", cause, got)
			}
		})
	}
}

func TestClassifyTellsWhichSubjectNoStreamCaptures(t *testing.T) {
	t.Parallel()
	got := classify("orders.created", jetstream.ErrNoStreamResponse)
	if want := "no JetStream stream captures subject orders.created"; !strings.Contains(got.Error(), want) {
		t.Fatalf("error %q does not say %q", got, want)
	}
}

// The table relies on our codes matching the server's; the server is the reference.
func TestTheErrorCodesAreTheServers(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		ours jetstream.ErrorCode
		srv  *server.ApiError
	}{
		{"account resources exceeded", codeAccountResourcesExceeded, server.NewJSAccountResourcesExceededError()},
		{"cluster not available", codeClusterNotAvailable, server.NewJSClusterNotAvailError()},
		{"insufficient resources", codeInsufficientResources, server.NewJSInsufficientResourcesError()},
		{"memory resources exceeded", codeMemoryResourcesExceeded, server.NewJSMemoryResourcesExceededError()},
		{"storage resources exceeded", codeStorageResourcesExceeded, server.NewJSStorageResourcesExceededError()},
		{"stream not match", codeStreamNotMatch, server.NewJSStreamNotMatchError()},
		{"wrong last msg id", codeWrongLastMsgID, server.NewJSStreamWrongLastMsgIDError("x")},
		{"store failed", codeStoreFailed, server.NewJSStreamStoreFailedError(server.ErrMaxMsgs)},
		{"stream sealed", codeStreamSealed, server.NewJSStreamSealedError()},
		{"stream offline", codeStreamOffline, server.NewJSStreamOfflineError()},
		{"message TTL invalid", codeMessageTTLInvalid, server.NewJSMessageTTLInvalidError()},
		{"message TTL disabled", codeMessageTTLDisabled, server.NewJSMessageTTLDisabledError()},
		{"expected last seq per subject missing", codeExpectedLastSeqMissing, server.NewJSStreamExpectedLastSeqPerSubjectInvalidError()},
	}
	for _, c := range cases {
		if uint16(c.ours) != c.srv.ErrCode {
			t.Errorf("%s: ours %d, the server's %d", c.name, c.ours, c.srv.ErrCode)
		}
	}
	if d := server.NewJSStreamStoreFailedError(server.ErrMsgTooLarge).Description; !strings.Contains(d, storeFailedTooLarge) {
		t.Errorf("the server describes a too-large store failure as %q, not containing %q", d, storeFailedTooLarge)
	}
}

func static(err error) func(*testing.T) error { return func(*testing.T) error { return err } }

func apiErr(e *server.ApiError) func(*testing.T) error {
	return func(t *testing.T) error { return fromServer(t, e) }
}
