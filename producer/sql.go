package producer

import (
	"context"
	"database/sql"
)

// The database/sql entry points bind only scalars ($n placeholders, headers as JSON text),
// so they work with any PostgreSQL driver, not only pgx's stdlib.

// EnqueueSQL writes msg inside tx and returns its id. An invalid message is refused with
// an *InvalidMessageError before anything is sent.
func (w *Writer) EnqueueSQL(ctx context.Context, tx *sql.Tx, msg Message) (id int64, err error) {
	if err := w.ready(); err != nil {
		return 0, err
	}
	if err := check(-1, &msg); err != nil {
		return 0, err
	}
	stmt, args := w.insertOne, []any{msg.Stream, msg.Topic, nullable(msg.Key),
		headersJSON(msg.Headers), msg.Payload, availableAt(msg.AvailableAt), nullable(msg.MessageID)}
	if !msg.ExpiresAt.IsZero() {
		stmt, args = w.insertOneExpiring, append(args, msg.ExpiresAt)
	}
	err = tx.QueryRowContext(ctx, stmt, args...).Scan(&id)
	if err != nil {
		return 0, w.wrap(err)
	}
	return id, nil
}

// EnqueueBatchSQL writes msgs inside tx with one multi-row INSERT per chunk of at most
// maxSQLRows messages, their ids in slice order. Every message is checked first: if one is
// invalid, none is written. An empty batch sends nothing.
func (w *Writer) EnqueueBatchSQL(ctx context.Context, tx *sql.Tx, msgs []Message) error {
	if err := w.ready(); err != nil {
		return err
	}
	if err := checkAll(msgs); err != nil {
		return err
	}
	text, ends, exp := w.insertValues, w.valuesEnd, expiring(msgs)
	if exp {
		text, ends = w.valuesExpiring()
	}
	args := make([]any, 0, min(len(msgs), maxSQLRows)*expiringParams)
	for len(msgs) > 0 {
		chunk := msgs[:min(len(msgs), maxSQLRows)]
		msgs = msgs[len(chunk):]
		args = args[:0]
		for i := range chunk {
			m := &chunk[i]
			args = append(args, m.Stream, m.Topic, nullable(m.Key), headersJSON(m.Headers),
				m.Payload, availableAt(m.AvailableAt), nullable(m.MessageID))
			if exp {
				args = append(args, availableAt(m.ExpiresAt))
			}
		}
		if _, err := tx.ExecContext(ctx, text[:ends[len(chunk)]], args...); err != nil {
			return w.wrap(err)
		}
	}
	return nil
}
