-- The inbox a `postgres` driver of outboxd inserts into (docs/configuration.md#postgres).
--
-- Written for the driver's default table, public.outboxd_inbox; for another `table`,
-- replace the name (and the index's). Apply it with psql to the database the driver's
-- `url` names:  psql "$INBOX_URL" -f docs/sql/inbox.sql
--
-- outboxd writes the first seven columns, one row per message; the database fills
-- received_at and seq. A message published again (the same Outbox-Message-Id) is not
-- inserted again: the primary key absorbs it, so the inbox holds each message once.

CREATE TABLE public.outboxd_inbox (
    -- The Outbox-Message-Id header: the producer's message_id, else the outbox row's
    -- dedup_id. Unique across outbox tables and databases.
    message_id   text        PRIMARY KEY,
    -- The outbox row's id (Outbox-Id): unique within its outbox table only.
    outbox_id    bigint      NOT NULL,
    stream       text        NOT NULL,
    -- The row's topic after the stream's topic_prefix.
    topic        text        NOT NULL,
    -- The row's key; NULL for none.
    key          bytea,
    -- Every header as a JSON object of strings: the producer's, and Outbox-Id,
    -- Outbox-Stream and Outbox-Message-Id.
    headers      jsonb       NOT NULL,
    payload      bytea       NOT NULL,
    -- When the inserting transaction began, on the inbox database's clock.
    received_at  timestamptz NOT NULL DEFAULT now(),
    -- Arrival order: the rows of one publish take consecutive values in the order of
    -- their outbox batch.
    seq          bigint      GENERATED ALWAYS AS IDENTITY,
    -- The consumer's own column: outboxd never writes it. Mark a row handled in the
    -- transaction that acts on it, and keep the row: deleting it would let a
    -- re-publish of the message in again.
    processed_at timestamptz
);

-- What a consumer reads next: unhandled rows, in arrival order.
CREATE INDEX outboxd_inbox_unprocessed_idx ON public.outboxd_inbox (seq) WHERE processed_at IS NULL;
