-- Queue definitions journaled at register (issue 15): a queue registered
-- after a shard's last checkpoint is rebuilt from its row after a crash, at
-- the stream position its contents are complete to. Rows older than the
-- shard's last checkpoint are deleted (the checkpoint has those queues).
CREATE TABLE queue_journal (
    queue_id text PRIMARY KEY,
    shard text NOT NULL,
    -- Wall-clock seconds of the server that wrote it, compared with its own
    -- checkpoints' times.
    journaled_at double precision NOT NULL,
    definition bytea NOT NULL
);
CREATE INDEX queue_journal_shard ON queue_journal (shard, journaled_at);
