-- resume_from reads one user's events in SQL (server/resume.py), not every
-- row of their realm's log in the server's loop.
--
-- `recipients`: the ids of the notice's users (who it was sent to);
-- `public_message`: whether it is a channel message marked public, which
-- `all_public_streams` queues take too (generation.sharding.reaches_whole_realm).
-- NULL in both: written by a writer of a version before this one (rows
-- from before this migration, and from producers or shards not yet
-- upgraded): a reader parses their notice instead.
-- Nullable, no default: no table rewrite, and writers of the version before
-- keep working.
ALTER TABLE event_log ADD COLUMN recipients bigint[], ADD COLUMN public_message boolean;

-- The lowest stream position this installation gave the user (a register's
-- answer): a resume_from below it is not a position the user was given, and
-- is refused (one below the log's pruned position is refused as expired).
-- Written after each register with state (server/floors.py).
CREATE TABLE user_stream_floors (
    user_id    bigint PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    position   bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- The indexes those reads use are built CONCURRENTLY by a background update
-- (server/updates.py): every send_event writes this table.
INSERT INTO background_updates (name) VALUES ('event_log_recipients_index');
