package jetstream

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/natsconn"
)

// JetStream API error codes a PubAck can carry that the client library has no constant
// for (the server's errors.json is the reference).
const (
	codeAccountResourcesExceeded jetstream.ErrorCode = 10002
	codeClusterNotAvailable      jetstream.ErrorCode = 10008
	codeInsufficientResources    jetstream.ErrorCode = 10023
	codeMemoryResourcesExceeded  jetstream.ErrorCode = 10028
	codeStorageResourcesExceeded jetstream.ErrorCode = 10047
	codeStreamNotMatch           jetstream.ErrorCode = 10060
	codeWrongLastMsgID           jetstream.ErrorCode = 10070
	codeStoreFailed              jetstream.ErrorCode = 10077
	codeStreamSealed             jetstream.ErrorCode = 10109
	codeStreamOffline            jetstream.ErrorCode = 10118
	codeMessageTTLInvalid        jetstream.ErrorCode = 10165
	codeMessageTTLDisabled       jetstream.ErrorCode = 10166
	codeExpectedLastSeqMissing   jetstream.ErrorCode = 10193
)

// storeFailedTooLarge is the description the server gives a store failure (code 10077)
// caused by the message's size rather than by a limit the stream reached.
const storeFailedTooLarge = "message too large"

// errNoStream is a publish's failure once the server confirmed that no stream captures
// its subject (confirmNoStream), whatever answer, or none, the publish got.
var errNoStream = errors.New("the server confirms no stream captures the subject")

// classify maps the error of a message published to subject to what it costs the
// dispatcher:
//
//   - permanent: no stream captures the subject (no responders, or no stream response
//     after the client's retries, or a reply that was not a PubAck or no reply at all
//     when the server confirms it has no stream for the subject: errNoStream); the message exceeds the stream's or the server's size
//     limit; an expectation the producer put in its headers failed (expected stream,
//     last sequence, last message id); the stream is sealed; a per-message TTL or a
//     schedule the stream refuses;
//   - retryable: the stream reached a limit with the discard-new policy (maximum
//     messages, bytes, messages per subject), the server or account lacks resources,
//     the cluster or stream is not available now, no PubAck within the publish timeout,
//     an unreadable PubAck, and any API error not listed here;
//   - otherwise the client's own rules (natsconn.Classify): a connection that is down
//     or lost while the PubAck was awaited is unreachable.
func classify(subject string, err error) error {
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		return nil
	case isAny(err, jetstream.ErrNoStreamResponse, nats.ErrNoResponders, errNoStream):
		return router.Permanent(fmt.Errorf("no JetStream stream captures subject %s: %w", subject, err))
	case errors.As(err, &apiErr):
		err = fmt.Errorf("publish to %s: %w", subject, err)
		if permanentAPIError(apiErr) {
			return router.Permanent(err)
		}
		return router.Retryable(err)
	case isAny(err, jetstream.ErrAsyncPublishTimeout, jetstream.ErrTooManyStalledMsgs, jetstream.ErrInvalidJSAck):
		return router.Retryable(fmt.Errorf("publish to %s: %w", subject, err))
	}
	return natsconn.Classify(fmt.Errorf("publish to %s: %w", subject, err))
}

// permanentAPIError says whether the server refused the message for a reason that
// publishing it again cannot change.
func permanentAPIError(e *jetstream.APIError) bool {
	switch e.ErrorCode {
	case codeStoreFailed:
		// The same code covers limits reached (retryable) and a message too large.
		return strings.Contains(e.Description, storeFailedTooLarge)
	case jetstream.JSErrCodeStreamMessageExceedsMaximum,
		jetstream.JSErrCodeStreamNotFound,
		codeStreamNotMatch, codeWrongLastMsgID,
		jetstream.JSErrCodeStreamWrongLastSequence, jetstream.JSErrCodeStreamWrongLastSequenceConstant,
		codeExpectedLastSeqMissing, codeStreamSealed,
		codeMessageTTLInvalid, codeMessageTTLDisabled,
		jetstream.JSErrCodeMessageSchedulesDisabled, jetstream.JSErrCodeSchedulePatternInvalid,
		jetstream.JSErrCodeScheduleTargetInvalid, jetstream.JSErrCodeScheduleTTLInvalid,
		jetstream.JSErrCodeScheduleRollupInvalid, jetstream.JSErrCodeScheduleSourceInvalid:
		return true
	case codeAccountResourcesExceeded, codeClusterNotAvailable, codeInsufficientResources,
		codeMemoryResourcesExceeded, codeStorageResourcesExceeded, codeStreamOffline:
		return false
	}
	return false
}

func isAny(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}
