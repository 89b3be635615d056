-- The event log (issue 15): every durable event, written in the transaction
-- of the change it describes (a transactional outbox), with a position from
-- one sequence. A position is taken at the end of its transaction, after the
-- change's own writes, so two transactions that touch the same rows get
-- positions in the order they commit; unrelated transactions may still
-- commit out of position order, and a transaction that rolls back leaves a
-- hole (servers read the log to tell a hole from a late commit).
--
-- `notice` is the notice's wire form (orjson: event, users with their own
-- data, realm_id), exactly what RabbitMQ carries. Rows are pruned by age
-- and total size (EVENTQ_EVENT_LOG_RETENTION_*), oldest first.

CREATE SEQUENCE event_log_position AS bigint;

CREATE TABLE event_log (
    position bigint PRIMARY KEY,
    realm_id integer,
    event_type text NOT NULL,
    notice bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Pruning by age walks this index from the oldest row.
CREATE INDEX event_log_created_at ON event_log (created_at);
