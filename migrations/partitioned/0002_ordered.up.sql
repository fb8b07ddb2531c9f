-- outboxd schema, version 2: ordered streams (per-key FIFO).
--
-- A stream configured `ordered: true` delivers the rows sharing a key in id order. A key's
-- head is its lowest-id row that still blocks it: pending, leased, or failed and not
-- skipped. Only heads are claimed, with the run of pending rows right behind them, so
-- the successors of a row never reach the broker before it. See docs/ordering.md.

-- Set when an operator skips a failed head (outbox.messages_skip): the row stays failed,
-- for inspection and dead-lettering, but no longer holds its key's successors back.
ALTER TABLE outbox.messages ADD COLUMN skipped_at timestamptz;
ALTER TABLE outbox.messages ADD CONSTRAINT messages_skipped_only_failed
    CHECK (skipped_at IS NULL OR status = 'failed');
COMMENT ON COLUMN outbox.messages.skipped_at IS
    'Set when an operator skipped this failed message so its key''s later messages continue (ordered streams).';

-- Heads of keys: the rows that hold a key, grouped by a 64-bit hash of the key and in id
-- order within a group. The claim of an ordered stream walks it one group at a time (a
-- skip scan), so its cost follows the keys visited, never the rows waiting behind a
-- blocked head. The hash keeps index entries small whatever a key's length (a btree entry
-- may not exceed a third of a page) and compares as an integer; two keys whose hashes
-- collide are ordered together, which is stricter than asked and never wrong. Rows without
-- a key hash to NULL and sort after every group.
CREATE INDEX messages_key_order_idx ON outbox.messages (stream, hashtextextended(key, 0), id)
    WHERE status IN ('pending', 'leased') OR (status = 'failed' AND skipped_at IS NULL);

-- Skip failed messages: each stays failed (its last_error kept) and stops holding back the
-- later messages of its key. A pending message (waiting out a retry) is failed and
-- skipped at once; leased ones are left alone (a publish is in flight). Returns the number
-- of rows skipped.
CREATE FUNCTION outbox.messages_skip(ids bigint[]) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    n       bigint;
    streams text[];
BEGIN
    WITH s AS (
        UPDATE outbox.messages
        SET status = 'failed', skipped_at = statement_timestamp(), deferred_since = NULL,
            last_error = coalesce(last_error, 'skipped by an operator')
        WHERE id = ANY (ids)
          AND ((status = 'failed' AND skipped_at IS NULL) OR status = 'pending')
        RETURNING stream
    )
    SELECT count(*), array_agg(DISTINCT stream) INTO n, streams FROM s;
    -- The successors may be due now: wake the pipelines, as an insert would.
    PERFORM pg_notify('outbox.messages', x) FROM unnest(streams) AS x;
    RETURN n;
END
$$;

-- A requeued message is a fresh one again: it clears skipped_at with the rest.
CREATE OR REPLACE FUNCTION outbox.messages_requeue(ids bigint[]) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    n       bigint;
    streams text[];
BEGIN
    WITH r AS (
        UPDATE outbox.messages
        SET status = 'pending', attempts = 0, last_error = NULL, deferred_since = NULL,
            skipped_at = NULL, available_at = statement_timestamp()
        WHERE id = ANY (ids) AND status = 'failed'
        RETURNING stream
    )
    SELECT count(*), array_agg(DISTINCT stream) INTO n, streams FROM r;
    -- Wake the pipelines of the affected streams, as an insert would.
    PERFORM pg_notify('outbox.messages', s) FROM unnest(streams) AS s;
    RETURN n;
END
$$;
