package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/router"
	"github.com/outboxd/outboxd/table"
)

// chunkBytes bounds what one INSERT statement carries (payloads, keys, headers and
// text, counted roughly). PostgreSQL refuses a protocol message or an array of 1 GB or
// more and unpacks the arrays in memory, so a large batch goes as several statements,
// pipelined in one transaction; a message larger than this goes alone. The driver
// holds it in a field, so that a test can make batches split.
const chunkBytes = 32 << 20

// insertSQL is the batch statement for inbox t: one array per column, rows inserted in
// array order (WITH ORDINALITY … ORDER BY) so that the identity column follows the
// batch. The same statement inserts one message, as arrays of one, when a batch is
// isolated message by message.
func insertSQL(t table.Name) string {
	return "INSERT INTO " + t.Qualified() + " (message_id, outbox_id, stream, topic, key, headers, payload)\n" +
		"SELECT m.message_id, m.outbox_id, m.stream, m.topic, m.key, m.headers::jsonb, m.payload\n" +
		"FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::bytea[], $6::text[], $7::bytea[])\n" +
		"     WITH ORDINALITY AS m(message_id, outbox_id, stream, topic, key, headers, payload, n)\n" +
		"ORDER BY m.n"
}

// absorbSQL is insertSQL skipping a message id already in the inbox: a re-publish is
// absorbed by the primary key instead of failing the batch.
func absorbSQL(t table.Name) string {
	return insertSQL(t) + "\nON CONFLICT (message_id) DO NOTHING"
}

// The prepared statements' names on every connection of the pool.
const (
	insertName = "outboxd_inbox_insert"
	absorbName = "outboxd_inbox_absorb"
)

// Publish inserts msgs and returns one error per message, in order: nil once its row
// is committed (or was already in the inbox). Messages Check refuses fail alone
// before anything is sent; the rest go in one transaction. When the database refuses
// that transaction for the data of some message, each message is inserted on its
// own, so that only the messages at fault fail. Everything is bounded by ctx and the
// driver's publish timeout.
func (d *Driver) Publish(ctx context.Context, msgs []router.Message) []error {
	if len(msgs) == 0 {
		return nil
	}
	out := make([]error, len(msgs))
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return fill(out, d.closedErr())
	}
	if err := ctx.Err(); err != nil {
		return fill(out, router.Canceled(d.wrap(err)))
	}
	wctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	c := &publishCall{d: d, ctx: ctx, wctx: wctx, msgs: msgs, out: out}

	send := make([]int, 0, len(msgs))
	for i := range msgs {
		if out[i] = d.Check(&msgs[i]); out[i] == nil {
			send = append(send, i)
		}
	}
	if len(send) == 0 {
		return out
	}
	inserted, err := c.insert(send)
	switch {
	case err == nil:
		c.duplicates(len(send) - inserted)
	case dataError(err):
		d.log.Debug("the inbox refused the batch for its data; inserting message by message",
			"table", d.where, "messages", len(send), "error", err)
		c.oneByOne(send)
	default:
		e := c.failure(err)
		for _, i := range send {
			out[i] = e
		}
	}
	return out
}

// publishCall is the state of one Publish.
type publishCall struct {
	d    *Driver
	ctx  context.Context // the caller's
	wctx context.Context // the caller's, bounded by the publish timeout
	msgs []router.Message
	out  []error
}

