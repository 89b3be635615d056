-- Browser sessions (server/sessions.py) are signed tokens the server does
-- not store; each carries the generation of its user's sessions it was
-- issued in. A logout moves the user to the next generation, ending every
-- session issued before, on every shard, whatever their clocks say.
-- A constant default: no table rewrite.
ALTER TABLE users ADD COLUMN sessions_generation integer NOT NULL DEFAULT 0;
