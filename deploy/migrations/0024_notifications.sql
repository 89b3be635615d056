-- Notifications for users who are away (server/notifications/,
-- docs/notifications.md). A server that finds a user away when a message
-- worth a notification reaches them (or whose last queue expired holding
-- one) publishes it to RabbitMQ; the notification worker records it here,
-- once per (user, message) whichever server or path saw it first, then
-- batches, emails and calls the webhook.
--
-- email and push: NULL when not wanted (the message was not notifiable that
-- way, or the worker has no SMTP server / webhook); else 'pending' until its
-- batch is due, then 'sent', or not sent because it was 'read' or 'deleted'
-- by then, or 'failed' after the last retry.
CREATE TABLE notifications (
    user_id        bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    -- Not a reference: a message deleted before its batch leaves its row,
    -- marked 'deleted'.
    message_id     bigint NOT NULL,
    realm_id       bigint NOT NULL,
    -- Which path found the user away: at delivery, or their last queue's
    -- garbage collection (the missed-message hook).
    via            text NOT NULL CHECK (via IN ('delivery', 'gc')),
    -- When the server enqueued it: a batch is due a window after its first.
    enqueued_at    timestamptz NOT NULL,
    recorded_at    timestamptz NOT NULL DEFAULT now(),
    email          text CHECK (email IN ('pending', 'sent', 'read', 'deleted', 'failed')),
    email_attempts integer NOT NULL DEFAULT 0,
    email_retry_at timestamptz,
    email_sent_at  timestamptz,
    push           text CHECK (push IN ('pending', 'sent', 'read', 'deleted', 'failed')),
    push_attempts  integer NOT NULL DEFAULT 0,
    push_retry_at  timestamptz,
    push_sent_at   timestamptz,
    -- The webhook was told the message was read or deleted after its push.
    push_removed   boolean NOT NULL DEFAULT false,
    last_error     text,
    PRIMARY KEY (user_id, message_id)
);
CREATE INDEX notifications_email_pending ON notifications (user_id, enqueued_at)
    WHERE email = 'pending';
CREATE INDEX notifications_push_pending ON notifications (user_id, enqueued_at)
    WHERE push = 'pending';
-- Pushed messages whose removal the webhook may still have to be told.
CREATE INDEX notifications_push_unremoved ON notifications (user_id, message_id)
    WHERE push = 'sent' AND NOT push_removed;
CREATE INDEX notifications_recorded ON notifications (recorded_at);

-- The worker's running totals, for /metrics and the operator page: changed
-- in the transaction that changes the rows they count, so they survive the
-- worker's restarts and agree with the table.
CREATE TABLE notification_counters (
    name  text PRIMARY KEY,
    value bigint NOT NULL DEFAULT 0
);
