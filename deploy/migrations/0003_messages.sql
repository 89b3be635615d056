-- The messages area's register queries (issue 4): a user's starred messages
-- come from a partial index, as their unread ones do (user_messages_unread).

CREATE INDEX user_messages_starred ON user_messages (user_id, message_id) WHERE starred;
