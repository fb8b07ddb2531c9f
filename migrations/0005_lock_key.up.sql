-- outboxd schema, version 5: the key lock of ordered streams, defined once, here.
--
-- A key's order is the order of its ids, drawn at INSERT, while rows become visible at
-- COMMIT; two transactions writing one key at once can therefore commit out of id order.
-- Producers of one key take turns by calling this function in their transaction before the
-- INSERT (docs/ordering.md). Go producers (producer.LockKey) and SQL producers call the
-- same function, so they take the same lock whatever client they use: the lock's key is
-- derived here and nowhere else.
--
-- The lock is a transaction-scoped advisory lock, key (1868724331, hash), 1868724331 being
-- "obxk", a class of its own beside outboxd's other advisory locks ("obxd", "obxf"), so
-- that a key lock never waits for one of them. The hash covers the table, the stream and
-- the key: order is promised per stream and key, so the same key of two streams (or two
-- outbox tables) is independent and its producers do not wait for each other. The stream
-- is prefixed by its length so that no stream/key pair spells another. Two pairs whose
-- 32-bit hashes collide share a lock; that only makes one producer wait for the other's
-- commit, never reorders anything.
--
-- SECURITY INVOKER (the default): the function reads no table, and advisory locks need no
-- privilege, so a producer role allowed only to INSERT may call it with its own rights.
-- EXECUTE is granted to PUBLIC explicitly, so a database whose default privileges revoke
-- it from functions still lets every producer take the lock. The search_path is pinned to
-- the catalog, so no object in a caller's schemas can change how the key is derived.
CREATE FUNCTION outbox.messages_lock_key(stream text, key text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF stream IS NULL OR key IS NULL THEN
        RAISE EXCEPTION 'lock_key: stream and key must not be NULL (got stream %, key %)',
            coalesce(quote_literal(stream), 'NULL'), coalesce(quote_literal(key), 'NULL')
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'A message without a key is not ordered and needs no lock.';
    END IF;
    PERFORM pg_advisory_xact_lock(1868724331,
        hashtext('outbox.messages' || chr(31) || length(stream) || ':' || stream || chr(31) || key));
END
$$;
COMMENT ON FUNCTION outbox.messages_lock_key(text, text) IS
    'Makes the producers of one key of an ordered stream take turns: call it in the producing transaction before the INSERT; held until the transaction ends (docs/ordering.md).';
GRANT EXECUTE ON FUNCTION outbox.messages_lock_key(text, text) TO PUBLIC;