// insert inserts the messages at idx in one transaction and returns how many rows it
// added (the rest were in the inbox already).
//
// It first inserts them plainly and, only when a unique index refuses that (some
// message is a re-publish), again with ON CONFLICT (message_id) DO NOTHING: the
// speculative insertion ON CONFLICT takes made the common insert about 15 %
// slower, and re-publishes are rare. Before the driver's first plain insert, the ON
// CONFLICT statement runs once without rows: planning it fails (42P10) for an inbox
// without a unique index on message_id, which would otherwise take copies.
//
// It encodes the arrays itself, in PostgreSQL's binary format, into one buffer the
// driver reuses, and hands them to the connection as they are: pgx's own encoding of a
// batch of 1 KiB payloads allocated about seven times the payloads (BenchmarkPublish).
func (c *publishCall) insert(idx []int) (int, error) {
	conn, err := c.d.pool.Acquire(c.wctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	absorb, err := conn.Conn().Prepare(c.wctx, absorbName, c.d.absorb)
	if err != nil {
		return 0, err
	}
	plain, err := conn.Conn().Prepare(c.wctx, insertName, c.d.insert)
	if err != nil {
		return 0, err
	}
	run := func(stmt string, params [][][]byte) (int, error) {
		var batch pgconn.Batch
		for _, p := range params {
			batch.ExecPrepared(stmt, p, binaryParams, nil)
		}
		// Statements sent before one Sync run as one implicit transaction: all or none.
		results, err := conn.Conn().PgConn().ExecBatch(c.wctx, &batch).ReadAll()
		inserted := 0
		for _, r := range results {
			if r.Err != nil && err == nil {
				err = r.Err
			}
			inserted += int(r.CommandTag.RowsAffected())
		}
		if err != nil {
			return 0, err
		}
		return inserted, nil
	}
	if !c.d.ready.Load() {
		if _, err := run(absorb.Name, [][][]byte{noRows}); err != nil {
			return 0, err
		}
		c.d.ready.Store(true)
	}

	buf := c.d.buffers.get()
	defer func() { c.d.buffers.put(buf) }()
	var params [][][]byte
	for _, chunk := range c.chunks(idx) {
		var p [][]byte
		buf, p = appendArrays(buf, c.msgs, chunk)
		params = append(params, p)
	}
	inserted, err := run(plain.Name, params)
	if uniqueViolation(err) {
		inserted, err = run(absorb.Name, params)
	}
	return inserted, err
}

// chunks splits the messages at idx, in order, into statements of at most chunkBytes.
func (c *publishCall) chunks(idx []int) [][]int {
	var out [][]int
	bytes := 0
	for k, i := range idx {
		size := rowSize(&c.msgs[i])
		if k == 0 || (bytes > 0 && bytes+size > c.d.chunkBytes) {
			out = append(out, nil)
			bytes = 0
		}
		out[len(out)-1] = append(out[len(out)-1], i)
		bytes += size
	}
	return out
}

// oneByOne inserts each message at idx on its own, in order, after the batch was
// refused for its data. On an ordered stream (router.KeyOrdered), a key whose message
// failed has its later messages held back unsent. Once the database cannot be reached
// or the time is up, the messages not yet sent get that error.
func (c *publishCall) oneByOne(idx []int) {
	ordered := router.KeyOrdered(c.ctx)
	failedKeys := map[string]int64{}
	dups := 0
	for j, i := range idx {
		m := &c.msgs[i]
		if id, ok := failedKeys[string(m.Key)]; ok && ordered && m.Key != nil {
			c.out[i] = router.HeldBack(c.d.wrap(fmt.Errorf("message %d waits for message %d of key %q, which did not go through", m.ID, id, m.Key)))
			continue
		}
		inserted, err := c.insert([]int{i})
		if err == nil {
			dups += 1 - inserted
			continue
		}
		e := c.failure(err)
		c.out[i] = e
		if k := router.KindOf(e); k == router.KindUnreachable || k == router.KindCanceled || c.wctx.Err() != nil {
			for _, rest := range idx[j+1:] {
				if c.out[rest] == nil {
					c.out[rest] = e
				}
			}
			break
		}
		if _, ok := failedKeys[string(m.Key)]; !ok && m.Key != nil {
			failedKeys[string(m.Key)] = m.ID
		}
	}
	c.duplicates(dups)
}

// duplicates counts n messages the inbox held already.
func (c *publishCall) duplicates(n int) {
	if n <= 0 {
		return
	}
	c.d.duplicates.Add(uint64(n))
	router.NoteDuplicates(c.ctx, n)
}

// failure is the error of a message whose insert failed with err: the caller's
// context ending wins, then a database that was never reached, then the publish
// timeout, then err's own kind.
func (c *publishCall) failure(err error) error {
	if ctxErr := c.ctx.Err(); ctxErr != nil {
		return router.Canceled(c.d.wrap(ctxErr))
	}
	e := classify(c.d.where, err)
	if router.KindOf(e) != router.KindUnreachable && c.wctx.Err() != nil {
		return router.Retryable(c.d.wrap(fmt.Errorf("no answer within publish_timeout %s: %w", c.d.timeout, err)))
	}
	return e
}

// wrap names the inbox in err.
func (d *Driver) wrap(err error) error {
	return fmt.Errorf("insert into inbox table %s: %w", d.where, err)
}

// fill sets err on every message.
func fill(errs []error, err error) []error {
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// rowSize is roughly what a message adds to a statement: its values, its headers as
// JSON and their framing in the arrays.
func rowSize(m *router.Message) int {
	n := len(m.Payload) + len(m.Key) + 2*len(m.DedupID()) + 2*len(m.Stream) + len(m.Topic) + 128
	for k, v := range m.Headers {
		n += len(k) + len(v) + 8
	}
	return n
}
