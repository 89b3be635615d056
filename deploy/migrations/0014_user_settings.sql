-- Settings Zulip's clients read at start (issue 34; zulip-term indexes
-- them). Zulip's defaults; each is the user's to change (PATCH settings)
-- and their clients' to honour: whether a direct message's content is shown
-- in desktop notifications (also at the top level for clients without the
-- `user_settings_object` capability: the `update_global_notifications`
-- section), and whether the user's clients tell others they are typing, in
-- direct messages and in channels.
ALTER TABLE user_settings
    ADD COLUMN pm_content_in_desktop_notifications boolean NOT NULL DEFAULT true,
    ADD COLUMN send_private_typing_notifications boolean NOT NULL DEFAULT true,
    ADD COLUMN send_stream_typing_notifications boolean NOT NULL DEFAULT true;
