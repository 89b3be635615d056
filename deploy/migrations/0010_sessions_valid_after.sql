-- Browser sessions (server/sessions.py) are signed tokens the server does
-- not store: a logout ends every session of the user issued before it by
-- moving this cutoff (seconds since the epoch, by the server's clock).
-- A constant default: no table rewrite.
ALTER TABLE users ADD COLUMN sessions_valid_after double precision NOT NULL DEFAULT 0;
