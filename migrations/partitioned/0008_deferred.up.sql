-- outboxd schema, version 8, partitioned layout: an index of the deferred rows. The same
-- change as ../0008_deferred.up.sql; the index is created on every partition, the default
-- one included, and partitions created later copy it.
--
-- A row is deferred (pending, deferred_since set) while its broker is unreachable. Every
-- replica's stats sample counts them per stream, and so do operators (sql-inspection.md,
-- "Deferred"). With no index of their own, that count read every pending row of the
-- stream from the heap. The index is partial: it holds only deferred rows, so it is empty
-- while brokers are reachable, and the claim, the acknowledgement and producers' inserts,
-- whose rows it never covers, do not write to it.
--
-- Building it reads every partition once while writes wait (PostgreSQL cannot build an
-- index on a partitioned table CONCURRENTLY; most rows live in partitions that retention
-- drops).
CREATE INDEX IF NOT EXISTS messages_deferred_idx ON outbox.messages (stream, deferred_since)
    WHERE status = 'pending' AND deferred_since IS NOT NULL;
