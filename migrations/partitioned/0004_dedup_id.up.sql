-- outboxd schema, version 4, partitioned layout: every row carries a random
-- de-duplication id. The same change as ../0004_dedup_id.up.sql; both steps recurse to
-- every partition, the default one included.
--
-- Brokers and consumers de-duplicate on an id the dispatcher sends with each message
-- (JetStream's Nats-Msg-Id, the Outbox-Message-Id header). The row id cannot be it: ids
-- start at 1 in every outbox table of every database and come round again after a
-- restore, so two services publishing into one JetStream stream would have the second
-- one's messages absorbed as duplicates of the first's, and marked delivered all the
-- same. dedup_id is random, drawn by the database (gen_random_uuid(), PostgreSQL 13+).
--
-- The column is added without a default and the default set in a second step: a
-- volatile default in ADD COLUMN would rewrite the whole table under an exclusive lock,
-- while these two steps change only the catalog, whatever the table holds. Rows inserted
-- before this version keep NULL; the claim fills it once, in the same statement that
-- leases the row, so every publish of a row carries the same id (store/statements.go).
ALTER TABLE outbox.messages ADD COLUMN dedup_id uuid;
ALTER TABLE outbox.messages ALTER COLUMN dedup_id SET DEFAULT gen_random_uuid();

COMMENT ON COLUMN outbox.messages.dedup_id IS
    'Random id the broker and consumers de-duplicate on when message_id is NULL (Outbox-Message-Id header); drawn at INSERT, or at the first claim for rows older than the column. Owned by the dispatcher.';
COMMENT ON COLUMN outbox.messages.message_id IS
    'Optional caller-supplied id, sent to the broker and consumers for de-duplication (Outbox-Message-Id) instead of dedup_id.';
