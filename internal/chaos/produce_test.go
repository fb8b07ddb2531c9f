//go:build linux

package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// produced is one message a producer wrote in a transaction that committed (or may
// have: see ledger.uncertain).
type produced struct {
	ID     int64
	Stream string
	Key    string
	// Seq is the message's place among its key's messages in commit order. Each key
	// belongs to one producer, whose transactions commit one after the other, so this
	// is the order a per-key ordering guarantee would have to keep. A transaction
	// whose commit turned out not to happen leaves a gap.
	Seq int
	// DeadLetter marks a message bound to fail for good (its Kafka topic does not
	// exist): it must reach the dead-letter stream instead of its own.
	DeadLetter bool
}

// ledger is what the producers did: every message committed, every one rolled back on
// purpose, and those whose commit outcome is unknown (the connection died during
// COMMIT), resolved against the table afterwards.
type ledger struct {
	mu         sync.Mutex
	committed  map[int64]*produced
	uncertain  map[int64]*produced
	rolledBack map[int64]bool
	keySeq     map[string]int
	written    int // messages in committed or uncertain transactions
	lastCommit time.Time
	txs        struct{ committed, rolledBack, uncertain, failed int }
	next       int64 // message number, carried in the chaos-n header
}

func newLedger() *ledger {
	return &ledger{committed: map[int64]*produced{}, uncertain: map[int64]*produced{}, rolledBack: map[int64]bool{}, keySeq: map[string]int{}}
}

func (l *ledger) progress() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.written
}

func (l *ledger) lastCommitAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastCommit
}

// snapshot returns the committed messages by id; call it after resolve.
func (l *ledger) snapshot() map[int64]*produced {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[int64]*produced, len(l.committed))
	for id, m := range l.committed {
		out[id] = m
	}
	return out
}

func (l *ledger) isRolledBack(id int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rolledBack[id]
}

// resolve decides every uncertain message by looking for its row: a row exists if and
// only if its transaction committed (the janitor never deletes undelivered rows, and
// scenarios keep delivered ones).
func (l *ledger) resolve(ctx context.Context, w *world) error {
	l.mu.Lock()
	ids := make([]int64, 0, len(l.uncertain))
	for id := range l.uncertain {
		ids = append(ids, id)
	}
	l.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	rows, err := w.pool.Query(ctx, `SELECT id FROM `+outboxName.Qualified()+` WHERE id = ANY($1)`, ids)
	if err != nil {
		return fmt.Errorf("resolve uncertain commits: %w", err)
	}
	found := map[int64]bool{}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return err
		}
		found[id] = true
	}
	if err := rows.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	committed := 0
	for id, m := range l.uncertain {
		if found[id] {
			l.committed[id] = m
			committed++
		} else {
			l.rolledBack[id] = true
			l.written--
		}
		delete(l.uncertain, id)
	}
	w.note("%d messages had an unknown commit outcome: %d committed, %d not", len(ids), committed, len(ids)-committed)
	return nil
}

// producers write messages in transactions, paced, until the ledger holds target
// messages and the fault is over (so they commit while every step of a fault happens,
// however long it takes); every seventh transaction of each producer is rolled back on
// purpose.
type producers struct {
	w         *world
	target    int
	rate      float64     // messages per second, all producers together
	faultOver atomic.Bool // set by endFault
	done      chan struct{}
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	mu        sync.Mutex
	errs      map[string]int // errors by text, for the report when production stalls
}

var insertSQL = `
INSERT INTO ` + outboxName.Qualified() + ` (stream, topic, key, headers, payload)
SELECT s, t, k, jsonb_build_object('chaos-n', n::text), convert_to(repeat('x', $5), 'UTF8')
FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[]) AS u(s, t, k, n)
RETURNING id, (headers->>'chaos-n')::bigint`

func (w *world) startProducers(target int, rate float64) *producers {
	ctx, cancel := context.WithCancel(w.ctx)
	p := &producers{w: w, target: target, rate: rate, done: make(chan struct{}), cancel: cancel, errs: map[string]int{}}
	for i := 0; i < w.f.producers; i++ {
		p.wg.Add(1)
		go p.run(ctx, i)
	}
	go func() {
		p.wg.Wait()
		close(p.done)
	}()
	return p
}

// wait waits until the producers are done, at most timeout.
func (p *producers) wait(timeout time.Duration) error {
	select {
	case <-p.done:
		return nil
	case <-time.After(timeout):
		p.cancel()
		<-p.done
		return fmt.Errorf("producers wrote %d of %d messages in %s; errors: %v", p.w.ledger.progress(), p.target, timeout, p.errors())
	}
}

