-- A user's own preferences and words (the personal area): their status,
-- their visibility policy per topic, the users they muted, their alert
-- words, their drafts and their saved snippets. Each row is its user's to
-- change, and its events go to that user only (the status: to the realm).
-- Per-user row limits are enforced by the actions
-- (generation/actions/personal/), not here: they are policy, not integrity.

-- Zulip's user status. An empty string is "not set"; `away` is Zulip's
-- legacy away flag (Zulip derives it from `presence_enabled`, which eventq
-- does not model, so it is kept with the status).
CREATE TABLE user_statuses (
    user_id       bigint PRIMARY KEY REFERENCES users (id),
    status_text   text NOT NULL DEFAULT '' CHECK (length(status_text) <= 60),
    emoji_name    text NOT NULL DEFAULT '' CHECK (length(emoji_name) <= 60),
    emoji_code    text NOT NULL DEFAULT '' CHECK (length(emoji_code) <= 60),
    reaction_type text NOT NULL DEFAULT 'unicode_emoji'
                  CHECK (reaction_type IN ('unicode_emoji', 'realm_emoji', 'zulip_extra_emoji')),
    away          boolean NOT NULL DEFAULT false
);

-- A user's visibility policy for a topic (Zulip's UserTopic): 1 muted,
-- 2 unmuted, 3 followed; "inherit" (0) is the absence of a row. One row per
-- topic whatever its letter case, as topics are case-insensitive.
CREATE TABLE user_topics (
    user_id           bigint NOT NULL REFERENCES users (id),
    stream_id         bigint NOT NULL REFERENCES streams (id),
    topic             text NOT NULL CHECK (length(topic) <= 60),
    visibility_policy smallint NOT NULL CHECK (visibility_policy IN (1, 2, 3)),
    last_updated      timestamptz NOT NULL DEFAULT now()
);

CREATE UNIQUE INDEX user_topics_topic ON user_topics (user_id, stream_id, lower(topic));

-- Users a user muted (Zulip's MutedUser). Sending reads it by sender.
CREATE TABLE muted_users (
    user_id       bigint NOT NULL REFERENCES users (id),
    muted_user_id bigint NOT NULL REFERENCES users (id),
    date_muted    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, muted_user_id),
    CHECK (user_id <> muted_user_id)
);

CREATE INDEX muted_users_muted ON muted_users (muted_user_id);

-- A user's alert words, in the order they were added (`id`), each once
-- whatever its letter case. `folded` is the word in lower case as Python
-- folds it (the server's matching): sending a message looks up only the
-- words its lower-cased content contains (strpos), so a channel of
-- thousands of subscribers with words of their own costs the rows that
-- match, not every word of every subscriber.
CREATE TABLE alert_words (
    id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id bigint NOT NULL REFERENCES users (id),
    word    text NOT NULL CHECK (length(word) BETWEEN 1 AND 100),
    folded  text NOT NULL CHECK (length(folded) >= 1)
);

CREATE UNIQUE INDEX alert_words_word ON alert_words (user_id, lower(word));

-- Drafts synchronized between a user's clients (Zulip's Draft): `type`
-- "stream" (`to` is one channel id), "private" (`to` the other
-- participants' ids, or the user alone for a note to self) or "" (no
-- recipient yet, `to` empty).
CREATE TABLE drafts (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id        bigint NOT NULL REFERENCES users (id),
    type           text NOT NULL CHECK (type IN ('stream', 'private', '')),
    to_ids         bigint[] NOT NULL,
    topic          text NOT NULL CHECK (length(topic) <= 60),
    content        text NOT NULL CHECK (length(content) BETWEEN 1 AND 10000),
    last_edit_time timestamptz NOT NULL
);

CREATE INDEX drafts_user ON drafts (user_id, id);

-- Saved snippets (Zulip's SavedSnippet): reusable message content.
CREATE TABLE saved_snippets (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id      bigint NOT NULL REFERENCES users (id),
    title        text NOT NULL CHECK (length(title) BETWEEN 1 AND 60),
    content      text NOT NULL CHECK (length(content) BETWEEN 1 AND 10000),
    date_created timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX saved_snippets_user ON saved_snippets (user_id, id);

-- Zulip's setting: whether the user's drafts are kept on the server (true,
-- Zulip's default). Turning it off deletes them.
ALTER TABLE user_settings ADD COLUMN enable_drafts_synchronization boolean NOT NULL DEFAULT true;

-- Zulip's `has_alert_word` message flag: the message contained one of the
-- recipient's alert words when it was sent. A constant default: no table
-- rewrite.
ALTER TABLE user_messages ADD COLUMN has_alert_word boolean NOT NULL DEFAULT false;
