-- Reactions and statuses may use the realm's custom emoji
-- (generation/actions/messages/reactions.py), whose names have up to 100
-- characters (0016), and a Unicode emoji's code of up to ten code points
-- has up to 89: both columns now take 100, what the endpoints accept
-- (server/handlers/messages.py, server/handlers/personal.py), instead of 60.
--
-- Only widened: every stored row already holds. Each new constraint is
-- added NOT VALID, then validated (as in 0018).
ALTER TABLE reactions
    DROP CONSTRAINT reactions_emoji_name_check,
    DROP CONSTRAINT reactions_emoji_code_check,
    ADD CONSTRAINT reactions_emoji_name_check
        CHECK (length(emoji_name) BETWEEN 1 AND 100) NOT VALID,
    ADD CONSTRAINT reactions_emoji_code_check
        CHECK (length(emoji_code) BETWEEN 1 AND 100) NOT VALID;
ALTER TABLE reactions VALIDATE CONSTRAINT reactions_emoji_name_check;
ALTER TABLE reactions VALIDATE CONSTRAINT reactions_emoji_code_check;

ALTER TABLE user_statuses
    DROP CONSTRAINT user_statuses_emoji_name_check,
    DROP CONSTRAINT user_statuses_emoji_code_check,
    ADD CONSTRAINT user_statuses_emoji_name_check CHECK (length(emoji_name) <= 100) NOT VALID,
    ADD CONSTRAINT user_statuses_emoji_code_check CHECK (length(emoji_code) <= 100) NOT VALID;
ALTER TABLE user_statuses VALIDATE CONSTRAINT user_statuses_emoji_name_check;
ALTER TABLE user_statuses VALIDATE CONSTRAINT user_statuses_emoji_code_check;
