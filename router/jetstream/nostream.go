package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxd/outboxd/router"
)

// streamNamesAPI is the JetStream API subject that lists the streams whose subjects
// cover a given subject (the request the client library's StreamNameBySubject sends).
const streamNamesAPI = "$JS.API.STREAM.NAMES"

// confirmNoStream turns into permanent refusals the retryable failures of msgs that
// mean no stream captures their subject when the server confirms it: an answer that was
// not a PubAck, or no answer at all within the publish timeout. A core NATS subscriber
// listening on a subject no stream captures answers in the stream's place (or not at
// all), so the server never says "no responders" for it; the message would otherwise be
// retried for ever. The server is asked once per subject; when it cannot be asked, or a
// stream does capture the subject (a slow stream, or a subscriber that answered first),
// the failure stays retryable.
func (d *Driver) confirmNoStream(ctx context.Context, msgs []router.Message, errs []error) []error {
	var checked map[string]bool // subject → no stream captures it
	for i, err := range errs {
		if !maybeNoStream(err) {
			continue
		}
		subject := msgs[i].Topic
		none, ok := checked[subject]
		if !ok {
			covered, lookupErr := d.streamCovers(ctx, subject)
			none = lookupErr == nil && !covered
			if checked == nil {
				checked = map[string]bool{}
			}
			checked[subject] = none
		}
		if none {
			errs[i] = classify(subject, fmt.Errorf("%w: %w", errNoStream, errors.Unwrap(err)))
		}
	}
	return errs
}

// maybeNoStream says whether err is a retryable failure that a missing stream explains:
// an answer that was not a PubAck (ErrInvalidJSAck: a core subscriber's reply) or none.
func maybeNoStream(err error) bool {
	return err != nil && router.KindOf(err) == router.KindRetryable &&
		(errors.Is(err, jetstream.ErrInvalidJSAck) || errors.Is(err, jetstream.ErrAsyncPublishTimeout))
}

// streamCovers asks the server whether a stream captures subject, within the driver's
// publish timeout.
func (d *Driver) streamCovers(ctx context.Context, subject string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	return StreamCovers(ctx, d.nc, subject)
}

// StreamCovers asks the JetStream server behind nc whether any stream captures
// subject.
func StreamCovers(ctx context.Context, nc *nats.Conn, subject string) (bool, error) {
	req, err := json.Marshal(struct {
		Subject string `json:"subject"`
	}{subject})
	if err != nil {
		return false, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	resp, err := nc.RequestWithContext(ctx, streamNamesAPI, req)
	if err != nil {
		return false, fmt.Errorf("ask which stream captures %s: %w", subject, err)
	}
	var names struct {
		Error   *jetstream.APIError `json:"error"`
		Streams []string            `json:"streams"`
	}
	if err := json.Unmarshal(resp.Data, &names); err != nil {
		return false, fmt.Errorf("ask which stream captures %s: unreadable answer: %w", subject, err)
	}
	if names.Error != nil {
		return false, fmt.Errorf("ask which stream captures %s: %w", subject, names.Error)
	}
	return len(names.Streams) > 0, nil
}
