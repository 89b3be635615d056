-- Scheduled messages and widgets' submessages (Zulip's ScheduledMessage and
-- SubMessage).
--
-- `scheduled_messages`: a message to send later, as its sender wrote it
-- (generation/actions/messages/scheduled.py). A channel message has a stream
-- and a topic; a direct message its participants (sender included, sorted),
-- as `messages` stores them. A row lives until the server's scheduler
-- (server/scheduling/) sends it, then it is deleted: what was sent is the
-- message itself, so the table holds only what is still to do. One the
-- scheduler could not send is kept with `failed` and Zulip's
-- `failure_message` until its sender edits or deletes it. `scheduled_at`
-- has whole seconds (the API's `scheduled_delivery_timestamp`).
CREATE TABLE scheduled_messages (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    realm_id         bigint NOT NULL REFERENCES realms (id),
    sender_id        bigint NOT NULL REFERENCES users (id),
    stream_id        bigint REFERENCES streams (id),
    topic            text NOT NULL DEFAULT '' CHECK (length(topic) <= 60),
    participant_ids  bigint[],
    content          text NOT NULL CHECK (length(content) BETWEEN 1 AND 10000),
    rendered_content text NOT NULL,
    client           text NOT NULL,
    read_by_sender   boolean NOT NULL,
    scheduled_at     timestamptz NOT NULL,
    failed           boolean NOT NULL DEFAULT false,
    failure_message  text,
    CHECK ((stream_id IS NULL) <> (participant_ids IS NULL))
);

-- The scheduler's reads: the next due time, and the due rows in order.
CREATE INDEX scheduled_messages_due ON scheduled_messages (scheduled_at, id) WHERE NOT failed;
-- A sender's own (register, GET scheduled_messages, the per-user limit).
CREATE INDEX scheduled_messages_sender ON scheduled_messages (sender_id, scheduled_at, id);

-- `submessages`: the widget protocol's log of a message (polls, todo lists):
-- its first row, written with the message, declares the widget; the later
-- ones are what readers did (votes, new options), in id order. `content`
-- is a JSON string the clients read; the server checks only its shape. Its
-- bound is the widget row's: a 10,000-character message whose every
-- character JSON escapes to 12 (one outside the BMP: a surrogate pair).
CREATE TABLE submessages (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id bigint NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    sender_id  bigint NOT NULL REFERENCES users (id),
    msg_type   text NOT NULL CHECK (length(msg_type) BETWEEN 1 AND 50),
    content    text NOT NULL CHECK (length(content) <= 131072)
);

CREATE INDEX submessages_message ON submessages (message_id, id);
