-- Reverts 0002_ordered.up.sql: the requeue function of version 1, no skip, no key index.
CREATE OR REPLACE FUNCTION outbox.messages_requeue(ids bigint[]) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    n       bigint;
    streams text[];
BEGIN
    WITH r AS (
        UPDATE outbox.messages
        SET status = 'pending', attempts = 0, last_error = NULL, deferred_since = NULL,
            available_at = statement_timestamp()
        WHERE id = ANY (ids) AND status = 'failed'
        RETURNING stream
    )
    SELECT count(*), array_agg(DISTINCT stream) INTO n, streams FROM r;
    -- Wake the pipelines of the affected streams, as an insert would.
    PERFORM pg_notify('outbox.messages', s) FROM unnest(streams) AS s;
    RETURN n;
END
$$;
DROP FUNCTION IF EXISTS outbox.messages_skip(bigint[]);
DROP INDEX IF EXISTS outbox.messages_key_order_idx;
ALTER TABLE outbox.messages DROP CONSTRAINT IF EXISTS messages_skipped_only_failed;
ALTER TABLE outbox.messages DROP COLUMN IF EXISTS skipped_at;
