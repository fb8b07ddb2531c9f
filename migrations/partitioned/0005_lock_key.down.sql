-- Reverts 0005_lock_key.up.sql. Producers that call the function fail until it is back.
DROP FUNCTION outbox.messages_lock_key(text, text);
