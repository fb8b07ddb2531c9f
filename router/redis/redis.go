// Package redis publishes outbox messages to Redis Streams through go-redis: each
// message becomes one entry, added with XADD to the stream whose key is the message's
// topic (after the route's topic prefix).
//
// Invariant: a nil result means the server replied to that message's XADD with the id
// of the entry it added (held in the primary's memory; how durable that is depends on
// the server's appendfsync, see docs/contract.md). One Publish is one pipeline: every
// XADD of the batch written at once on one connection and the replies read in order,
// one round trip, and each message's result is its own reply. A message the server
// could never take (no topic, an argument over max_payload_bytes, an empty header
// name) fails alone and permanently before anything is sent; one whose key holds
// another type than a stream fails alone and permanently when the server says so.
// The client never retries: a batch that failed is published again by the dispatcher,
// with its backoff and attempt accounting.
//
// The server runs one connection's commands in order, so a batch's entries are added
// in its order. Each reply is its own, though: in a plain pipeline a message refused
// for a passing reason (OOM near maxmemory, LOADING, BUSY) may be followed by a later
// message of its key that is taken, once the server's state changed between the two
// commands. An ordered stream's publish (router.KeyOrdered) is therefore wrapped in
// MULTI/EXEC: a refusal when a command is queued discards the whole transaction (every
// other message fails with EXECABORT, retryable), and the commands of a transaction
// run with no other client in between, so no later message of a key is added past one
// that was refused.
//
// An entry's fields are FieldID, FieldMessageID, FieldStream, FieldKey (only when the
// row has a key), FieldPayload, and one field per other header (the producer's, and
// those outboxd adds, such as traceparent), named HeaderFieldPrefix plus the header's
// name, in name order. The prefix keeps a header
// named "payload" from shadowing the payload; outboxd's own headers (Outbox-Id and
// the rest) are the fixed fields, so a producer header of one of their names is
// dropped, as outboxd's headers replace a producer's on every driver.
//
// Options (options.go) are its settings, decoded from a drivers.<name> section by the
// registration in router/drivers; New takes them, so the driver is built and tested
// without outboxd's configuration.
//
// Package redis is internal to outboxd, with no compatibility promise: its exported
// names serve outboxd's own packages and may change in any release.
package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/router/driveropt"
)

// The fields of a stream entry.
const (
	FieldID        = "id"         // the outbox row id (router.HeaderID elsewhere)
	FieldMessageID = "message_id" // Message.DedupID (router.HeaderMessageID)
	FieldStream    = "stream"     // the outbox stream (router.HeaderStream)
	FieldKey       = "key"        // the row's key, present only when it has one
	FieldPayload   = "payload"
	// HeaderFieldPrefix starts the field of each producer header: "h:content-type".
	HeaderFieldPrefix = "h:"
)

// reserved are outboxd's own headers, carried by the fixed fields.
var reserved = map[string]bool{
	router.HeaderID: true, router.HeaderStream: true, router.HeaderMessageID: true, router.HeaderKey: true,
}

// quietLibrary silences go-redis's own log, which is one per process and writes plain
// text to stderr, beside outboxd's JSON. Every failure it would log (a dial that
// failed, a connection dropped) is also returned to the caller, who logs it.
var quietLibrary sync.Once

// dialTimeout bounds connecting (TCP, TLS and the HELLO/AUTH/SELECT handshake); a
// smaller publish timeout lowers it to that, so an absent server is reported as
// unreachable within one publish.
const dialTimeout = 5 * time.Second

// Driver publishes to one Redis server. It is safe for concurrent use.
type Driver struct {
	name     string
	rdb      *goredis.Client
	timeout  time.Duration
	maxBytes int
	maxLen   int64
	approx   bool

	// mu orders Publish against Close: a Publish that found the driver open has
	// counted itself in inflight before Close can wait for it.
	mu       sync.RWMutex
	closed   bool
	inflight sync.WaitGroup // publishes and their pipelines, which may outlive a cancelled Publish
}

var _ router.Driver = (*Driver)(nil)

