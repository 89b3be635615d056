-- Background updates (issue 16, server/background.py): long database work
-- done in small paced batches by one runner, after the migration that asks
-- for it has returned. A migration enqueues an update by inserting its row;
-- the code that does it is registered under the same name
-- (server/updates.py). `progress` is committed in the same transaction as
-- each batch, so a runner killed mid-update resumes where the last batch
-- ended.
CREATE TABLE background_updates (
    name        text PRIMARY KEY,
    -- Updates run in the order they were enqueued (then inserted).
    seq         bigserial,
    -- Updates that must be finished before this one starts.
    depends_on  text[] NOT NULL DEFAULT '{}',
    progress    jsonb NOT NULL DEFAULT '{}',
    items_done  bigint NOT NULL DEFAULT 0,
    batches     bigint NOT NULL DEFAULT 0,
    -- The last batch's size and the measured rate, for `db background status`.
    batch_size  integer,
    items_per_sec double precision,
    -- Items still to do, when the update can tell: the estimated time left.
    items_left  bigint,
    -- Time spent on it (batches and the pauses before them), for the time left.
    run_secs    double precision NOT NULL DEFAULT 0,
    enqueued_at timestamptz NOT NULL DEFAULT now(),
    started_at  timestamptz,
    updated_at  timestamptz,
    finished_at timestamptz,
    failures    integer NOT NULL DEFAULT 0,
    last_error  text
);

-- How far each server's saved queues need the event log (the floor of its
-- last checkpoint, or its stream position when it saves none), so that the
-- retention update, run by one process, never prunes what another server
-- would need to rebuild its queues after a crash. A row not refreshed for
-- longer than the retention period holds nothing back (a server removed).
CREATE TABLE stream_readers (
    reader     text PRIMARY KEY,
    floor      bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- API key hashes of scheme 3: the keyed hash (HMAC-SHA256 with the
-- installation's secret) of the plain SHA-256 of scheme 1, written by the
-- wrap_legacy_api_key_hashes update without knowing the key. A dump then
-- holds no unkeyed hash. Old code refuses these rows: restart every shard on
-- this version before a background runner works (see the README).
-- (The new check reads every row under the table's lock: a moment even for
-- a large table, and nothing else in this migration scans one.)
ALTER TABLE users DROP CONSTRAINT users_api_key_hash_scheme_known,
    ADD CONSTRAINT users_api_key_hash_scheme_known CHECK (api_key_hash_scheme IN (1, 2, 3));

INSERT INTO background_updates (name) VALUES
    ('wrap_legacy_api_key_hashes'),
    ('event_log_realm_index');
