-- Message history (GET /messages, issue 34).
--
-- `client`: the name of the client a message was sent from (Zulip's
-- `client` field); NULL for a message stored before this migration.
-- `edit_history`: Zulip's edit history entries of the message, oldest first
-- (user_id, timestamp, and prev_content/prev_rendered_content or
-- prev_topic/topic); NULL for a message never edited.
-- Nullable, no default: no table rewrite.
ALTER TABLE messages ADD COLUMN client text, ADD COLUMN edit_history jsonb;

-- The indexes history reads use (a channel's messages by id, a sender's,
-- full-text search) are built CONCURRENTLY by a background update
-- (server/database/updates.py): every message sent writes this table.
INSERT INTO background_updates (name) VALUES ('message_history_indexes');