// New builds the driver called name. It does not connect: the server is dialled on the
// first Publish, so a server that is down does not stop outboxd from starting. It fails
// only for settings it cannot use (no address, an unreadable CA or key pair). The driver
// logs nothing of its own: every failure is returned, to be logged by the caller.
func New(name string, o Options, _ *slog.Logger) (*Driver, error) {
	fail := func(err error) (*Driver, error) { return nil, fmt.Errorf("redis driver %q: %w", name, err) }
	if o.Addr == "" {
		return fail(errors.New("addr: a host:port is required"))
	}
	tlsConfig, err := tlsClient(o.TLS, o.Addr)
	if err != nil {
		return fail(err)
	}
	quietLibrary.Do(func() { goredis.SetLogger(&logging.VoidLogger{}) })
	timeout := o.PublishTimeout
	if timeout <= 0 {
		timeout = DefaultPublishTimeout
	}
	maxBytes := o.MaxPayloadBytes
	if maxBytes <= 0 {
		maxBytes = DefaultMaxPayloadBytes
	}
	rdb := goredis.NewClient(&goredis.Options{
		Addr:     o.Addr,
		Username: o.Username,
		Password: o.Password.Reveal(),
		DB:       o.DB,
		// One attempt per call: the dispatcher retries with backoff and attempt
		// accounting, and a pipeline re-sent by the client after a lost reply would
		// add its entries twice within one publish.
		MaxRetries:    -1,
		DialTimeout:   min(dialTimeout, timeout),
		DialerRetries: 1,
		ReadTimeout:   timeout,
		WriteTimeout:  timeout,
		// Publish's context carries the publish timeout and the caller's deadline.
		ContextTimeoutEnabled: true,
		PoolSize:              o.PoolSize,
		PoolTimeout:           timeout,
		// Every call is a pipeline; one pool, sized by pool_size, serves them all.
		PipelinePoolSize: -1,
		TLSConfig:        tlsConfig,
		// Nothing on connect beyond HELLO, AUTH and SELECT: no CLIENT SETINFO, no
		// maintenance notifications (a Redis Enterprise feature).
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	return &Driver{
		name:     name,
		rdb:      rdb,
		timeout:  timeout,
		maxBytes: maxBytes,
		maxLen:   int64(o.MaxLen),
		approx:   o.Approximate,
	}, nil
}

// Publish adds each message to its stream in one pipeline, bounded by ctx and the
// publish timeout, and returns one error per message. When ctx ends first, every
// message gets a canceled error at once; the pipeline finishes (within the publish
// timeout) behind it, and what it added is published again later, a duplicate that
// the message_id field lets consumers drop.
func (d *Driver) Publish(ctx context.Context, msgs []router.Message) []error {
	if len(msgs) == 0 {
		return nil
	}
	errs := make([]error, len(msgs))
	if !d.enter() {
		return fill(errs, d.closedErr())
	}
	defer d.inflight.Done()
	if err := ctx.Err(); err != nil {
		return fill(errs, router.Canceled(err))
	}

	pctx, cancel := context.WithTimeout(ctx, d.timeout)
	pipe := d.rdb.Pipeline()
	if router.KeyOrdered(ctx) {
		pipe = d.rdb.TxPipeline() // see the package comment
	}
	cmds := make([]*goredis.Cmd, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		if err := d.Check(m); err != nil {
			errs[i] = err
			continue
		}
		cmds[i] = pipe.Do(pctx, d.xadd(m)...)
	}
	if pipe.Len() == 0 {
		cancel()
		return errs
	}

	done := make(chan outcome, 1)
	d.inflight.Add(1)
	go func() {
		defer d.inflight.Done()
		defer cancel()
		done <- d.exec(pctx, pipe, cmds)
	}()
	var out outcome
	select {
	case out = <-done:
	case <-ctx.Done():
		for i := range errs {
			if errs[i] == nil {
				errs[i] = router.Canceled(fmt.Errorf("redis xadd %s: %w", quote(msgs[i].Topic), ctx.Err()))
			}
		}
		return errs
	}
	for i, cmd := range cmds {
		if cmd == nil {
			continue
		}
		if err := d.result(ctx, cmd, out); err != nil {
			errs[i] = err
		}
	}
	return errs
}

// outcome is what a pipeline came back with: Exec's error, whether any command was
// answered, and the type of each key whose XADD was answered WRONGTYPE, asked
// afterwards to name it in the error.
type outcome struct {
	err      error
	answered bool
	types    map[string]string
}

// exec runs the pipeline and, when some XADD found its key holding another type, asks
// the server (one more round trip, only then) what each such key holds.
func (d *Driver) exec(ctx context.Context, pipe goredis.Pipeliner, cmds []*goredis.Cmd) outcome {
	_, err := pipe.Exec(ctx)
	out := outcome{err: err}
	var wrong []string
	for _, cmd := range cmds {
		if cmd == nil {
			continue
		}
		err := cmd.Err()
		out.answered = out.answered || err != nil || cmd.Val() != nil
		if err != nil && isWrongType(err) {
			wrong = append(wrong, cmd.Args()[1].(string))
		}
	}
	if len(wrong) == 0 {
		return out
	}
	slices.Sort(wrong)
	wrong = slices.Compact(wrong)
	types := d.rdb.Pipeline()
	asked := make([]*goredis.StatusCmd, len(wrong))
	for i, key := range wrong {
		asked[i] = types.Type(ctx, key)
	}
	_, _ = types.Exec(ctx) // a failure leaves the type unnamed, nothing worse
	out.types = make(map[string]string, len(wrong))
	for i, key := range wrong {
		if t, err := asked[i].Result(); err == nil {
			out.types[key] = t
		}
	}
	return out
}

// result is one XADD's classified error, or nil when the server replied with the id
// of the entry it added. When no command was answered (no connection could be had, or
// its handshake was refused: go-redis then leaves the commands without an error of
// their own) each takes the pipeline's error.
func (d *Driver) result(ctx context.Context, cmd *goredis.Cmd, out outcome) error {
	key := cmd.Args()[1].(string)
	id, err := cmd.Text() // the entry id; an error when the reply was another
	switch {
	case err == nil && id != "":
		return nil
	case cmd.Err() != nil: // the server's or the connection's answer to this command
	case !out.answered && out.err != nil:
		err = out.err
	default:
		err = errNoReply
	}
	if ctx.Err() != nil && !isReply(err) {
		return router.Canceled(fmt.Errorf("redis xadd %s: %w", quote(key), err))
	}
	if isWrongType(err) {
		return router.Permanent(wrongType(key, out.types[key], err))
	}
	return classify(fmt.Errorf("redis xadd %s: %w", quote(key), err))
}

var errNoReply = errors.New("the server answered without an entry id, or not at all")

// wrongType says what a key that is not a stream holds, in the words an operator
// searches for; typ is "" when it could not be asked.
func wrongType(key, typ string, err error) error {
	if typ == "" || typ == "stream" || typ == "none" { // changed since, or not asked
		return fmt.Errorf("redis: key %s holds another type than a stream: %w", quote(key), err)
	}
	return fmt.Errorf("%s: %w", notStream(key, typ), err)
}

// notStream is the sentence for a key of type typ, which is not a stream.
func notStream(key, typ string) string {
	return fmt.Sprintf("redis: key %s is a %s, not a stream", quote(key), typ)
}

// xadd is m's XADD command: the trimming, if any, the server's choice of entry id, and
// the entry's fields.
func (d *Driver) xadd(m *router.Message) []any {
	args := make([]any, 0, 16+2*len(m.Headers))
	args = append(args, "xadd", m.Topic)
	if d.maxLen > 0 {
		trim := "="
		if d.approx {
			trim = "~"
		}
		args = append(args, "maxlen", trim, d.maxLen)
	}
	args = append(args, "*",
		FieldID, m.ID,
		FieldMessageID, m.DedupID(),
		FieldStream, m.Stream)
	if m.Key != nil {
		args = append(args, FieldKey, m.Key)
	}
	args = append(args, FieldPayload, m.Payload)
	switch len(m.Headers) {
	case 0:
	case 1:
		for name, value := range m.Headers {
			if !reserved[name] {
				args = append(args, HeaderFieldPrefix+name, value)
			}
		}
	default:
		names := make([]string, 0, len(m.Headers))
		for name := range m.Headers {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			if !reserved[name] {
				args = append(args, HeaderFieldPrefix+name, m.Headers[name])
			}
		}
	}
	return args
}

// enter counts a Publish in, unless the driver is closed.
func (d *Driver) enter() bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return false
	}
	d.inflight.Add(1)
	return true
}

// closedErr is every message's error after Close: unreachable, because the server
// never saw it, so it costs no attempt.
func (d *Driver) closedErr() error {
	return router.Unreachable(fmt.Errorf("redis driver %q: %w", d.name, router.ErrClosed))
}

// Close waits for the publishes in flight, then closes the connections. A second
// Close does nothing.
func (d *Driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()
	d.inflight.Wait()
	if err := d.rdb.Close(); err != nil {
		return fmt.Errorf("close redis driver %q: %w", d.name, err)
	}
	return nil
}

func fill(errs []error, err error) []error {
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// quote quotes a key for an error, cut to a readable length.
func quote(s string) string { return driveropt.Quote(s) }

func tlsClient(c driveropt.TLS, addr string) (*tls.Config, error) {
	if !c.Enabled {
		return nil, nil
	}
	tc, err := c.Client()
	if err != nil {
		return nil, err
	}
	tc.ServerName, _, _ = net.SplitHostPort(addr)
	return tc, nil
}
