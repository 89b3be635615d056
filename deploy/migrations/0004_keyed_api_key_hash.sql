-- API keys hashed with a key (issue 7): HMAC-SHA256 keyed with the
-- installation's API key secret (EVENTQ_API_KEY_SECRET), so that a database
-- dump alone reveals nothing and allows no offline guessing. Rows of scheme 1
-- (plain SHA-256: written before this migration, or by a process of the old
-- version still running) are rewritten (scheme 2) at the user's next
-- successful authentication. New code writes the scheme explicitly; the
-- default stays 1 for old code.
--
-- Upgrade across this migration by stopping every shard, migrating, then
-- starting them: an old shard would refuse a row a new one has rewritten.

ALTER TABLE users ADD COLUMN api_key_hash_scheme smallint NOT NULL DEFAULT 1;
-- Checked without holding the table's exclusive lock for a full scan.
ALTER TABLE users ADD CONSTRAINT users_api_key_hash_scheme_known
    CHECK (api_key_hash_scheme IN (1, 2)) NOT VALID;
ALTER TABLE users VALIDATE CONSTRAINT users_api_key_hash_scheme_known;