// endFault lets the producers stop once they have written their target.
func (p *producers) endFault() { p.faultOver.Store(true) }

func (p *producers) stop() {
	p.cancel()
	<-p.done
}

func (p *producers) errors() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int, len(p.errs))
	for k, v := range p.errs {
		out[k] = v
	}
	return out
}

func (p *producers) fail(err error) {
	p.mu.Lock()
	p.errs[err.Error()]++
	p.mu.Unlock()
}

func (p *producers) run(ctx context.Context, n int) {
	defer p.wg.Done()
	l := p.w.ledger
	size := p.w.f.txSize
	perProducer := p.rate / float64(p.w.f.producers)
	start := time.Now()
	sent := 0 // messages this producer attempted, for pacing
	keysPerProducer := 16
	if k := p.w.set.keys; k > 0 {
		keysPerProducer = (k + p.w.f.producers - 1) / p.w.f.producers
	}
	for tx := 0; ctx.Err() == nil && (l.progress() < p.target || !p.faultOver.Load()); tx++ {
		if perProducer > 0 {
			due := start.Add(time.Duration(float64(sent) / perProducer * float64(time.Second)))
			if wait := time.Until(due); wait > 0 {
				select {
				case <-time.After(wait):
				case <-ctx.Done():
					return
				}
			}
		}
		streams, topics, keys, nums := make([]string, size), make([]string, size), make([]string, size), make([]int64, size)
		l.mu.Lock()
		for i := range size {
			l.next++
			nums[i] = l.next
			streams[i] = allStreams[int(l.next)%len(allStreams)]
			topics[i] = rowTopic[streams[i]]
			keys[i] = "p" + strconv.Itoa(n) + "-k" + strconv.Itoa(int(l.next)%keysPerProducer)
			if every := p.w.set.deadLetterEvery; every > 0 && streams[i] == streamOrders && (l.next/int64(len(allStreams)))%int64(every) == 0 {
				topics[i] = missingTopic
			}
		}
		l.mu.Unlock()
		sent += size
		rollback := tx%7 == 6
		p.transaction(ctx, streams, topics, keys, nums, rollback)
	}
}

// transaction writes one batch in one transaction and records its outcome.
func (p *producers) transaction(ctx context.Context, streams, topics, keys []string, nums []int64, rollback bool) {
	l := p.w.ledger
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	retry := func(err error) {
		p.fail(err)
		l.mu.Lock()
		l.txs.failed++
		l.mu.Unlock()
		select { // the database is away: do not spin
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	tx, err := p.w.pool.Begin(tctx)
	if err != nil {
		retry(err)
		return
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	rows, err := tx.Query(tctx, insertSQL, streams, topics, keys, nums, payloadBytes)
	if err != nil {
		retry(err)
		return
	}
	byNum := map[int64]int64{}
	for rows.Next() {
		var id, num int64
		if err := rows.Scan(&id, &num); err != nil {
			rows.Close()
			retry(err)
			return
		}
		byNum[num] = id
	}
	if err := rows.Err(); err != nil {
		retry(err)
		return
	}
	if len(byNum) != len(nums) {
		retry(fmt.Errorf("inserted %d rows, RETURNING named %d", len(nums), len(byNum)))
		return
	}
	if rollback {
		if err := tx.Rollback(tctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
			p.fail(err)
		}
		l.mu.Lock()
		for _, id := range byNum {
			l.rolledBack[id] = true
		}
		l.txs.rolledBack++
		l.mu.Unlock()
		return
	}
	msgs := make([]*produced, len(nums))
	l.mu.Lock()
	for i, num := range nums {
		msgs[i] = &produced{ID: byNum[num], Stream: streams[i], Key: keys[i], Seq: l.keySeq[keys[i]], DeadLetter: topics[i] == missingTopic}
		l.keySeq[keys[i]]++
	}
	l.mu.Unlock()
	err = tx.Commit(tctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.written += len(msgs)
	if err != nil {
		// The commit may or may not have happened (the connection died under it):
		// resolved against the table once production ends.
		p.fail(fmt.Errorf("commit: %w", err))
		for _, m := range msgs {
			l.uncertain[m.ID] = m
		}
		l.txs.uncertain++
		l.lastCommit = time.Now()
		return
	}
	for _, m := range msgs {
		l.committed[m.ID] = m
	}
	l.txs.committed++
	l.lastCommit = time.Now()
}
