-- How far the event log has been pruned (EVENTQ_EVENT_LOG_RETENTION_*):
-- every position at or below `through` may be gone, none above it is. A
-- client resuming from position P (`resume_from`) can be given what it
-- missed only when P >= through; a queue saved at P likewise.
CREATE TABLE event_log_pruned (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    through bigint NOT NULL
);
INSERT INTO event_log_pruned (through) VALUES (0);
