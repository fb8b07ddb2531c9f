package kafka

import (
	"context"
	"errors"

	"github.com/segmentio/kafka-go"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/driveropt"
)

// classify gives a kafka-go or network error its router kind, keeping its text and
// chain. An error a driver already classified keeps its kind.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var done *router.Error
	if errors.As(err, &done) {
		return err
	}
	return &router.Error{Kind: kindOf(err), Err: err}
}

func kindOf(err error) router.Kind {
	// Our own ending comes first: a dial aborted by our context wraps it too.
	if errors.Is(err, context.Canceled) {
		return router.KindCanceled
	}
	// A closed driver sends nothing; like the NATS drivers, say the broker never saw it.
	if errors.Is(err, router.ErrClosed) {
		return router.KindUnreachable
	}
	var code kafka.Error
	if errors.As(err, &code) {
		return codeKind(code)
	}
	if lostConnection(err) {
		return router.KindUnreachable
	}
	// Anything else, a produce request that timed out (context.DeadlineExceeded from
	// kafka-go's own per-attempt deadline) included, may have reached the broker:
	// retry, spending an attempt.
	return router.KindRetryable
}

// codeKind classifies a broker's error code for a produce or metadata request.
func codeKind(code kafka.Error) router.Kind {
	switch code {
	case kafka.UnknownTopicOrPartition, // the driver checks existence first; see Publish
		kafka.InvalidTopic,
		kafka.MessageSizeTooLarge,
		kafka.RecordListTooLarge,
		kafka.InvalidRecord,
		kafka.InvalidTimestamp,
		kafka.InvalidRequiredAcks,
		kafka.UnsupportedForMessageFormat,
		kafka.UnsupportedCompressionType,
		kafka.UnsupportedVersion,
		kafka.PolicyViolation,
		kafka.TopicAuthorizationFailed,
		kafka.ClusterAuthorizationFailed:
		return router.KindPermanent
	case kafka.SASLAuthenticationFailed, kafka.UnsupportedSASLMechanism, kafka.IllegalSASLState:
		// Credentials are the driver's, not the message's: failing messages for a bad
		// password would fail every message of every stream on this driver. As with TLS
		// failures, nothing was sent; defer and let the breaker pause the streams.
		return router.KindUnreachable
	case kafka.BrokerNotAvailable:
		// kafka-go answers this itself when the partition's leader is not among the
		// brokers it knows, before sending anything.
		return router.KindUnreachable
	}
	// NOT_ENOUGH_REPLICAS, NOT_LEADER_FOR_PARTITION, LEADER_NOT_AVAILABLE,
	// REQUEST_TIMED_OUT, throttling and codes we do not know: the broker may take the
	// message later.
	return router.KindRetryable
}

// lostConnection reports an error that means we did not get to talk Kafka to the
// broker: it could not be dialled, resolved or TLS-verified, or the connection we had
// was closed under us.
func lostConnection(err error) bool { return driveropt.LostConnection(err) }
