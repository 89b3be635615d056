"""Messages: sending to a channel topic or directly, editing, deleting, the
user's own flags (read, starred), emoji reactions, typing notifications,
widgets and their submessages, and messages scheduled for later, a module
each (`send`, `edit`, `delete`, `flags`, `reactions`, `typing`, `widgets`,
`submessages`, `scheduled`) over what they share (`common`). This package
exports their public names.

Who may see a message: the users who received it (a `user_messages` row), and
the active subscribers of its channel (who can read the channel's history).
Every event about an existing message goes to exactly them, so a private
channel's messages never reach anyone outside it. A new message goes to its
recipients, and, through the `invite_only` flag of the producer's event, to
`all_public_streams` queues only when its channel is public.

Who may change a message (edit it, move its topic) is narrower: a channel
message only while its channel is open to the user now (`edit._can_modify`).
"""

from generation.actions.messages.common import (
    MAX_MESSAGE_LENGTH,
    MAX_TOPIC_LENGTH,
    normalize_content,
    normalize_topic,
)
from generation.actions.messages.delete import do_delete_messages
from generation.actions.messages.edit import EDIT_GRACE_SECS, PROPAGATE_MODES, do_update_message
from generation.actions.messages.flags import (
    EDITABLE_FLAGS,
    FLAG_OPS,
    FlagOp,
    do_mark_all_as_read,
    do_mark_stream_as_read,
    do_update_message_flags,
)
from generation.actions.messages.reactions import (
    EMOJI_CODES,
    REACTION_TYPES,
    do_add_reaction,
    do_remove_reaction,
)
from generation.actions.messages.scheduled import (
    MAX_SCHEDULED_PER_USER,
    Attempt,
    deliver_due_scheduled_message,
    do_delete_scheduled_message,
    do_edit_scheduled_message,
    do_schedule_message,
    seconds_until_due,
)
from generation.actions.messages.send import (
    avatar_url,
    do_send_direct_message,
    do_send_stream_message,
)
from generation.actions.messages.submessages import (
    MAX_SUBMESSAGE_CHARS,
    MAX_SUBMESSAGES_PER_MESSAGE,
    do_add_submessage,
    submessage_dicts,
)
from generation.actions.messages.typing import (
    TYPING_OPS,
    do_send_direct_typing,
    do_send_edit_typing,
    do_send_stream_typing,
)

__all__ = [
    "EDITABLE_FLAGS",
    "EDIT_GRACE_SECS",
    "EMOJI_CODES",
    "FLAG_OPS",
    "MAX_MESSAGE_LENGTH",
    "MAX_SCHEDULED_PER_USER",
    "MAX_SUBMESSAGES_PER_MESSAGE",
    "MAX_SUBMESSAGE_CHARS",
    "MAX_TOPIC_LENGTH",
    "PROPAGATE_MODES",
    "REACTION_TYPES",
    "TYPING_OPS",
    "Attempt",
    "FlagOp",
    "avatar_url",
    "deliver_due_scheduled_message",
    "do_add_reaction",
    "do_add_submessage",
    "do_delete_messages",
    "do_delete_scheduled_message",
    "do_edit_scheduled_message",
    "do_mark_all_as_read",
    "do_mark_stream_as_read",
    "do_remove_reaction",
    "do_schedule_message",
    "do_send_direct_message",
    "do_send_direct_typing",
    "do_send_edit_typing",
    "do_send_stream_message",
    "do_send_stream_typing",
    "do_update_message",
    "do_update_message_flags",
    "normalize_content",
    "normalize_topic",
    "seconds_until_due",
    "submessage_dicts",
]
