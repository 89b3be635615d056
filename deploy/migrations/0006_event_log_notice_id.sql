-- A `send_event` retried with the same notice id (after a PublishError) finds
-- the row its first try wrote instead of logging the event a second time.
ALTER TABLE event_log ADD COLUMN notice_id text;
CREATE UNIQUE INDEX event_log_notice_id ON event_log (notice_id) WHERE notice_id IS NOT NULL;
