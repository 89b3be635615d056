-- Zulip's `can_access_all_users_group` realm setting: who may see every
-- user of the realm. Zulip allows two values, role:everyone (the default:
-- everyone sees everyone) and role:members (guests see only the users they
-- share a channel or a conversation with, and every bot). eventq
-- stores which of the two as `guests_see_all_users`; register and PATCH
-- /realm name the realm's system group (generation/actions/access.py).
ALTER TABLE realms ADD COLUMN guests_see_all_users boolean NOT NULL DEFAULT true;

-- A guest's conversations (direct messages of two or more participants)
-- give access to their participants: this finds them without reading every
-- message of the guest (generation/actions/access.py).
CREATE INDEX messages_conversation_participants ON messages USING gin (participant_ids)
    WHERE cardinality(participant_ids) > 1;
