package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol/metadata"

	"github.com/outboxd/outboxd/router"
)

// metadataPoll is how often a publish waiting for the producer's metadata to learn a
// topic that exists looks again. It only reads kafka-go's cache.
const metadataPoll = 20 * time.Millisecond

// Publish writes msgs, in one produce request to each broker leading a partition they
// go to (produce.go), and returns one error per message, in order. Before writing it
// takes out, each with its own permanent error, the messages that cannot succeed:
// larger than a produce request may be, or bound for a topic that does not exist. A
// partition's batch the broker refuses as too large is re-sent message by message, so
// that only the message that is too large fails. Everything is bounded by ctx and the
// driver's write timeout.
func (d *Driver) Publish(ctx context.Context, msgs []router.Message) []error {
	if len(msgs) == 0 {
		return nil
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	c := &publishCall{d: d, ctx: ctx, msgs: msgs, out: make([]error, len(msgs))}
	if d.closed {
		for i := range msgs {
			c.out[i] = router.Unreachable(publishError(msgs[i].Topic, fmt.Errorf("kafka driver %q: %w", d.name, router.ErrClosed)))
		}
		return c.out
	}
	var cancel context.CancelFunc
	c.wctx, cancel = context.WithTimeout(ctx, d.writeTimeout)
	defer cancel()
	if ctx.Err() != nil {
		for i := range msgs {
			c.out[i] = c.failure(msgs[i].Topic, ctx.Err())
		}
		return c.out
	}
	c.run()
	return c.out
}

// publishCall is the state of one Publish.
type publishCall struct {
	d    *Driver
	ctx  context.Context // the caller's
	wctx context.Context // the caller's, bounded by the write timeout
	msgs []router.Message
	out  []error

	batch []kafka.Message // index-aligned with msgs
	parts []int32         // each message's partition, chosen at the first attempt
}

func (c *publishCall) run() {
	n := len(c.msgs)
	c.batch = make([]kafka.Message, n)
	var topics []string
	var stream []byte
	s := newSlab(n, &c.msgs[0])
	for i := range c.msgs {
		if string(stream) != c.msgs[i].Stream {
			stream = []byte(c.msgs[i].Stream)
		}
		c.batch[i] = message(&c.msgs[i], stream, s)
		topic := c.msgs[i].Topic
		switch size := requestSize(&c.batch[i]); {
		case topic == "":
			c.out[i] = router.Permanent(errors.New("publish: the message has no topic"))
		case badTopic(topic, &c.out[i]):
		case size > maxRequestBytes:
			m := &c.batch[i]
			c.out[i] = router.Permanent(publishError(topic, fmt.Errorf(
				"the message takes %d bytes (key %d, value %d, headers %d) and one produce request may take %d: %w",
				size, len(m.Key), len(m.Value), headerBytes(m), maxRequestBytes, kafka.MessageSizeTooLarge)))
		case !slices.Contains(topics, topic):
			topics = append(topics, topic)
		}
	}
	refused, layout := c.checkTopics(topics)

	send := make([]int, 0, n)
	for i := range c.msgs {
		if c.out[i] != nil {
			continue
		}
		if err, ok := refused[c.msgs[i].Topic]; ok {
			c.out[i] = err
			continue
		}
		send = append(send, i)
	}
	c.send(send, layout)

	if len(send) < 2 {
		return
	}
	// The broker refused a request as too large: its limit for that topic is lower
	// than ours, and the message at fault cannot be told from the others that shared
	// its request. Alone, each gets its own answer, in order. For an ordered stream,
	// once one of a key fails, the key's later messages are held back unsent, so that
	// none of them is appended ahead of it.
	ordered := router.KeyOrdered(c.ctx)
	var failedKeys map[string]int64
	for _, i := range send {
		if !tooLarge(c.out[i]) {
			continue
		}
		key := c.msgs[i].Key
		if id, ok := failedKeys[string(key)]; ok && key != nil {
			c.out[i] = router.HeldBack(publishError(c.msgs[i].Topic, fmt.Errorf(
				"message %d waits for message %d of key %q, which the broker refused", c.msgs[i].ID, id, key)))
			continue
		}
		c.out[i] = nil
		c.send([]int{i}, nil)
		if c.out[i] != nil && key != nil && ordered {
			if failedKeys == nil {
				failedKeys = map[string]int64{}
			}
			failedKeys[string(key)] = c.msgs[i].ID
		}
	}
}

// send publishes the messages at indexes idx and records their outcomes: up to
// writeAttempts attempts for those whose failure may pass, with a growing pause
// between them, all within the write timeout. A message confirmed keeps its success
// whatever happens to the others. layout, when not nil, is the metadata the first
// attempt routes by; later attempts read it again.
func (c *publishCall) send(idx []int, layout map[string]topicState) {
	for attempt := 1; len(idx) > 0; attempt++ {
		idx = c.produceOnce(idx, layout)
		layout = nil
		if len(idx) == 0 || attempt == writeAttempts {
			return
		}
		if !pause(c.wctx, writeBackoff(attempt)) {
			for _, i := range idx {
				c.out[i] = c.failure(c.msgs[i].Topic, c.wctx.Err())
			}
			return
		}
	}
}

// failure is the error of a message to topic whose outcome err left unknown: the
// caller's context ending wins, then the write timeout, then err's own kind.
func (c *publishCall) failure(topic string, err error) error {
	if ctxErr := c.ctx.Err(); ctxErr != nil {
		return router.Canceled(publishError(topic, ctxErr))
	}
	if c.wctx.Err() != nil {
		return router.Retryable(publishError(topic, fmt.Errorf("no answer within write_timeout %s: %w", c.d.writeTimeout, c.wctx.Err())))
	}
	return classify(publishError(topic, err))
}

// unsent is the error of a message to topic that was not sent because finding its
// topic failed with err. Short of a broker's own refusal (bad credentials, say) or the
// caller's context ending, no broker saw the message, whatever the cause: a refused or
// silent connection, a failed TLS handshake, or the write timeout passing meanwhile.
func (c *publishCall) unsent(topic string, err error) error {
	var code kafka.Error
	if c.ctx.Err() != nil || errors.As(err, &code) {
		return c.failure(topic, err)
	}
	return router.Unreachable(publishError(topic, fmt.Errorf("topic metadata: %w", err)))
}

// checkTopics returns the error of each topic in topics that cannot take messages now.
// A topic unknown to kafka-go's cached metadata is looked up afresh before it is called
// missing, because it may have been created since the cache was filled; when it exists
// after all, we wait, within the write timeout, for the cache to catch up, since
// kafka-go routes by the cache alone. When every topic was known, it also returns what
// the metadata said of them, for the first attempt to route by.
func (c *publishCall) checkTopics(topics []string) (map[string]error, map[string]topicState) {
	refused := map[string]error{}
	if len(topics) == 0 {
		return refused, nil
	}
	fail := func(topics []string, err error) (map[string]error, map[string]topicState) {
		for _, t := range topics {
			refused[t] = c.unsent(t, err)
		}
		return refused, nil
	}
	codes, err := c.d.topicMeta(c.wctx, c.d.transport, topics, c.d.autoCreate)
	if err != nil {
		return fail(topics, err)
	}
	var unknown []string
	for _, t := range topics {
		switch code := codes[t].code; {
		case code == 0:
		case code == kafka.UnknownTopicOrPartition && !c.d.autoCreate:
			unknown = append(unknown, t)
		default:
			refused[t] = classify(publishError(t, topicError(code, c.d.autoCreate)))
		}
	}
	if len(unknown) == 0 {
		return refused, codes
	}

	fresh := c.d.connect()
	fresh.MetadataTopics = unknown
	defer fresh.CloseIdleConnections()
	codes, err = c.d.topicMeta(c.wctx, fresh, unknown, false)
	if err != nil {
		return fail(unknown, err)
	}
	var created, missing []string
	for _, t := range unknown {
		switch code := codes[t].code; {
		case code == 0:
			created = append(created, t)
		case code == kafka.UnknownTopicOrPartition && c.d.provision.Enabled:
			missing = append(missing, t)
		default:
			refused[t] = classify(publishError(t, topicError(code, false)))
		}
	}
	for t, err := range c.d.createTopics(c.wctx, fresh, missing) {
		if err != nil {
			refused[t] = c.unsent(t, err)
		} else {
			created = append(created, t)
		}
	}
	if len(created) == 0 {
		return refused, nil
	}
	c.d.log.Debug("waiting for the producer's metadata to learn new topics", "topics", created)
	tick := time.NewTicker(metadataPoll)
	defer tick.Stop()
	for {
		codes, err = c.d.topicMeta(c.wctx, c.d.transport, created, false)
		if err == nil && !slices.ContainsFunc(created, func(t string) bool { return codes[t].code != 0 }) {
			return refused, nil
		}
		select {
		case <-c.wctx.Done():
			return fail(created, c.wctx.Err())
		case <-tick.C:
		}
	}
}

// topicState is what the metadata says of a topic: its error code, and the leader of
// each partition by partition index (-1 where none is known).
type topicState struct {
	code    kafka.Error
	leaders []int32
}

// topicMeta asks transport, which answers from its cache unless autoCreate is set, for
// the metadata of topics; a topic missing from the answer is unknown.
func (d *Driver) topicMeta(ctx context.Context, transport *kafka.Transport, topics []string, autoCreate bool) (map[string]topicState, error) {
	r, err := transport.RoundTrip(ctx, d.addr, &metadata.Request{TopicNames: topics, AllowAutoTopicCreation: autoCreate})
	if err != nil {
		return nil, err
	}
	res, ok := r.(*metadata.Response)
	if !ok {
		return nil, fmt.Errorf("metadata request answered with %T", r)
	}
	state := make(map[string]topicState, len(topics))
	for _, t := range topics {
		state[t] = topicState{code: kafka.UnknownTopicOrPartition}
	}
	for _, t := range res.Topics {
		s := topicState{code: kafka.Error(t.ErrorCode)}
		if len(t.Partitions) > 0 {
			s.leaders = make([]int32, len(t.Partitions))
			for i := range s.leaders {
				s.leaders[i] = -1
			}
			for _, p := range t.Partitions {
				if p.PartitionIndex >= 0 && int(p.PartitionIndex) < len(s.leaders) {
					s.leaders[p.PartitionIndex] = p.LeaderID
				}
			}
		}
		state[t.Name] = s
	}
	return state, nil
}

func topicError(code kafka.Error, autoCreate bool) error {
	switch {
	case code != kafka.UnknownTopicOrPartition:
		return fmt.Errorf("topic metadata: %w", code)
	case autoCreate:
		return fmt.Errorf("the topic does not exist and the cluster did not create it (allow_auto_topic_creation is on; is auto.create.topics.enable off on the brokers?): %w", code)
	}
	return fmt.Errorf("the topic does not exist and auto-creation is off (allow_auto_topic_creation): %w", code)
}

func publishError(topic string, err error) error {
	return fmt.Errorf("publish to %q: %w", topic, err)
}

func tooLarge(err error) bool {
	return errors.Is(err, kafka.MessageSizeTooLarge) || errors.Is(err, kafka.RecordListTooLarge)
}

// message is m as kafka-go writes it: the producer's headers in name order, then the
// outbox id, stream and message id (Kafka has no idempotent producer in kafka-go, so
// consumers de-duplicate on it), which replace any producer header of the same name.
//
// kafka-go only reads a header's value, so stream, when it holds m.Stream's bytes, is
// shared by every message of a call, and the message id reuses the outbox id's bytes
// when it is that id. The headers and their values are cut from s, shared by the
// messages of a call (nil: their own storage): a drain's allocations per message are
// what the broker needs.
func message(m *router.Message, stream []byte, s *slab) kafka.Message {
	headers := s.headers(len(m.Headers) + 3)
	if len(m.Headers) > 0 {
		var room [8]string
		names := room[:0]
		for name := range m.Headers {
			if name != router.HeaderID && name != router.HeaderStream && name != router.HeaderMessageID {
				names = append(names, name)
			}
		}
		slices.Sort(names)
		for _, name := range names {
			headers = append(headers, kafka.Header{Key: name, Value: s.text(m.Headers[name])})
		}
	}
	id := s.id(m.ID)
	if string(stream) != m.Stream {
		stream = []byte(m.Stream)
	}
	dedup := id // DedupID is the outbox id unless one of these is set
	if m.MessageID != "" || m.RowDedupID != "" {
		dedup = s.text(m.DedupID())
	}
	headers = append(headers,
		kafka.Header{Key: router.HeaderID, Value: id},
		kafka.Header{Key: router.HeaderStream, Value: stream},
		kafka.Header{Key: router.HeaderMessageID, Value: dedup},
	)
	return kafka.Message{Topic: m.Topic, Key: m.Key, Value: m.Payload, Headers: headers}
}

// slab is storage the messages of one Publish call take their headers from, a few
// large allocations for the call instead of several for each message. What it hands
// out is never written again: storage that runs out is replaced, not reused, so a
// message keeps its headers for as long as anything holds it. The nil slab allocates
// each piece on its own.
type slab struct {
	hdrs  []kafka.Header
	bytes []byte
}

// newSlab returns a slab sized for n messages of m's shape: the outbox id's 20 digits
// at most, and the message id when it is not that id.
func newSlab(n int, m *router.Message) *slab {
	perMessage := 20 + len(m.MessageID) + len(m.RowDedupID)
	for _, v := range m.Headers {
		perMessage += len(v)
	}
	return &slab{hdrs: make([]kafka.Header, 0, n*(len(m.Headers)+3)), bytes: make([]byte, 0, n*perMessage)}
}

// headers returns an empty slice with room for n headers.
func (s *slab) headers(n int) []kafka.Header {
	if s == nil {
		return make([]kafka.Header, 0, n)
	}
	if cap(s.hdrs)-len(s.hdrs) < n {
		s.hdrs = make([]kafka.Header, 0, max(n, 2*cap(s.hdrs)))
	}
	start := len(s.hdrs)
	s.hdrs = s.hdrs[:start+n]
	return s.hdrs[start : start : start+n]
}

// text returns v's bytes.
func (s *slab) text(v string) []byte {
	if s == nil {
		return []byte(v)
	}
	start := s.room(len(v))
	s.bytes = append(s.bytes, v...)
	return s.bytes[start:len(s.bytes):len(s.bytes)]
}

// id returns id in decimal.
func (s *slab) id(id int64) []byte {
	if s == nil {
		return strconv.AppendInt(nil, id, 10)
	}
	start := s.room(20)
	s.bytes = strconv.AppendInt(s.bytes, id, 10)
	return s.bytes[start:len(s.bytes):len(s.bytes)]
}

// room makes sure n more bytes fit without append moving what was handed out, and
// returns where they start.
func (s *slab) room(n int) (start int) {
	if cap(s.bytes)-len(s.bytes) < n {
		s.bytes = make([]byte, 0, max(n, 2*cap(s.bytes)))
	}
	return len(s.bytes)
}

// requestSize is what a message adds to a partition's batch, counted as kafka-go counts
// it (its Message.totalSize): fixed fields, key and value with 4-byte lengths, a
// timestamp, and the headers with varint lengths. A partition's batch in one request
// stays within maxRequestBytes by this count.
func requestSize(m *kafka.Message) int {
	n := 4 + 1 + 1 + 4 + len(m.Key) + 4 + len(m.Value) + 8
	n += varintLen(len(m.Headers))
	for _, h := range m.Headers {
		n += varintLen(len(h.Key)) + len(h.Key) + varintLen(len(h.Value)) + len(h.Value)
	}
	return n
}

// headerBytes is the size of a message's header names and values.
func headerBytes(m *kafka.Message) int {
	n := 0
	for _, h := range m.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// maxTopicLen is Kafka's limit on a topic name (org.apache.kafka.common.internals.Topic).
const maxTopicLen = 249

// checkTopic applies Kafka's rules for topic names, which a cluster applies when it is
// asked for the topic: at most 249 characters of ASCII letters, digits, '.', '_' and '-',
// and neither "." nor "..". A broker answers a name outside them with INVALID_TOPIC (some
// fakes with UNKNOWN_TOPIC_OR_PARTITION); checking here names the rule that was broken.
// The name is quoted shortened, so that the reason survives the bounded last_error.
func checkTopic(topic string) error {
	bad := func(why string) error {
		short := topic
		if len(short) > 64 {
			short = short[:64] // cut bytes: %q shows a split rune as an escape, never invalid text
			return fmt.Errorf("publish to %q… (%d bytes): not a valid Kafka topic name: %s: %w", short, len(topic), why, kafka.InvalidTopic)
		}
		return fmt.Errorf("publish to %q: not a valid Kafka topic name: %s: %w", topic, why, kafka.InvalidTopic)
	}
	switch {
	case len(topic) > maxTopicLen:
		return bad(fmt.Sprintf("at most %d characters are allowed", maxTopicLen))
	case topic == "." || topic == "..":
		return bad(`"." and ".." are reserved`)
	}
	for i, r := range topic {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return bad(fmt.Sprintf("%q at byte %d; only ASCII letters, digits, '.', '_' and '-' are allowed", r, i+1))
		}
	}
	return nil
}

// badTopic sets *out to the permanent error of a topic Kafka would refuse and reports
// whether it did.
func badTopic(topic string, out *error) bool {
	if err := checkTopic(topic); err != nil {
		*out = router.Permanent(err)
		return true
	}
	return false
}

// varintLen is the length of n as a zig-zag varint.
func varintLen(n int) int {
	u := uint64(n) << 1
	size := 1
	for u >= 0x80 {
		u >>= 7
		size++
	}
	return size
}
