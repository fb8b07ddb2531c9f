-- Reverts 0004_dedup_id.up.sql. The ids are lost: a dispatcher of an older version then
-- de-duplicates on the row id again.
ALTER TABLE outbox.messages DROP COLUMN dedup_id;
COMMENT ON COLUMN outbox.messages.message_id IS 'Optional caller-supplied id, sent to the broker for de-duplication instead of id.';
