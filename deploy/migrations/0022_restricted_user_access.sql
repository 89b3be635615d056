-- Zulip's `can_access_all_users_group` realm setting: who may see every
-- user of the realm. Zulip allows two values, role:everyone (the default:
-- everyone sees everyone) and role:members (guests see only the users they
-- share a channel or a conversation with, and every bot). eventq stores
-- which of the two as `guests_see_all_users`; register and PATCH /realm
-- name the realm's system group (generation/actions/access.py).
ALTER TABLE realms ADD COLUMN guests_see_all_users boolean NOT NULL DEFAULT true;

-- Who has had a conversation with whom: a row per ordered pair of the
-- participants of a direct message (1:1 or group; a note to oneself has
-- none). A conversation lets its participants see each other (access.py);
-- like Zulip's group conversation subscriptions, a pair outlives the
-- deletion of the messages that made it. Kept by a trigger, so that every
-- way a message is written (the actions, imports, tests, benchmarks)
-- keeps it.
CREATE TABLE conversation_partners (
    user_id    bigint NOT NULL REFERENCES users (id),
    partner_id bigint NOT NULL REFERENCES users (id),
    PRIMARY KEY (user_id, partner_id),
    CHECK (user_id <> partner_id)
);
-- Who has had a conversation with a given user (the audience of an event
-- about them).
CREATE INDEX conversation_partners_partner ON conversation_partners (partner_id);

CREATE FUNCTION note_conversation_partners() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO conversation_partners (user_id, partner_id)
    SELECT a, b FROM unnest(NEW.participant_ids) a, unnest(NEW.participant_ids) b
    WHERE a <> b
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END;
$$;

-- The conversations already held, then the trigger for new ones. The
-- trigger's lock stops message writes until this migration commits, so it
-- is taken after the long read, and only the messages written meanwhile
-- are read again under it.
DO $$
DECLARE
    seen bigint;
BEGIN
    SELECT coalesce(max(id), 0) INTO seen FROM messages;
    INSERT INTO conversation_partners (user_id, partner_id)
    SELECT DISTINCT a, b
    FROM messages m, unnest(m.participant_ids) a, unnest(m.participant_ids) b
    WHERE m.id <= seen AND cardinality(m.participant_ids) > 1 AND a <> b
    ON CONFLICT DO NOTHING;
    CREATE TRIGGER messages_conversation_partners AFTER INSERT ON messages
        FOR EACH ROW WHEN (cardinality(NEW.participant_ids) > 1)
        EXECUTE FUNCTION note_conversation_partners();
    INSERT INTO conversation_partners (user_id, partner_id)
    SELECT DISTINCT a, b
    FROM messages m, unnest(m.participant_ids) a, unnest(m.participant_ids) b
    WHERE m.id > seen AND cardinality(m.participant_ids) > 1 AND a <> b
    ON CONFLICT DO NOTHING;
END;
$$;
