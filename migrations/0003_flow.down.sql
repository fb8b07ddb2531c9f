-- Reverts 0003_flow.up.sql: every inserting statement notifies again.
CREATE OR REPLACE FUNCTION outbox.messages_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('outbox.messages', s.stream)
    FROM (SELECT DISTINCT n.stream FROM new_rows n WHERE n.available_at <= statement_timestamp()) s;
    RETURN NULL;
END
$$;
