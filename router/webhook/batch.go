package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"

	"github.com/outboxd/outboxd/router"
)

// maxBatchBodyBytes bounds the JSON body of one batch request: a batch whose messages
// would make a larger body is posted in several requests, one after another. A single
// message larger than this still goes alone.
const maxBatchBodyBytes = 4 << 20

// item is one message in a batch's JSON body. Key and Payload are bytes, which
// encoding/json writes as standard base64; a message without a key has "key": null.
type item struct {
	ID        int64             `json:"id"`
	MessageID string            `json:"message_id"`
	Stream    string            `json:"stream"`
	Topic     string            `json:"topic"`
	Key       []byte            `json:"key"`
	Headers   map[string]string `json:"headers"`
	Payload   []byte            `json:"payload"`
}

// noHeaders and noPayload stand for nil ones, so the JSON says {} and "" rather than null.
var (
	noHeaders = map[string]string{}
	noPayload = []byte{}
)

// batches posts the messages at idx as JSON arrays, one request per URL (and more when
// the body would exceed maxBatchBodyBytes), URLs in parallel and one URL's requests in
// order. A request refused with a 4xx is posted again message by message (each a
// one-element array), so that only what the endpoint refuses fails.
func (p *publish) batches(ctx context.Context, idx []int) {
	var urls []string
	groups := map[string][]int{}
	for _, i := range idx {
		u := p.d.url.resolve(p.msgs[i].Topic)
		if _, ok := groups[u]; !ok {
			urls = append(urls, u)
		}
		groups[u] = append(groups[u], i)
	}
	var wg sync.WaitGroup
	for _, u := range urls {
		wg.Go(func() { p.batchesTo(ctx, u, groups[u]) })
	}
	wg.Wait()
}

// batchesTo posts the messages at idx, all bound for target, in requests of bounded
// size, one after another. In a key-ordered publish, a key with a message that did not
// go through sends nothing more.
func (p *publish) batchesTo(ctx context.Context, target string, idx []int) {
	stopped := map[string]int{} // key → the index of its message that did not go through
	note := func(i int) {
		if k := p.msgs[i].Key; p.ordered && k != nil && p.errs[i] != nil {
			if _, ok := stopped[string(k)]; !ok {
				stopped[string(k)] = i
			}
		}
	}
	for len(idx) > 0 {
		var send []int
		size := 2
		for len(idx) > 0 {
			i := idx[0]
			m := &p.msgs[i]
			n := itemBytes(m)
			if len(send) > 0 && size+n > maxBatchBodyBytes {
				break
			}
			idx = idx[1:]
			if p.errs[i] != nil {
				note(i)
				continue
			}
			if first, ok := stopped[string(m.Key)]; ok && m.Key != nil {
				p.errs[i] = router.HeldBack(fmt.Errorf("message %d waits for message %d of key %q, which did not go through",
					m.ID, p.msgs[first].ID, m.Key))
				continue
			}
			send = append(send, i)
			size += n
		}
		if len(send) == 0 {
			continue
		}
		err := p.postBatch(ctx, target, send)
		switch {
		case err == nil:
		case len(send) > 1 && refusedBatch(err):
			p.each(ctx, send, func(ctx context.Context, i int) error { return p.postBatch(ctx, target, []int{i}) })
		default:
			for _, i := range send {
				p.errs[i] = err
			}
		}
		for _, i := range send {
			note(i)
		}
	}
}

// postBatch posts the messages at idx as one JSON array.
func (p *publish) postBatch(ctx context.Context, target string, idx []int) error {
	items := make([]item, len(idx))
	for j, i := range idx {
		m := &p.msgs[i]
		items[j] = item{ID: m.ID, MessageID: m.DedupID(), Stream: m.Stream, Topic: m.Topic, Key: m.Key,
			Headers: m.Headers, Payload: m.Payload}
		if items[j].Headers == nil {
			items[j].Headers = noHeaders
		}
		if items[j].Payload == nil {
			items[j].Payload = noPayload
		}
	}
	body, err := json.Marshal(items)
	if err != nil { // Check refused what JSON cannot carry; this is a bug
		return router.Permanent(fmt.Errorf("encode a batch of %d: %w", len(idx), err))
	}
	h := make(http.Header, len(p.d.static)+2)
	for k, v := range p.d.static {
		h[k] = v
	}
	h["Content-Type"] = []string{"application/json"}
	n := len(idx)
	if n == 1 {
		n = 0 // a message alone: its error is its own
	}
	return p.post(ctx, target, body, h, n)
}

// itemBytes estimates m's share of a batch body.
func itemBytes(m *router.Message) int {
	n := 96 + len(m.Topic) + len(m.Stream) + len(m.MessageID) + len(m.RowDedupID) + (len(m.Key)+len(m.Payload))*4/3
	for k, v := range m.Headers {
		n += len(k) + len(v) + 6
	}
	return n
}
