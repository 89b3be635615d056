"""Register's initial state: fetch it from PostgreSQL, replay the events that
arrived meanwhile with `apply_events`, and return it with the queue to follow."""
