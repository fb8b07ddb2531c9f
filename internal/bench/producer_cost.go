package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/producer"
)

// producerCost times the producer writing ProducerMessages messages, benchProducerBatch
// per transaction, once with one Enqueue per message and once with EnqueueBatch (COPY).
// Begin and commit are included, shared by the batch's messages.
func (b *bench) producerCost(ctx context.Context) (benchProducer, error) {
	p := benchProducer{Messages: b.opt.set.ProducerMessages, BatchSize: benchProducerBatch}
	batch := make([]producer.Message, benchProducerBatch)
	for i := range batch {
		batch[i] = b.message(i)
	}
	measure := func(name string, write func(tx pgx.Tx) error) (float64, error) {
		if err := b.empty(ctx); err != nil {
			return 0, err
		}
		if err := pgx.BeginFunc(ctx, b.pool, write); err != nil { // warm-up, not timed
			return 0, fmt.Errorf("bench: producer %s: %w", name, err)
		}
		var done atomic.Int64
		b.progress.begin("producer: "+name, int64(p.Messages), done.Load)
		start := time.Now()
		for done.Load() < int64(p.Messages) {
			if err := pgx.BeginFunc(ctx, b.pool, write); err != nil {
				return 0, fmt.Errorf("bench: producer %s: %w", name, err)
			}
			done.Add(benchProducerBatch)
		}
		us := float64(time.Since(start).Microseconds()) / float64(done.Load())
		b.progress.end(fmt.Sprintf("%.1f µs/msg", us))
		return round(us, 2), nil
	}
	var err error
	p.EnqueueUsPerMsg, err = measure("Enqueue", func(tx pgx.Tx) error {
		for _, m := range batch {
			if _, err := b.writer.Enqueue(ctx, tx, m); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return p, err
	}
	p.EnqueueBatchUsPerMsg, p.CopyUsPerMsg, err = b.copyCost(ctx, batch, p.Messages)
	if p.CopyUsPerMsg > 0 {
		p.BatchToCopy = round(p.EnqueueBatchUsPerMsg/p.CopyUsPerMsg, 3)
	}
	return p, err
}

// copyCost times EnqueueBatch of batch against a bare pgx CopyFrom of the same rows
// (the same columns and values, into the same table), one transaction each, the two
// interleaved transaction by transaction so that the table's growth and the machine's
// drift fall on both alike, messages of each in all.
func (b *bench) copyCost(ctx context.Context, batch []producer.Message, messages int) (enqueueUs, copyUs float64, err error) {
	if err := b.empty(ctx); err != nil {
		return 0, 0, err
	}
	cols := []string{"stream", "topic", "key", "headers", "payload", "message_id"}
	rows := make([][]any, len(batch))
	for i, m := range batch {
		rows[i] = []any{m.Stream, m.Topic, m.Key, "{}", m.Payload, nil}
	}
	target := pgx.Identifier{benchTable.Schema, benchTable.Table}
	write := []func(tx pgx.Tx) error{
		func(tx pgx.Tx) error { return b.writer.EnqueueBatch(ctx, tx, batch) },
		func(tx pgx.Tx) error {
			_, err := tx.CopyFrom(ctx, target, cols, pgx.CopyFromRows(rows))
			return err
		},
	}
	for _, w := range write { // warm-up, not timed
		if err := pgx.BeginFunc(ctx, b.pool, w); err != nil {
			return 0, 0, fmt.Errorf("bench: producer: %w", err)
		}
	}
	var done atomic.Int64
	b.progress.begin(fmt.Sprintf("producer: EnqueueBatch of %d and bare CopyFrom, interleaved", len(batch)), int64(2*messages), done.Load)
	var spent [2]time.Duration
	for i := 0; done.Load() < int64(2*messages); i++ {
		start := time.Now()
		if err := pgx.BeginFunc(ctx, b.pool, write[i%2]); err != nil {
			return 0, 0, fmt.Errorf("bench: producer: %w", err)
		}
		spent[i%2] += time.Since(start)
		done.Add(int64(len(batch)))
	}
	per := func(d time.Duration) float64 { return round(float64(d.Microseconds())/float64(messages), 2) }
	enqueueUs, copyUs = per(spent[0]), per(spent[1])
	b.progress.end(fmt.Sprintf("EnqueueBatch %.1f µs/msg, CopyFrom %.1f µs/msg", enqueueUs, copyUs))
	return enqueueUs, copyUs, nil
}
