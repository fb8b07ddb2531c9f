-- outboxd schema, version 7: replay of delivered messages, and the purge horizon that
-- tells a replay what retention already removed.
--
-- A replay copies delivered rows of one stream into new pending rows at the end of the
-- table, in id order, a bounded chunk per transaction: the copies go through the
-- ordinary pipeline, behind whatever is pending. Each copy keeps the original's stream,
-- topic, key, payload and headers, adds two headers, Outbox-Replay (the replay's id) and
-- Outbox-Replay-Of (the original's de-duplication id: its message_id, else its
-- dedup_id), and draws a fresh dedup_id with message_id NULL, so that a broker's
-- duplicate window does not absorb it (docs/replay.md).
--
-- messages_replays records each replay: its filter (created_at window, key, topic), the
-- range of original ids fixed when it started (so it never copies its own copies), its
-- cursor (the last original id copied) and counts. A chunk moves the cursor in the same
-- transaction as its copies, under the replay row's lock: an interrupted replay resumes
-- where it stopped, and two runners of one replay never copy a row twice.
--
-- messages_purged is the purge horizon per stream: every row retention removed was
-- created at or before created_through. The janitor's purge and partition drops write it
-- (stream '' stands for every stream: a dropped partition). A replay whose window reaches
-- back to the horizon is refused, since some of what it names is gone.
--
-- Only new objects: nothing here touches the outbox table's rows or takes a lock on it.
--
-- The janitor now writes the horizon when it purges, so a role that may DELETE from the
-- outbox table (the dispatcher's) needs SELECT, INSERT and UPDATE on messages_purged, and
-- SELECT on messages_replays for the replay metrics. The end of this file grants them to
-- every such role that exists now, so an upgrade does not stop retention; a role granted
-- later gets them as docs/security.md says.

CREATE TABLE outbox.messages_purged (
    stream          text        PRIMARY KEY,
    created_through timestamptz NOT NULL,
    retention       interval,
    purged_at       timestamptz NOT NULL DEFAULT statement_timestamp()
);
COMMENT ON TABLE outbox.messages_purged IS
    'Purge horizon per stream (stream '''' for every stream): rows removed by retention were created at or before created_through. Written by outboxd''s janitor.';

CREATE TABLE outbox.messages_replays (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    stream      text        NOT NULL,
    since       timestamptz,
    until       timestamptz,
    key         text,
    topic       text,
    first_id    bigint,
    last_id     bigint      NOT NULL,
    cursor_id   bigint      NOT NULL,
    copied      bigint      NOT NULL DEFAULT 0,
    total       bigint      NOT NULL,
    state       text        NOT NULL DEFAULT 'running',
    created_by  text        NOT NULL DEFAULT current_user,
    created_at  timestamptz NOT NULL DEFAULT statement_timestamp(),
    updated_at  timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT messages_replays_state_domain CHECK (state IN ('running', 'done', 'cancelled'))
);
COMMENT ON TABLE outbox.messages_replays IS
    'Replays of delivered messages: filter (created_at in [since, until), key, topic), original ids first_id..last_id, cursor_id the last original copied, copied of total.';
CREATE INDEX messages_replays_running_idx ON outbox.messages_replays (stream) WHERE state = 'running';

-- What a replay would copy: the delivered rows of for_stream created in
-- [created_since, created_before) (NULL: unbounded), of for_key and for_topic when given.
-- Refuses (SQLSTATE OBR01) a window reaching back to the stream's purge horizon, and a
-- bad request (OBR00). It scans the stream's delivered rows once.
CREATE FUNCTION outbox.messages_replay_plan(
    for_stream text, created_since timestamptz DEFAULT NULL, created_before timestamptz DEFAULT NULL,
    for_key text DEFAULT NULL, for_topic text DEFAULT NULL,
    OUT total bigint, OUT first_id bigint, OUT last_id bigint)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    h outbox.messages_purged%ROWTYPE;
BEGIN
    IF for_stream IS NULL OR for_stream = '' THEN
        RAISE EXCEPTION 'replay: name the stream to replay' USING ERRCODE = 'OBR00';
    END IF;
    IF created_since IS NOT NULL AND created_before IS NOT NULL AND created_before <= created_since THEN
        RAISE EXCEPTION 'replay: until must be after since' USING ERRCODE = 'OBR00';
    END IF;
    SELECT * INTO h FROM outbox.messages_purged p
    WHERE p.stream IN (for_stream, '') ORDER BY p.created_through DESC LIMIT 1;
    IF FOUND AND (created_since IS NULL OR created_since <= h.created_through) THEN
        RAISE EXCEPTION 'replay: messages of stream % created at or before % were purged (retention %); replay with since after that time',
            for_stream, to_char(h.created_through AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
            coalesce(h.retention::text, 'unknown')
            USING ERRCODE = 'OBR01';
    END IF;
    SELECT count(*), min(m.id), max(m.id) INTO total, first_id, last_id
    FROM outbox.messages m
    WHERE m.stream = for_stream AND m.status = 'delivered'
      AND (created_since IS NULL OR m.created_at >= created_since)
      AND (created_before IS NULL OR m.created_at < created_before)
      AND (for_key IS NULL OR m.key = for_key)
      AND (for_topic IS NULL OR m.topic = for_topic);
END
$$;

-- Starts a replay and returns its id, or, when a running replay of the same stream has
-- the same filter, that one's id with resumed true: running the same replay twice goes
-- on with the first. A lock per table and stream ("obxr") makes two starts at once agree.
CREATE FUNCTION outbox.messages_replay_start(
    for_stream text, created_since timestamptz DEFAULT NULL, created_before timestamptz DEFAULT NULL,
    for_key text DEFAULT NULL, for_topic text DEFAULT NULL, started_by text DEFAULT current_user,
    OUT replay_id bigint, OUT resumed boolean)
LANGUAGE plpgsql AS $$
DECLARE
    p record;
BEGIN
    PERFORM pg_advisory_xact_lock(1868724338, hashtext('outbox.messages' || chr(31) || coalesce(for_stream, '')));
    SELECT r.id INTO replay_id FROM outbox.messages_replays r
    WHERE r.stream = for_stream AND r.state = 'running'
      AND r.since IS NOT DISTINCT FROM created_since AND r.until IS NOT DISTINCT FROM created_before
      AND r.key IS NOT DISTINCT FROM for_key AND r.topic IS NOT DISTINCT FROM for_topic
    ORDER BY r.id LIMIT 1;
    IF FOUND THEN
        resumed := true;
        RETURN;
    END IF;
    p := outbox.messages_replay_plan(for_stream, created_since, created_before, for_key, for_topic);
    INSERT INTO outbox.messages_replays
        (stream, since, until, key, topic, first_id, last_id, cursor_id, total, state, created_by)
    VALUES (for_stream, created_since, created_before, for_key, for_topic, p.first_id, coalesce(p.last_id, 0),
            coalesce(p.first_id - 1, 0), p.total, CASE WHEN p.total = 0 THEN 'done' ELSE 'running' END,
            coalesce(started_by, current_user))
    RETURNING id INTO replay_id;
    resumed := false;
END
$$;

-- Copies the next chunk of a replay, at most max_rows originals in id order, and returns
-- the replay's progress; state becomes 'done' once the range is walked. Call it until
-- state is no longer 'running', one call per transaction (docs/sql-inspection.md). The
-- replay row's lock (FOR UPDATE) serialises runners of one replay; the copies and the
-- cursor commit together. A replay that is done or cancelled copies nothing.
CREATE FUNCTION outbox.messages_replay(replay_id bigint, max_rows integer DEFAULT 1000,
    OUT copied bigint, OUT total bigint, OUT state text)
LANGUAGE plpgsql AS $$
DECLARE
    r    outbox.messages_replays%ROWTYPE;
    n    bigint;
    upto bigint;
BEGIN
    IF max_rows IS NULL OR max_rows < 1 OR max_rows > 10000 THEN
        RAISE EXCEPTION 'replay: max_rows must be 1 to 10000, got %', max_rows USING ERRCODE = 'OBR00';
    END IF;
    SELECT * INTO r FROM outbox.messages_replays x WHERE x.id = replay_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'replay %: no such replay', replay_id USING ERRCODE = 'OBR02';
    END IF;
    IF r.state = 'running' THEN
        WITH picked AS (
            SELECT m.id, m.topic, m.key, m.headers, m.payload,
                   coalesce(m.headers ->> 'Outbox-Replay-Of', m.message_id, m.dedup_id::text, m.id::text) AS original
            FROM outbox.messages m
            WHERE m.id > r.cursor_id AND m.id <= r.last_id
              AND m.stream = r.stream AND m.status = 'delivered'
              AND (r.since IS NULL OR m.created_at >= r.since)
              AND (r.until IS NULL OR m.created_at < r.until)
              AND (r.key IS NULL OR m.key = r.key)
              AND (r.topic IS NULL OR m.topic = r.topic)
            ORDER BY m.id
            LIMIT max_rows
        ), copies AS (
            INSERT INTO outbox.messages (stream, topic, key, headers, payload)
            SELECT r.stream, p.topic, p.key,
                   p.headers || jsonb_build_object('Outbox-Replay', r.id::text, 'Outbox-Replay-Of', p.original),
                   p.payload
            FROM picked p
            ORDER BY p.id
            RETURNING 1
        )
        SELECT (SELECT count(*) FROM copies), max(p.id) INTO n, upto FROM picked p;
        UPDATE outbox.messages_replays x
        SET copied = x.copied + n,
            cursor_id = CASE WHEN n < max_rows THEN x.last_id ELSE upto END,
            state = CASE WHEN n < max_rows OR upto >= x.last_id THEN 'done' ELSE 'running' END,
            updated_at = statement_timestamp()
        WHERE x.id = replay_id
        RETURNING * INTO r;
    END IF;
    copied := r.copied;
    total := r.total;
    state := r.state;
END
$$;

-- Stops a running replay: what it copied stays in line, the rest is not copied.
-- Returns false when the replay was not running.
CREATE FUNCTION outbox.messages_replay_cancel(replay_id bigint) RETURNS boolean
LANGUAGE sql AS $$
    WITH c AS (
        UPDATE outbox.messages_replays
        SET state = 'cancelled', updated_at = statement_timestamp()
        WHERE id = replay_id AND state = 'running'
        RETURNING 1
    )
    SELECT count(*) > 0 FROM c
$$;

-- Carry the dispatcher's grants over to the new tables (see the top of this file): every
-- role but superusers, predefined roles and the owner running this that may DELETE from
-- the outbox table.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT rolname FROM pg_roles
        WHERE NOT rolsuper AND rolname NOT LIKE 'pg\_%' AND rolname <> current_user
          AND has_table_privilege(oid, 'outbox.messages'::regclass, 'DELETE')
    LOOP
        EXECUTE format('GRANT SELECT, INSERT, UPDATE ON outbox.messages_purged TO %I', r.rolname);
        EXECUTE format('GRANT SELECT ON outbox.messages_replays TO %I', r.rolname);
    END LOOP;
END
$$;
