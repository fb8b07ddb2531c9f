-- Reverts 0008_deferred.up.sql: the deferred rows lose their index (counting them reads
-- every pending row again); no row changes.
DROP INDEX outbox.messages_deferred_idx;
