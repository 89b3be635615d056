"""A user's own preferences and words: their status (`status`), their
visibility policy per topic (`topics`), the users they muted (`muting`),
their alert words (`alert_words`), their drafts (`drafts`) and saved
snippets (`snippets`), a module each, over what they share (`common`). This
package exports their public names.

Everything here is the user's own: each action changes only the acting
user's rows, and its events go to that user's queues only, except the
status, which every active user of the realm sees. Message sending reads
two of them: who muted the sender (`muting.muters_of`: their copy arrives
read) and whose alert words a message contains
(`alert_words.alerted_user_ids`: `has_alert_word`).
"""

from generation.actions.personal.alert_words import (
    MAX_ALERT_WORD_LENGTH,
    MAX_ALERT_WORDS,
    alerted_recipient_ids,
    alerted_user_ids,
    contains_alert_word,
    do_add_alert_words,
    do_remove_alert_words,
    user_alert_words,
)
from generation.actions.personal.drafts import (
    DRAFT_TYPES,
    MAX_DRAFTS,
    DraftData,
    delete_all_drafts,
    do_create_drafts,
    do_delete_draft,
    do_edit_draft,
    get_drafts,
    user_drafts,
)
from generation.actions.personal.muting import (
    do_mute_user,
    do_unmute_user,
    muted_users,
    muters_of,
)
from generation.actions.personal.snippets import (
    MAX_SAVED_SNIPPETS,
    do_create_saved_snippet,
    do_delete_saved_snippet,
    do_edit_saved_snippet,
    user_saved_snippets,
)
from generation.actions.personal.status import (
    MAX_STATUS_TEXT,
    do_update_user_status,
    user_status,
)
from generation.actions.personal.topics import (
    MAX_USER_TOPICS,
    MUTED_TOPIC_OPS,
    VISIBILITY_POLICIES,
    do_mute_topic_legacy,
    do_set_user_topic_visibility_policy,
    muted_topics,
)

__all__ = [
    "DRAFT_TYPES",
    "MAX_ALERT_WORDS",
    "MAX_ALERT_WORD_LENGTH",
    "MAX_DRAFTS",
    "MAX_SAVED_SNIPPETS",
    "MAX_STATUS_TEXT",
    "MAX_USER_TOPICS",
    "MUTED_TOPIC_OPS",
    "VISIBILITY_POLICIES",
    "DraftData",
    "alerted_recipient_ids",
    "alerted_user_ids",
    "contains_alert_word",
    "delete_all_drafts",
    "do_add_alert_words",
    "do_create_drafts",
    "do_create_saved_snippet",
    "do_delete_draft",
    "do_delete_saved_snippet",
    "do_edit_draft",
    "do_edit_saved_snippet",
    "do_mute_topic_legacy",
    "do_mute_user",
    "do_remove_alert_words",
    "do_set_user_topic_visibility_policy",
    "do_unmute_user",
    "do_update_user_status",
    "get_drafts",
    "muted_topics",
    "muted_users",
    "muters_of",
    "user_alert_words",
    "user_drafts",
    "user_saved_snippets",
    "user_status",
]
