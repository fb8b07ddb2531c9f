-- outboxd schema, version 3: producers stop notifying a stream whose pipeline is flowing.
--
-- PostgreSQL makes every transaction that sent a notification commit one at a time, the
-- lock held through its WAL flush, so that notifications are queued in commit order. At a
-- high rate of producer transactions that lock, not the disk, caps how many they can
-- commit (16 producers: about a fifth of the rate without the trigger on a 2-core test
-- machine; docs/benchmarks.md). While messages of a stream arrive quickly, one pipeline of
-- the stream polls it every few milliseconds and holds the stream's flow lock, a
-- session-level advisory lock: key (1868724326, hashtext('<schema>.<table>:<stream>')),
-- 1868724326 being "obxf". The trigger notifies a stream only when it can take that lock
-- in shared mode, which it gives back at once; so notifications flow when pipelines wait
-- for them, and stop while one polls. A pipeline whose connection dies releases the lock
-- with it, and the notifications resume.
CREATE OR REPLACE FUNCTION outbox.messages_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    s   text;
    key integer;
BEGIN
    FOR s IN SELECT DISTINCT n.stream FROM new_rows n WHERE n.available_at <= statement_timestamp() LOOP
        key := hashtext('outbox.messages' || ':' || s);
        IF pg_try_advisory_lock_shared(1868724326, key) THEN
            PERFORM pg_advisory_unlock_shared(1868724326, key);
            PERFORM pg_notify('outbox.messages', s);
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;
