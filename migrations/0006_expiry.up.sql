-- outboxd schema, version 6: expiry (time to live).
--
-- A producer may give a message an instant after which it must not be published
-- (expires_at); a stream may give all its messages a time to live counted from
-- created_at (streams.<name>.ttl, config only). A message still pending when the earlier
-- of the two has passed, judged with the database clock when a pipeline claims, is not
-- published: it becomes 'expired', its reason in last_error (docs/contract.md). A leased
-- message is being published and is not expired.
--
-- Safe on a big table: the column is nullable without a default (a catalog change); the
-- widened status domain and the new check are added NOT VALID under a brief lock and
-- validated after the first COMMIT below, which ends the implicit transaction of this
-- file: VALIDATE takes SHARE UPDATE EXCLUSIVE, so producers and pipelines go on while it
-- scans. The indexes are partial and cover only pending or expired rows, but building one
-- still reads the table once while writes wait. On a very large plain table, create them
-- first with CREATE INDEX CONCURRENTLY under the same names and definitions: the
-- migration then keeps them (IF NOT EXISTS).
ALTER TABLE outbox.messages ADD COLUMN expires_at timestamptz;
COMMENT ON COLUMN outbox.messages.expires_at IS
    'Optional: not published after this instant (database clock); a message still pending then becomes expired. NULL: only the stream''s ttl, if any, applies.';

ALTER TABLE outbox.messages
    DROP CONSTRAINT messages_status_domain,
    ADD CONSTRAINT messages_status_domain
        CHECK (status IN ('pending', 'leased', 'delivered', 'failed', 'expired')) NOT VALID,
    ADD CONSTRAINT messages_expired_has_error
        CHECK (status <> 'expired' OR last_error IS NOT NULL) NOT VALID;

-- The expiry sweep of one stream: pending rows carrying their own expiry, soonest first.
-- Rows expiring by the stream's ttl are found through messages_undelivered_idx
-- (stream, created_at), which already exists.
CREATE INDEX IF NOT EXISTS messages_expiry_idx ON outbox.messages (stream, expires_at)
    WHERE status = 'pending' AND expires_at IS NOT NULL;
-- Expired rows, per stream, for stats and for their purge after retention.
CREATE INDEX IF NOT EXISTS messages_expired_idx ON outbox.messages (stream, created_at) WHERE status = 'expired';

-- Appended, so that the view keeps its other columns, their order and its grants.
CREATE OR REPLACE VIEW outbox.messages_stats AS
SELECT stream,
       count(*) FILTER (WHERE status = 'pending')                                AS pending,
       count(*) FILTER (WHERE status = 'pending' AND deferred_since IS NOT NULL) AS deferred,
       count(*) FILTER (WHERE status = 'leased')                                 AS leased,
       count(*) FILTER (WHERE status = 'delivered')                              AS delivered,
       count(*) FILTER (WHERE status = 'failed')                                 AS failed,
       statement_timestamp() - min(created_at) FILTER (WHERE status IN ('pending', 'leased'))
                                                                                 AS oldest_pending_age,
       count(*) FILTER (WHERE status = 'expired')                                AS expired
FROM outbox.messages
GROUP BY stream;

COMMIT;

ALTER TABLE outbox.messages VALIDATE CONSTRAINT messages_status_domain;
ALTER TABLE outbox.messages VALIDATE CONSTRAINT messages_expired_has_error;
