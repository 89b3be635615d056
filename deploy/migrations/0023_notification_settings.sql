-- The settings that decide the notifications of users who are away
-- (docs/notifications.md; generation/actions/messages/notify.py reads them, docs/api.md
-- lists them). Zulip's names and defaults; each is the user's to change:
-- PATCH settings for the user's own, POST users/me/subscriptions/properties
-- for a channel's.
ALTER TABLE user_settings
    -- A direct message or a mention, while away: by email, by push.
    ADD COLUMN enable_offline_email_notifications boolean NOT NULL DEFAULT true,
    ADD COLUMN enable_offline_push_notifications boolean NOT NULL DEFAULT true,
    -- Whether @**all**, @**channel** and @**topic** count as a mention.
    ADD COLUMN wildcard_mentions_notify boolean NOT NULL DEFAULT true,
    -- Every message of a channel, for the channels that do not say otherwise.
    ADD COLUMN enable_stream_email_notifications boolean NOT NULL DEFAULT false,
    ADD COLUMN enable_stream_push_notifications boolean NOT NULL DEFAULT false,
    -- How long the messages of one email are gathered, in seconds: 2 minutes
    -- unless changed.
    ADD COLUMN email_notifications_batching_period_seconds integer NOT NULL DEFAULT 120;

-- Zulip's bounds: more than 0, at most a week (its settings view refuses the
-- rest with "Invalid email batching period: N seconds").
ALTER TABLE user_settings
    ADD CONSTRAINT user_settings_email_batching_period
    CHECK (email_notifications_batching_period_seconds BETWEEN 1 AND 604800);

-- A channel's own notification settings, as in Zulip's subscription objects:
-- NULL (the default) until the user sets one, and then the user's setting
-- applies (enable_stream_email_notifications for `email_notifications`,
-- enable_stream_push_notifications for `push_notifications`,
-- wildcard_mentions_notify for `wildcard_mentions_notify`; the desktop and
-- audible ones are the clients' to honour). An unsubscribed row keeps them
-- for a return, like its color.
ALTER TABLE subscriptions
    ADD COLUMN desktop_notifications boolean,
    ADD COLUMN audible_notifications boolean,
    ADD COLUMN push_notifications boolean,
    ADD COLUMN email_notifications boolean,
    ADD COLUMN wildcard_mentions_notify boolean;
