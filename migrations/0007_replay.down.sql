-- Reverts 0007_replay.up.sql. The copies a replay made stay in the table as ordinary
-- messages; the record of replays and the purge horizon are dropped.
DROP FUNCTION outbox.messages_replay_cancel(bigint);
DROP FUNCTION outbox.messages_replay(bigint, integer);
DROP FUNCTION outbox.messages_replay_start(text, timestamptz, timestamptz, text, text, text);
DROP FUNCTION outbox.messages_replay_plan(text, timestamptz, timestamptz, text, text);
DROP TABLE outbox.messages_replays;
DROP TABLE outbox.messages_purged;
