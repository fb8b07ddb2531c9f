-- Reverts 0006_expiry.up.sql. Version 5 has no expired status: expired rows become
-- failed, their reason kept in last_error, so they stay visible (and requeueable, which
-- would publish them: look before requeueing). The producers' expires_at is lost. The
-- view loses a column, which CREATE OR REPLACE cannot do: it is dropped and created
-- again, so grants on it must be given again.
UPDATE outbox.messages SET status = 'failed' WHERE status = 'expired';

DROP VIEW outbox.messages_stats;
CREATE VIEW outbox.messages_stats AS
SELECT stream,
       count(*) FILTER (WHERE status = 'pending')                                AS pending,
       count(*) FILTER (WHERE status = 'pending' AND deferred_since IS NOT NULL) AS deferred,
       count(*) FILTER (WHERE status = 'leased')                                 AS leased,
       count(*) FILTER (WHERE status = 'delivered')                              AS delivered,
       count(*) FILTER (WHERE status = 'failed')                                 AS failed,
       statement_timestamp() - min(created_at) FILTER (WHERE status IN ('pending', 'leased'))
                                                                                 AS oldest_pending_age
FROM outbox.messages
GROUP BY stream;

DROP INDEX outbox.messages_expired_idx;
DROP INDEX outbox.messages_expiry_idx;
ALTER TABLE outbox.messages
    DROP CONSTRAINT messages_expired_has_error,
    DROP CONSTRAINT messages_status_domain,
    ADD CONSTRAINT messages_status_domain
        CHECK (status IN ('pending', 'leased', 'delivered', 'failed')) NOT VALID;
ALTER TABLE outbox.messages DROP COLUMN expires_at;

COMMIT;

ALTER TABLE outbox.messages VALIDATE CONSTRAINT messages_status_domain;
