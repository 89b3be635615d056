"""Custom profile fields: the fields a realm's administrators define
(create, edit, reorder, delete: `fields`) and each user's value of them
(`values`), over Zulip's checks of both (`checks`) and what they share
(`common`), a module each. This package exports their public names.

Zulip's rules (zerver/views/custom_profile_fields.py and
zerver/actions/custom_profile_fields.py), with Zulip's messages:

- Only administrators change the fields. Every change sends the whole list,
  in order (`custom_profile_fields`), to every active user of the realm;
  it carries no values: a deleted field's values go with it, each with its
  `realm_user` update before the list (Zulip lets its clients drop them on
  seeing the list; the updates keep exact a client that registered for the
  people without the list).
- A user changes their own values of the fields that are
  `editable_by_user`; an administrator anyone's, of any field. A changed
  value is a `realm_user` update (`custom_profile_field`: the field's id,
  the value, null once removed) to every active user: eventq models no
  restriction on who may see whom. A value set to what it was sends
  nothing. Bots have no values (Zulip's register shows none).
- Each type takes its own values (`checks`); the text types are
  rendered to HTML when written (`generation.markdown.render`, without
  looking up mentions), so register and the event carry the same HTML.
- Removing options of a list (SELECT) removes the values that chose them,
  each with its `realm_user` update, before the list's event.

A realm's fields change one transaction at a time (the realm's row is
locked, as for the realm's other lists), so that each event's list is the
list as of its own commit; a value's transaction holds its fields' rows
(FOR SHARE, in id order as a reorder takes them), so that it checks the
value against the field as it commits and never writes a value of a field
deleted meanwhile.

`actor_id` None is the operator (the command line), allowed everything an
administrator is.
"""

from generation.actions.profile_fields.common import (
    DEFAULT_EXTERNAL_ACCOUNTS,
    MAX_FIELDS,
    MAX_HINT,
    MAX_LONG_TEXT,
    MAX_NAME,
    MAX_SHORT_TEXT,
    MAX_SUMMARY_FIELDS,
    MAX_USERS_IN_VALUE,
    profile_data_entry,
    realm_profile_data,
    realm_profile_fields,
)
from generation.actions.profile_fields.fields import (
    do_create_profile_field,
    do_delete_profile_field,
    do_reorder_profile_fields,
    do_update_profile_field,
)
from generation.actions.profile_fields.values import do_remove_profile_data, do_update_profile_data

__all__ = [
    "DEFAULT_EXTERNAL_ACCOUNTS",
    "MAX_FIELDS",
    "MAX_HINT",
    "MAX_LONG_TEXT",
    "MAX_NAME",
    "MAX_SHORT_TEXT",
    "MAX_SUMMARY_FIELDS",
    "MAX_USERS_IN_VALUE",
    "do_create_profile_field",
    "do_delete_profile_field",
    "do_remove_profile_data",
    "do_reorder_profile_fields",
    "do_update_profile_data",
    "do_update_profile_field",
    "profile_data_entry",
    "realm_profile_data",
    "realm_profile_fields",
]
