-- outboxd schema, version 8: an index of the deferred rows.
--
-- A row is deferred (pending, deferred_since set) while its broker is unreachable. Every
-- replica's stats sample counts them per stream, and so do operators (sql-inspection.md,
-- "Deferred"). With no index of their own, that count read every pending row of the
-- stream from the heap: at 100,000 pending rows of 1 KiB, 61 of the sample's 88 ms (204 of
-- 254 ms on a cold cache), every replica, every sample. The index is partial: it holds only deferred rows, so it is
-- empty while brokers are reachable, and the claim, the acknowledgement and producers'
-- inserts, whose rows it never covers, do not write to it.
--
-- Building it reads the table once while writes wait, even though it ends up empty. On a
-- very large plain table, create it first with CREATE INDEX CONCURRENTLY under the same
-- name and definition: the migration then keeps it (IF NOT EXISTS).
CREATE INDEX IF NOT EXISTS messages_deferred_idx ON outbox.messages (stream, deferred_since)
    WHERE status = 'pending' AND deferred_since IS NOT NULL;
