-- Removes everything 0001_outbox.up.sql created except the schema, which may hold other
-- tables (and, under outboxd migrate, the migrations table itself).
DROP VIEW IF EXISTS outbox.messages_stats;
DROP FUNCTION IF EXISTS outbox.messages_requeue_failed(text, integer);
DROP FUNCTION IF EXISTS outbox.messages_requeue(bigint[]);
DROP TABLE IF EXISTS outbox.messages;
DROP FUNCTION IF EXISTS outbox.messages_notify();
