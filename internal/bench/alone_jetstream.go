package bench

// The database and JetStream alone (--alone): a claimer process (runClaimer) that, between
// each held claim and its commit, publishes the claimed rows to the bench's JetStream
// stream the least a client of nats.go can do for them, and waits for every PubAck. No
// outboxd driver, router, pipeline or checks run: no JetStream drain on this machine,
// with these claims, can move a backlog faster than this process does.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/store"
)

// aloneSubject is where the alone claimer publishes: inside the bench stream's subjects.
const aloneSubject = benchPrefix + "alone"

// jetStreamAlone publishes claimed batches with one nats.go connection. Each claimer
// goroutine (worker) reuses its messages, built once with the headers the jetstream
// driver sets, only their values rewritten; PubAcks come back to one inbox subscription,
// which counts them per batch and looks no further into them than for an error.
type jetStreamAlone struct {
	nc      *natsgo.Conn
	inbox   string
	msgs    [][]*natsgo.Msg // per worker
	mu      sync.Mutex
	batches map[uint64]*aloneBatch
	last    uint64
}

// aloneBatch is one publish call's PubAcks still awaited.
type aloneBatch struct {
	left int
	err  error
	done chan struct{}
}

// newJetStreamAlone connects to url and subscribes to its inbox, for workers goroutines
// claiming batches of at most batch rows.
func newJetStreamAlone(url string, workers, batch int) (*jetStreamAlone, error) {
	nc, err := natsgo.Connect(url, natsgo.Timeout(10*time.Second))
	if err != nil {
		return nil, fmt.Errorf("connect to NATS: %w", err)
	}
	j := &jetStreamAlone{nc: nc, inbox: nc.NewInbox() + ".", msgs: make([][]*natsgo.Msg, workers), batches: map[uint64]*aloneBatch{}}
	if _, err := nc.Subscribe(j.inbox+"*.*", j.onAck); err != nil {
		nc.Close()
		return nil, err
	}
	for w := range j.msgs {
		j.msgs[w] = make([]*natsgo.Msg, batch)
		for i := range j.msgs[w] {
			j.msgs[w][i] = &natsgo.Msg{Subject: aloneSubject, Header: natsgo.Header{
				router.HeaderID: {""}, router.HeaderStream: {""}, router.HeaderKey: {""},
				router.HeaderMessageID: {""}, natsgo.MsgIdHdr: {""}}}
		}
	}
	return j, nil
}

func (j *jetStreamAlone) close() { j.nc.Close() }

// onAck counts a PubAck towards its batch; an answer naming an error fails the batch.
func (j *jetStreamAlone) onAck(m *natsgo.Msg) {
	rest, ok := strings.CutPrefix(m.Subject, j.inbox)
	if !ok {
		return
	}
	batch, _, _ := strings.Cut(rest, ".")
	id, err := strconv.ParseUint(batch, 10, 64)
	if err != nil {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	b := j.batches[id]
	if b == nil {
		return
	}
	if b.err == nil && (len(m.Data) == 0 || bytes.Contains(m.Data, []byte(`"error"`))) {
		b.err = fmt.Errorf("JetStream answered %q", m.Data)
	}
	if b.left--; b.left == 0 {
		delete(j.batches, id)
		close(b.done)
	}
}

// publish publishes c's rows as worker and returns once the stream acknowledged every
// one, or with the first refusal. claimAck never claims more than the batch size the
// messages were made for.
func (j *jetStreamAlone) publish(ctx context.Context, worker int, c store.Claim) error {
	j.mu.Lock()
	j.last++
	id := j.last
	b := &aloneBatch{left: len(c.Messages), done: make(chan struct{})}
	j.batches[id] = b
	j.mu.Unlock()
	prefix := j.inbox + strconv.FormatUint(id, 10) + "."
	for i := range c.Messages {
		r, m := &c.Messages[i], j.msgs[worker][i]
		dedup := r.MessageID
		if dedup == "" {
			dedup = r.DedupID
		}
		m.Data, m.Reply = r.Payload, prefix+strconv.Itoa(i)
		m.Header[router.HeaderID][0] = strconv.FormatInt(r.ID, 10)
		m.Header[router.HeaderStream][0] = r.Stream
		m.Header[router.HeaderKey][0] = string(r.Key)
		m.Header[router.HeaderMessageID][0], m.Header[natsgo.MsgIdHdr][0] = dedup, dedup
		if err := j.nc.PublishMsg(m); err != nil {
			return err
		}
	}
	select {
	case <-b.done:
		return b.err
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Minute):
		return errors.New("no PubAck for a minute")
	}
}
