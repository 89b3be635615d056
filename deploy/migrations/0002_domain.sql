-- The reference domain: a team chat in the spirit of Zulip's (issue 4).
-- Streams and subscriptions, messages with per-user flags, reactions,
-- presence, user settings and default streams, plus a few realm settings.

ALTER TABLE realms
    ADD COLUMN allow_message_editing boolean NOT NULL DEFAULT true,
    ADD COLUMN mandatory_topics boolean NOT NULL DEFAULT false,
    -- Seconds after sending during which a message's content may be edited;
    -- NULL: no limit.
    ADD COLUMN message_content_edit_limit_seconds integer DEFAULT 600
        CHECK (message_content_edit_limit_seconds IS NULL OR message_content_edit_limit_seconds > 0);

ALTER TABLE users
    ADD COLUMN date_joined timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN timezone text NOT NULL DEFAULT '';

CREATE INDEX users_realm ON users (realm_id);

-- One row per user: Zulip's `user_settings` object, the settings we model.
CREATE TABLE user_settings (
    user_id               bigint PRIMARY KEY REFERENCES users (id),
    twenty_four_hour_time boolean NOT NULL DEFAULT false,
    enter_sends           boolean NOT NULL DEFAULT false,
    -- 1 automatic, 2 dark, 3 light (Zulip's numbering).
    color_scheme          smallint NOT NULL DEFAULT 1 CHECK (color_scheme IN (1, 2, 3)),
    default_language      text NOT NULL DEFAULT 'en' CHECK (length(default_language) BETWEEN 1 AND 50),
    send_read_receipts    boolean NOT NULL DEFAULT true
);

CREATE TABLE streams (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    realm_id     bigint NOT NULL REFERENCES realms (id),
    name         text NOT NULL CHECK (length(name) BETWEEN 1 AND 60),
    description  text NOT NULL DEFAULT '' CHECK (length(description) <= 1024),
    invite_only  boolean NOT NULL DEFAULT false,
    date_created timestamptz NOT NULL DEFAULT now(),
    -- A deleted stream is archived: its messages stay, it leaves every list.
    deactivated  boolean NOT NULL DEFAULT false
);

CREATE UNIQUE INDEX streams_realm_name ON streams (realm_id, lower(name)) WHERE NOT deactivated;

CREATE TABLE subscriptions (
    user_id     bigint NOT NULL REFERENCES users (id),
    stream_id   bigint NOT NULL REFERENCES streams (id),
    -- false: unsubscribed (the row keeps the user's settings for a return).
    active      boolean NOT NULL DEFAULT true,
    color       text NOT NULL DEFAULT '#c2c2c2' CHECK (color ~ '^#[0-9a-f]{6}$'),
    is_muted    boolean NOT NULL DEFAULT false,
    pin_to_top  boolean NOT NULL DEFAULT false,
    PRIMARY KEY (user_id, stream_id)
);

CREATE INDEX subscriptions_stream_active ON subscriptions (stream_id) WHERE active;

CREATE TABLE messages (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    realm_id         bigint NOT NULL REFERENCES realms (id),
    sender_id        bigint NOT NULL REFERENCES users (id),
    -- A channel message has a stream and a topic; a direct message has
    -- neither, and its participants (sender included, sorted) instead.
    stream_id        bigint REFERENCES streams (id),
    topic            text NOT NULL DEFAULT '' CHECK (length(topic) <= 60),
    participant_ids  bigint[],
    content          text NOT NULL CHECK (length(content) BETWEEN 1 AND 10000),
    rendered_content text NOT NULL,
    date_sent        timestamptz NOT NULL DEFAULT now(),
    last_edit_time   timestamptz,
    CHECK ((stream_id IS NULL) <> (participant_ids IS NULL))
);

CREATE INDEX messages_stream_topic ON messages (stream_id, lower(topic), id) WHERE stream_id IS NOT NULL;
CREATE INDEX messages_realm ON messages (realm_id, id);

-- Who has a message and their flags: one row per recipient.
CREATE TABLE user_messages (
    user_id    bigint NOT NULL REFERENCES users (id),
    message_id bigint NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    read       boolean NOT NULL DEFAULT false,
    starred    boolean NOT NULL DEFAULT false,
    mentioned  boolean NOT NULL DEFAULT false,
    wildcard_mentioned boolean NOT NULL DEFAULT false,
    PRIMARY KEY (user_id, message_id)
);

CREATE INDEX user_messages_message ON user_messages (message_id);
-- Register's unread query reads only a user's unread rows.
CREATE INDEX user_messages_unread ON user_messages (user_id, message_id) WHERE NOT read;

CREATE TABLE reactions (
    message_id    bigint NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    user_id       bigint NOT NULL REFERENCES users (id),
    emoji_name    text NOT NULL CHECK (length(emoji_name) BETWEEN 1 AND 60),
    emoji_code    text NOT NULL CHECK (length(emoji_code) BETWEEN 1 AND 60),
    reaction_type text NOT NULL DEFAULT 'unicode_emoji'
                  CHECK (reaction_type IN ('unicode_emoji', 'realm_emoji', 'zulip_extra_emoji')),
    PRIMARY KEY (message_id, user_id, emoji_code, reaction_type)
);

CREATE TABLE presences (
    user_id             bigint PRIMARY KEY REFERENCES users (id),
    realm_id            bigint NOT NULL REFERENCES realms (id),
    last_active_time    timestamptz,
    last_connected_time timestamptz
);

CREATE INDEX presences_realm ON presences (realm_id);

CREATE TABLE default_streams (
    realm_id  bigint NOT NULL REFERENCES realms (id),
    stream_id bigint NOT NULL REFERENCES streams (id),
    PRIMARY KEY (realm_id, stream_id)
);

INSERT INTO user_settings (user_id) SELECT id FROM users;
