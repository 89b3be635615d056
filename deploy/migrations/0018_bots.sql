-- Bots (POST /bots): a bot is a user row with `is_bot`, Zulip's `bot_type`
-- (1 generic, 2 incoming webhook, 3 outgoing webhook, 4 embedded; eventq
-- creates 1 and 2) and its owner, who administers it together with the
-- realm's administrators. A bot has an API key of its own in the same
-- hashed scheme as every user's. A human has neither a type nor an owner;
-- a bot always has both.
--
-- The new columns are nullable or have a constant default: no table
-- rewrite. The constraint is checked without holding the table's exclusive
-- lock for a full scan (as in 0004).
ALTER TABLE users
    ADD COLUMN is_bot boolean NOT NULL DEFAULT false,
    ADD COLUMN bot_type smallint CHECK (bot_type IN (1, 2, 3, 4)),
    ADD COLUMN bot_owner_id bigint REFERENCES users (id);
ALTER TABLE users ADD CONSTRAINT users_bot_fields
    CHECK (is_bot = (bot_type IS NOT NULL) AND is_bot = (bot_owner_id IS NOT NULL)) NOT VALID;
ALTER TABLE users VALIDATE CONSTRAINT users_bot_fields;

-- The bots of an owner (the limit per owner, a deactivated owner's bots)
-- and of a realm (register's `realm_bots`): few rows of a large table.
CREATE INDEX users_bot_owner ON users (bot_owner_id) WHERE is_bot;
