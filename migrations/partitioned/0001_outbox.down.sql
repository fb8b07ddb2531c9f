-- Removes everything partitioned/0001_outbox.up.sql created except the schema. Dropping
-- the partitioned table drops every partition with it, the default one and those outboxd
-- created at run time, and the identity sequence.
DROP VIEW IF EXISTS outbox.messages_stats;
DROP FUNCTION IF EXISTS outbox.messages_requeue_failed(text, integer);
DROP FUNCTION IF EXISTS outbox.messages_requeue(bigint[]);
DROP TABLE IF EXISTS outbox.messages;
DROP FUNCTION IF EXISTS outbox.messages_notify();
