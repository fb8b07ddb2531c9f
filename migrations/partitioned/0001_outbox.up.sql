-- outboxd schema, version 1, partitioned layout.
--
-- The same table as ../0001_outbox.up.sql (columns, defaults, constraints, indexes,
-- trigger, functions, view), range-partitioned by created_at so that retention can drop
-- a whole partition instead of deleting rows. Differences, all forced by partitioning:
--   * the primary key is (id, created_at): a unique constraint on a partitioned table
--     must contain the partition key. id stays unique in practice because only the
--     identity column assigns it: GENERATED ALWAYS refuses a producer's own id, as in the
--     plain layout (OVERRIDING SYSTEM VALUE is the operator's own responsibility).
--   * PostgreSQL 15 accepts the identity column on the partitioned table, but its
--     partitions do not inherit it: rows are inserted through outbox.messages (which is
--     what producers do anyway); an INSERT naming a partition fails on id NOT NULL.
--   * a DEFAULT partition takes any row whose created_at no time partition covers, so a
--     producer's INSERT never fails for want of a partition.
-- Time partitions are created and dropped at run time by outboxd (store/partitions.go).
--
-- Written for the default names, like the plain layout; `outboxd migrate` substitutes
-- other configured names in the same way.

CREATE SCHEMA IF NOT EXISTS outbox;

CREATE TABLE outbox.messages (
    -- Written by producers.
    id             bigint GENERATED ALWAYS AS IDENTITY,
    stream         text        NOT NULL,
    topic          text        NOT NULL,
    key            text,
    headers        jsonb       NOT NULL DEFAULT '{}',
    payload        bytea       NOT NULL,
    available_at   timestamptz NOT NULL DEFAULT statement_timestamp(),
    message_id     text,

    -- Owned by the dispatcher.
    status         text        NOT NULL DEFAULT 'pending',
    attempts       integer     NOT NULL DEFAULT 0,
    lease_token    uuid,
    lease_until    timestamptz,
    owner          text,
    last_error     text,
    created_at     timestamptz NOT NULL DEFAULT statement_timestamp(),
    published_at   timestamptz,
    deferred_since timestamptz,

    -- Producer input, refused at INSERT so the producer's transaction fails loudly.
    CONSTRAINT messages_stream_not_empty CHECK (stream <> ''),
    CONSTRAINT messages_topic_not_empty CHECK (topic <> ''),
    CONSTRAINT messages_headers_object CHECK (jsonb_typeof(headers) = 'object'),
    CONSTRAINT messages_headers_string_values
        CHECK (NOT jsonb_path_exists(headers, 'strict $.* ? (@.type() != "string")')),
    CONSTRAINT messages_message_id_not_empty CHECK (message_id <> ''),

    -- Dispatcher invariants.
    CONSTRAINT messages_status_domain
        CHECK (status IN ('pending', 'leased', 'delivered', 'failed')),
    CONSTRAINT messages_lease_iff_leased
        CHECK ((status = 'leased') = (lease_token IS NOT NULL)
               AND (lease_token IS NULL) = (lease_until IS NULL)
               AND (lease_token IS NULL OR owner IS NOT NULL)),
    CONSTRAINT messages_attempts_not_negative CHECK (attempts >= 0),
    CONSTRAINT messages_published_iff_delivered
        CHECK ((status = 'delivered') = (published_at IS NOT NULL)),
    CONSTRAINT messages_failed_has_error CHECK (status <> 'failed' OR last_error IS NOT NULL),
    CONSTRAINT messages_deferred_only_pending CHECK (deferred_since IS NULL OR status IN ('pending', 'leased')),

    PRIMARY KEY (id, created_at)
) PARTITION BY RANGE (created_at);

CREATE TABLE outbox.messages_default PARTITION OF outbox.messages DEFAULT;

COMMENT ON TABLE outbox.messages IS
    'Transactional outbox drained by outboxd. Producers write stream, topic, key, headers, payload and optionally available_at and message_id; every other column belongs to the dispatcher.';
COMMENT ON TABLE outbox.messages_default IS
    'Rows whose created_at no time partition of the outbox covers. Normally empty: rows here block creating a partition over their range.';
COMMENT ON COLUMN outbox.messages.key IS 'Kafka partition key and ordering key; NULL for none.';
COMMENT ON COLUMN outbox.messages.headers IS 'Flat JSON object of string to string, passed to the broker as message headers.';
COMMENT ON COLUMN outbox.messages.available_at IS 'Not delivered before this time (delayed delivery, retry backoff).';
COMMENT ON COLUMN outbox.messages.message_id IS 'Optional caller-supplied id, sent to the broker for de-duplication instead of id.';
COMMENT ON COLUMN outbox.messages.deferred_since IS 'Set while delivery is deferred because the broker was unreachable; no attempt is spent.';

-- Claim path: pending rows of one stream in the order they become available. The claim
-- statement orders by exactly (available_at, id) so the planner walks this index and
-- never touches delivered rows.
CREATE INDEX messages_claim_idx ON outbox.messages (stream, available_at, id)
    WHERE status = 'pending';
-- Reclaiming expired leases.
CREATE INDEX messages_lease_idx ON outbox.messages (lease_until) WHERE status = 'leased';
-- Retention of delivered rows.
CREATE INDEX messages_delivered_idx ON outbox.messages (published_at) WHERE status = 'delivered';
-- Failed rows, per stream, for inspection, requeue and dead-lettering.
CREATE INDEX messages_failed_idx ON outbox.messages (stream, id) WHERE status = 'failed';
-- Age of the oldest undelivered message per stream.
CREATE INDEX messages_undelivered_idx ON outbox.messages (stream, created_at)
    WHERE status IN ('pending', 'leased');

-- One notification per stream per inserting statement (PostgreSQL also folds duplicates
-- within a transaction); delivered at COMMIT, so a rolled-back insert wakes nobody.
CREATE FUNCTION outbox.messages_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('outbox.messages', s.stream)
    FROM (SELECT DISTINCT n.stream FROM new_rows n WHERE n.available_at <= statement_timestamp()) s;
    RETURN NULL;
END
$$;

CREATE TRIGGER messages_notify AFTER INSERT ON outbox.messages
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION outbox.messages_notify();

-- Requeue failed messages by id. Resets together every column a fresh message has, so a
-- requeued row is indistinguishable from a new one except for its id and created_at.
-- Returns the number of rows requeued; ids that are not failed are left alone.
CREATE FUNCTION outbox.messages_requeue(ids bigint[]) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    n       bigint;
    streams text[];
BEGIN
    WITH r AS (
        UPDATE outbox.messages
        SET status = 'pending', attempts = 0, last_error = NULL, deferred_since = NULL,
            available_at = statement_timestamp()
        WHERE id = ANY (ids) AND status = 'failed'
        RETURNING stream
    )
    SELECT count(*), array_agg(DISTINCT stream) INTO n, streams FROM r;
    -- Wake the pipelines of the affected streams, as an insert would.
    PERFORM pg_notify('outbox.messages', s) FROM unnest(streams) AS s;
    RETURN n;
END
$$;

-- Requeue up to max_rows failed messages, oldest first, of one stream or (NULL) of all.
CREATE FUNCTION outbox.messages_requeue_failed(for_stream text DEFAULT NULL, max_rows integer DEFAULT 1000)
RETURNS bigint
LANGUAGE sql AS $$
    SELECT outbox.messages_requeue(array(
        SELECT id FROM outbox.messages
        WHERE status = 'failed' AND (for_stream IS NULL OR stream = for_stream)
        ORDER BY id
        LIMIT max_rows))
$$;

-- Operators' view: per stream, counts by status and the age of the oldest undelivered
-- message. It scans the table; dashboards should use outboxd's metrics instead.
CREATE VIEW outbox.messages_stats AS
SELECT stream,
       count(*) FILTER (WHERE status = 'pending')                                AS pending,
       count(*) FILTER (WHERE status = 'pending' AND deferred_since IS NOT NULL) AS deferred,
       count(*) FILTER (WHERE status = 'leased')                                 AS leased,
       count(*) FILTER (WHERE status = 'delivered')                              AS delivered,
       count(*) FILTER (WHERE status = 'failed')                                 AS failed,
       statement_timestamp() - min(created_at) FILTER (WHERE status IN ('pending', 'leased'))
                                                                                 AS oldest_pending_age
FROM outbox.messages
GROUP BY stream;
