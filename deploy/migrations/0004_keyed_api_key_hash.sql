-- API keys hashed with a key (issue 7): HMAC-SHA256 keyed with the
-- installation's API key secret (EVENTQ_API_KEY_SECRET), so that a database
-- dump alone reveals nothing and allows no offline guessing. Rows written
-- before this migration keep their plain SHA-256 (scheme 1) until the user's
-- next successful authentication, which rewrites them (scheme 2).

ALTER TABLE users ADD COLUMN api_key_hash_scheme smallint NOT NULL DEFAULT 1
    CHECK (api_key_hash_scheme IN (1, 2));
ALTER TABLE users ALTER COLUMN api_key_hash_scheme SET DEFAULT 2;
