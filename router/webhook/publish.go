package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/outboxd/outboxd/router"
)

const (
	// drainBytes is how much of an answer's body is read to keep its connection for
	// the next request; a longer body costs the connection instead.
	drainBytes = 64 << 10
	// readBytes is how much of an error answer's body is read for its message.
	readBytes = 1 << 10
)

// Publish posts msgs and returns one error per message, in order. Messages refused
// before sending (Check) fail alone; the rest are posted, per message or per batch.
func (d *Driver) Publish(ctx context.Context, msgs []router.Message) []error {
	if len(msgs) == 0 {
		return nil
	}
	errs := make([]error, len(msgs))
	d.mu.RLock()
	defer d.mu.RUnlock()
	var fail error
	switch {
	case d.closed:
		fail = router.Unreachable(fmt.Errorf("http driver %q: %w", d.name, router.ErrClosed))
	case ctx.Err() != nil:
		fail = router.Canceled(fmt.Errorf("http driver %q: %w", d.name, ctx.Err()))
	}
	if fail != nil {
		for i := range errs {
			errs[i] = fail
		}
		return errs
	}
	all := make([]int, len(msgs))
	for i := range msgs {
		errs[i] = d.Check(&msgs[i])
		all[i] = i
	}
	p := &publish{d: d, msgs: msgs, errs: errs, ordered: router.KeyOrdered(ctx), sem: make(chan struct{}, d.conc)}
	if d.batch {
		p.batches(ctx, all)
	} else {
		p.each(ctx, all, p.postMessage)
	}
	return errs
}

// publish is one Publish call's work: its messages, their results, and the slots
// bounding its requests in flight.
type publish struct {
	d       *Driver
	msgs    []router.Message
	errs    []error // written only for the indices a goroutine owns
	ordered bool
	sem     chan struct{}
}

// each sends the messages at idx one request each: a key's messages one after another,
// in order, and different keys (or none) in parallel. In a key-ordered publish, a key
// whose message failed (here or in Check) sends nothing more.
func (p *publish) each(ctx context.Context, idx []int, send func(ctx context.Context, i int) error) {
	var lanes [][]int
	byKey := map[string]int{}
	for _, i := range idx {
		k := p.msgs[i].Key
		if k == nil {
			lanes = append(lanes, []int{i})
			continue
		}
		lane, ok := byKey[string(k)]
		if !ok {
			lane = len(lanes)
			byKey[string(k)] = lane
			lanes = append(lanes, nil)
		}
		lanes[lane] = append(lanes[lane], i)
	}
	var wg sync.WaitGroup
	for _, lane := range lanes {
		wg.Go(func() {
			failed := -1 // the lane's message that did not go through
			for _, i := range lane {
				switch {
				case failed >= 0 && p.ordered:
					m := &p.msgs[i]
					p.errs[i] = router.HeldBack(fmt.Errorf("message %d waits for message %d of key %q, which did not go through",
						m.ID, p.msgs[failed].ID, m.Key))
					continue
				case p.errs[i] == nil:
					p.errs[i] = send(ctx, i)
				}
				if p.errs[i] != nil && failed < 0 {
					failed = i
				}
			}
		})
	}
	wg.Wait()
}

// postMessage posts message i alone, its payload as the body.
func (p *publish) postMessage(ctx context.Context, i int) error {
	m := &p.msgs[i]
	return p.post(ctx, p.d.url.resolve(m.Topic), m.Payload, p.d.messageHeader(m), 0)
}

// messageHeader is the request header of m in per-message mode: the producer's headers,
// the static ones (which win), Content-Type from the producer's content-type header, and
// the outbox headers (which win over all).
func (d *Driver) messageHeader(m *router.Message) http.Header {
	h := make(http.Header, len(m.Headers)+len(d.static)+7)
	contentType := "application/octet-stream"
	for k, v := range m.Headers {
		if strings.EqualFold(k, "content-type") {
			contentType = v
			continue
		}
		h.Add(k, v)
	}
	for k, v := range d.static {
		h[k] = v
	}
	h["Content-Type"] = []string{contentType}
	h[router.HeaderID] = []string{strconv.FormatInt(m.ID, 10)}
	h[router.HeaderStream] = []string{m.Stream}
	h[router.HeaderMessageID] = []string{m.DedupID()}
	h[HeaderTopic] = []string{m.Topic}
	if m.Key != nil {
		h[router.HeaderKey] = []string{string(m.Key)}
	}
	return h
}

// post sends one POST of body to target with header h (signed when the driver has a
// secret), taking a slot of p's for the request. It returns nil for a 2xx answer and a
// classified error otherwise; messages is the batch's size, 0 for a single message.
func (p *publish) post(ctx context.Context, target string, body []byte, h http.Header, messages int) error {
	select {
	case p.sem <- struct{}{}:
		defer func() { <-p.sem }()
	case <-ctx.Done():
	}
	return p.d.post(ctx, target, body, h, messages)
}

func (d *Driver) post(ctx context.Context, target string, body []byte, h http.Header, messages int) error {
	where := shown(target)
	if err := ctx.Err(); err != nil {
		return router.Canceled(fmt.Errorf("POST %s: %w", where, err))
	}
	rctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	var connected atomic.Bool
	trace := &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { connected.Store(true) }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(rctx, trace), http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its text quotes the whole URL
		}
		return router.Permanent(fmt.Errorf("POST %s: %w", where, err))
	}
	req.Header = h
	if d.secret != nil {
		h[d.sigHeader] = []string{d.sign(body)}
	}
	resp, err := d.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return router.Canceled(fmt.Errorf("POST %s: %w", where, ctx.Err()))
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return classify(&requestError{Method: http.MethodPost, URL: where, Err: err, Connected: connected.Load(),
			TimedOut: rctx.Err() != nil, Timeout: d.timeout})
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainBytes))
		return nil
	}
	return classify(d.statusError(resp, where, messages))
}

// statusError reads what an answer other than 2xx says.
func (d *Driver) statusError(resp *http.Response, where string, messages int) *StatusError {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, readBytes))
	e := &StatusError{Method: http.MethodPost, URL: where, Code: resp.StatusCode, Status: resp.Status,
		Body: bodySnippet(body), Messages: messages}
	if e.Status == "" {
		e.Status = strconv.Itoa(resp.StatusCode)
	}
	if loc := resp.Header.Get("Location"); loc != "" {
		e.Location = shown(loc)
	}
	if statusKind(resp.StatusCode) == router.KindRetryable {
		e.RetryAfter, _ = parseRetryAfter(resp.Header.Get("Retry-After"), d.now())
	}
	return e
}
