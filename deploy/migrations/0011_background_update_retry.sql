-- Background updates (server/background.py): when a failed update may be
-- tried again (2, 4, 8 ... s after it failed, at most 5 min), in its row, so
-- that every runner waits as long, not only the one that saw it fail.
-- It counts only while `failures` > 0: a runner of the version before this
-- one resets `failures` (after a batch that worked, on enqueue) without
-- knowing this column, and ignores it otherwise.
-- Nullable, no default: no table rewrite, and running shards of the version
-- before keep working (restart them in any order).
ALTER TABLE background_updates ADD COLUMN retry_at timestamptz;
