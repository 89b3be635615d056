"""verify_action for custom profile fields: the realm's fields (created,
edited, reordered, deleted; PRONOUNS for clients without the capability)
and the people's values of each type (set, unchanged, removed, removed with
a list's option or with the field); and the refusals, with Zulip's
messages."""

from __future__ import annotations

import orjson
import pytest

from generation.actions import bots
from generation.actions import profile_fields as pf
from generation.actions.base import ActionError
from generation.actions.users import do_create_user, do_deactivate_user
from generation.events.profile_fields import (
    DATE,
    EXTERNAL_ACCOUNT,
    LONG_TEXT,
    PRONOUNS,
    SELECT,
    SHORT_TEXT,
    URL,
    USER,
)
from queues import specialize
from tests.domain.harness import MODERN, covers

WITHOUT_PRONOUNS = MODERN - {"pronouns_field_type_supported"}
OPTIONS = {"0": {"text": "Vim", "order": "1"}, "1": {"text": "Emacs", "order": "2"}}


def _create(domain, name="Biography", field_type=SHORT_TEXT, **kwargs):
    return lambda ctx: pf.do_create_profile_field(
        ctx, domain.id("iago"), domain.realm_id, name=name, field_type=field_type, **kwargs
    )


def _set(domain, user, *data, actor=None):
    return lambda ctx: pf.do_update_profile_data(
        ctx, domain.id(actor or user), domain.realm_id, domain.id(user), list(data)
    )


def _remove(domain, user, *field_ids, actor=None):
    return lambda ctx: pf.do_remove_profile_data(
        ctx, domain.id(actor or user), domain.realm_id, domain.id(user), list(field_ids)
    )


def refusal(domain, action) -> str:
    """The message of the ActionError `action` raises."""
    with pytest.raises(ActionError) as refused:
        domain.run(action)
    return refused.value.msg


def _person(state, domain, user):
    [person] = [p for p in state["realm_users"] if p["user_id"] == domain.id(user)]
    return person


def test_the_queues_know_zulips_type_numbers():
    """queues/specialize.py keeps its own copies (it imports only the
    standard library)."""
    assert (specialize._PRONOUNS, specialize._SHORT_TEXT) == (PRONOUNS, SHORT_TEXT)


# -- the fields ----------------------------------------------------------------------


@covers(("custom_profile_fields", None))
def test_created_fields_reach_everyone_in_order_with_zulips_shape(domain):
    for observer in ("hamlet", "polonius"):
        [event] = domain.verify(_create(domain, f"Bio {observer}", hint="About you"), user=observer)
    fields = event["fields"]
    assert [f["name"] for f in fields] == ["Bio hamlet", "Bio polonius"]
    assert fields[1] == {
        "id": fields[1]["id"],
        "name": "Bio polonius",
        "type": SHORT_TEXT,
        "hint": "About you",
        "field_data": "",
        "order": fields[1]["id"],
        "required": False,
        "editable_by_user": True,
    }
    [event] = domain.verify(
        _create(
            domain,
            " Editor ",
            SELECT,
            field_data=OPTIONS,
            display_in_profile_summary=True,
            required=True,
            editable_by_user=False,
        )
    )
    select = event["fields"][-1]
    assert (select["name"], select["display_in_profile_summary"], select["required"]) == (
        "Editor",
        True,
        True,
    )
    assert orjson.loads(select["field_data"]) == OPTIONS
    assert select["editable_by_user"] is False
    state = domain.fetch()
    assert state["custom_profile_fields"] == event["fields"]
    assert state["custom_profile_field_types"]["PRONOUNS"] == {"id": PRONOUNS, "name": "Pronouns"}
    assert next(iter(state["custom_profile_field_types"])) == "DATE"


@covers(("custom_profile_fields", None))
def test_default_external_accounts_take_zulips_name(domain):
    [event] = domain.verify(
        _create(domain, "", EXTERNAL_ACCOUNT, hint="ignored", field_data={"subtype": "github"})
    )
    github = event["fields"][0]
    assert (github["name"], github["hint"], github["field_data"]) == (
        "GitHub username",
        "",
        '{"subtype":"github"}',
    )
    custom = {"subtype": "custom", "url_pattern": "https://example.com/%(username)s"}
    [event] = domain.verify(_create(domain, "Mastodon", EXTERNAL_ACCOUNT, field_data=custom))
    assert orjson.loads(event["fields"][1]["field_data"]) == custom
    # Only its summary flag, required and editable_by_user change.
    domain.verify(
        lambda ctx: pf.do_update_profile_field(
            ctx, None, domain.realm_id, github["id"], name="GitHub username", required=True
        )
    )

    def rename(ctx):
        return pf.do_update_profile_field(ctx, None, domain.realm_id, github["id"], name="GitLab")

    assert refusal(domain, rename) == "Default custom field cannot be updated."


@covers(("custom_profile_fields", None))
def test_pronouns_are_short_text_for_clients_without_the_capability(domain):
    [event] = domain.verify(_create(domain, "Pronouns", PRONOUNS), capabilities=WITHOUT_PRONOUNS)
    assert event["fields"][0]["type"] == SHORT_TEXT
    state = domain.fetch(capabilities=WITHOUT_PRONOUNS)
    assert state["custom_profile_fields"][0]["type"] == SHORT_TEXT
    assert "PRONOUNS" not in state["custom_profile_field_types"]
    [event] = domain.verify(_create(domain, "Pronouns 2", PRONOUNS))
    assert [f["type"] for f in event["fields"]] == [PRONOUNS, PRONOUNS]


@covers(("custom_profile_fields", None))
def test_edits_and_reorders_send_the_whole_list(domain):
    first = domain.run(_create(domain, "First"))
    second = domain.run(_create(domain, "Second", LONG_TEXT))
    [event] = domain.verify(
        lambda ctx: pf.do_update_profile_field(
            ctx, domain.id("iago"), domain.realm_id, first, name="Premier", hint="h"
        )
    )
    assert [(f["name"], f["hint"]) for f in event["fields"]] == [("Premier", "h"), ("Second", "")]
    [event] = domain.verify(
        lambda ctx: pf.do_reorder_profile_fields(
            ctx, domain.id("iago"), domain.realm_id, [second, 12345, first]
        )
    )
    assert [(f["id"], f["order"]) for f in event["fields"]] == [(second, 0), (first, 2)]
    # Nothing changed: the list goes out all the same, as Zulip's.
    domain.verify(
        lambda ctx: pf.do_update_profile_field(ctx, None, domain.realm_id, first),
        state_change_expected=False,
    )


# -- values ----------------------------------------------------------------------------


@covers(("realm_user", "update"))
def test_values_of_every_type_reach_everyone_and_register(domain):
    othello = domain.id("othello")
    ids = {
        kind: domain.run(_create(domain, f"Field {kind}", kind, **extra))
        for kind, extra in (
            (SHORT_TEXT, {}),
            (LONG_TEXT, {}),
            (SELECT, {"field_data": OPTIONS}),
            (DATE, {}),
            (URL, {}),
            (USER, {}),
            (EXTERNAL_ACCOUNT, {"field_data": {"subtype": "twitter"}}),
            (PRONOUNS, {}),
        )
    }
    values = {
        SHORT_TEXT: "**Prince** of Denmark",
        LONG_TEXT: "To be,\n\nor not to be",
        SELECT: "1",
        DATE: "1601-01-01",
        URL: "https://example.com/elsinore?act=1",
        USER: [othello],
        EXTERNAL_ACCOUNT: "hamlet",
        PRONOUNS: "he/him",
    }
    for kind, value in values.items():
        [event] = domain.verify(_set(domain, "hamlet", (ids[kind], value)), user="othello")
        change = event["person"]["custom_profile_field"]
        assert change["id"] == ids[kind]
        assert change["value"] == (value if isinstance(value, str) else f"[{othello}]")
    assert change.keys() == {"id", "value"}  # PRONOUNS: not rendered
    data = _person(domain.fetch(), domain, "hamlet")["profile_data"]
    assert data[str(ids[SHORT_TEXT])] == {
        "value": "**Prince** of Denmark",
        "rendered_value": "<p><strong>Prince</strong> of Denmark</p>",
    }
    assert data[str(ids[LONG_TEXT])]["rendered_value"] == "<p>To be,</p>\n<p>or not to be</p>"
    assert data[str(ids[USER])] == {"value": f"[{othello}]"}
    assert len(data) == len(values)
    # Everyone else has none.
    assert _person(domain.fetch(), domain, "othello")["profile_data"] == {}


@covers(("realm_user", "update"))
def test_setting_the_same_value_tells_nobody_and_removing_tells_everyone(domain):
    field = domain.run(_create(domain))
    domain.verify(_set(domain, "hamlet", (field, "")))
    domain.verify(_set(domain, "hamlet", (field, "")), num_events=0, state_change_expected=False)
    [event] = domain.verify(_remove(domain, "hamlet", field), user="polonius")
    assert event["person"] == {
        "user_id": domain.id("hamlet"),
        "custom_profile_field": {"id": field, "value": None},
    }
    # A value one does not have: nothing to remove, no error (Zulip's).
    domain.verify(_remove(domain, "hamlet", field), num_events=0, state_change_expected=False)


def test_a_field_given_many_times_in_one_request_changes_once(domain):
    # Repeating a field is not a way to send the realm an event per repeat.
    field = domain.run(_create(domain))
    repeats = [(field, "a"), (field, "b")] * 50 + [(field, "last")]
    [event] = domain.verify(_set(domain, "hamlet", *repeats))
    assert event["person"]["custom_profile_field"]["value"] == "last"


@covers(("realm_user", "update"))
def test_administrators_set_anyones_values_even_of_fields_users_may_not_edit(domain):
    locked = domain.run(_create(domain, "Team", editable_by_user=False))
    not_allowed = "You are not allowed to change this field. Contact an administrator to update it."
    assert refusal(domain, _set(domain, "hamlet", (locked, "Players"))) == not_allowed
    assert refusal(domain, _remove(domain, "hamlet", locked)) == not_allowed
    domain.verify(_set(domain, "hamlet", (locked, "Players"), actor="iago"))
    assert (
        refusal(domain, _set(domain, "hamlet", (locked, "Court"), actor="othello"))
        == "Must be an organization administrator"
    )
    # A deactivated user's values stay theirs, an administrator may change them.
    domain.run(lambda ctx: do_deactivate_user(ctx, None, domain.realm_id, domain.id("hamlet")))
    domain.verify(_remove(domain, "hamlet", locked, actor="iago"), user="othello")
    state = domain.fetch(user="othello")
    [hamlet] = [p for p in state["realm_non_active_users"] if p["user_id"] == domain.id("hamlet")]
    assert hamlet["profile_data"] == {}


@covers(("custom_profile_fields", None))
def test_removing_an_option_removes_the_values_that_chose_it(domain):
    # One event, the list, however many values go (Zulip's): the people's
    # values of the option are dropped by the list's applier, exactly as a
    # fresh fetch shows them (verify_action compares the two).
    editor = domain.run(_create(domain, "Editor", SELECT, field_data=OPTIONS))
    domain.run(_set(domain, "hamlet", (editor, "0")))
    domain.run(_set(domain, "othello", (editor, "1")))
    [fields] = domain.verify(
        lambda ctx: pf.do_update_profile_field(
            ctx, None, domain.realm_id, editor, field_data={"1": OPTIONS["1"]}
        ),
        user="polonius",
    )
    assert orjson.loads(fields["fields"][0]["field_data"]) == {"1": OPTIONS["1"]}
    state = domain.fetch()
    assert _person(state, domain, "hamlet")["profile_data"] == {}
    assert _person(state, domain, "othello")["profile_data"] == {str(editor): {"value": "1"}}


@covers(("custom_profile_fields", None))
def test_deleting_a_field_deletes_its_values(domain):
    kept = domain.run(_create(domain, "Kept"))
    gone = domain.run(_create(domain, "Gone"))
    domain.run(_set(domain, "hamlet", (kept, "a"), (gone, "b")))
    [event] = domain.verify(
        lambda ctx: pf.do_delete_profile_field(ctx, domain.id("iago"), domain.realm_id, gone),
        user="othello",
    )
    assert [f["id"] for f in event["fields"]] == [kept]
    assert set(_person(domain.fetch(), domain, "hamlet")["profile_data"]) == {str(kept)}
    # The list alone takes the values with it, for a client that holds the
    # people and follows the list.
    domain.verify(
        lambda ctx: pf.do_delete_profile_field(ctx, None, domain.realm_id, kept),
        fetch_event_types=["realm_user", "custom_profile_fields"],
        event_types=["custom_profile_fields"],
    )


@covers(("realm_user", "add"))
def test_a_new_person_has_no_values(domain):
    domain.run(_create(domain))
    domain.verify(
        lambda ctx: do_create_user(ctx, None, domain.realm_id, "yorick@example.com", "Yorick"),
        event_types=["realm_user"],
        fetch_event_types=["realm_user"],
    )
    [yorick] = [p for p in domain.fetch()["realm_users"] if p["full_name"] == "Yorick"]
    assert yorick["profile_data"] == {}


# -- refusals --------------------------------------------------------------------------


def test_field_refusals(domain):
    admin, realm = domain.id("iago"), domain.realm_id
    domain.run(_create(domain, "Taken"))
    for kwargs, message in (
        ({"name": "", "field_type": SHORT_TEXT}, "Label cannot be blank."),
        (
            {"name": "x" * 41, "field_type": SHORT_TEXT},
            r"name is too long \(limit: 40 characters\)",
        ),
        (
            {"name": "x", "hint": "h" * 81, "field_type": SHORT_TEXT},
            r"hint is too long \(limit: 80 characters\)",
        ),
        ({"name": "x", "field_type": 9}, "Invalid field type."),
        ({"name": "x", "field_type": 0}, "Invalid field type."),
        ({"name": "Taken", "field_type": DATE}, "A field with that label already exists."),
        ({"name": "x", "field_type": SELECT}, "Field must have at least one choice."),
        (
            {
                "name": "x",
                "field_type": SELECT,
                "field_data": {str(i): {"text": f"{i:040}", "order": str(i)} for i in range(300)},
            },
            r"field_data is too long \(limit: 10000 characters\)",
        ),
        (
            {"name": "x", "field_type": SELECT, "field_data": {" ": {"text": "a", "order": "1"}}},
            "'value' cannot be blank.",
        ),
        (
            {"name": "x", "field_type": SELECT, "field_data": {"0": {"order": "1"}}},
            "text key is missing from field_data",
        ),
        (
            {"name": "x", "field_type": SELECT, "field_data": {"0": {"text": " ", "order": "1"}}},
            r'field_data\["text"\] cannot be blank.',
        ),
        (
            {
                "name": "x",
                "field_type": SELECT,
                "field_data": {"0": {"text": "a", "order": "1", "extra": "e"}},
            },
            "Unexpected arguments: extra",
        ),
        (
            {
                "name": "x",
                "field_type": SELECT,
                "field_data": {"0": {"text": "a", "order": "1"}, "1": {"text": "a", "order": "2"}},
            },
            "Field must not have duplicate choices.",
        ),
        (
            {"name": "x", "field_type": EXTERNAL_ACCOUNT, "field_data": {}},
            "subtype key is missing from field_data",
        ),
        (
            {"name": "x", "field_type": EXTERNAL_ACCOUNT, "field_data": {"subtype": "myspace"}},
            "Invalid external account type",
        ),
        (
            {"name": "x", "field_type": EXTERNAL_ACCOUNT, "field_data": {"subtype": "custom"}},
            "Custom external account must define URL pattern",
        ),
        (
            {
                "name": "x",
                "field_type": EXTERNAL_ACCOUNT,
                "field_data": {"subtype": "custom", "url_pattern": "https://example.com/"},
            },
            r"URL pattern must contain '%\(username\)s'.",
        ),
        (
            {
                "name": "x",
                "field_type": EXTERNAL_ACCOUNT,
                "field_data": {"subtype": "custom", "url_pattern": "not a url %(username)s"},
            },
            r'field_data\["url_pattern"\] is not a URL',
        ),
        (
            {"name": "x", "field_type": LONG_TEXT, "display_in_profile_summary": True},
            "Field type not supported for display in profile summary.",
        ),
    ):
        with pytest.raises(ActionError, match=message):
            domain.run(lambda ctx, k=kwargs: pf.do_create_profile_field(ctx, admin, realm, **k))
    for name in ("One", "Two"):
        domain.run(_create(domain, name, display_in_profile_summary=True))
    with pytest.raises(ActionError, match="Only 2 custom profile fields can be displayed"):
        domain.run(_create(domain, "Three", display_in_profile_summary=True))
    with pytest.raises(ActionError, match="Must be an organization administrator") as refused:
        domain.run(
            lambda ctx: pf.do_create_profile_field(
                ctx, domain.id("hamlet"), realm, name="x", field_type=SHORT_TEXT
            )
        )
    assert (refused.value.code, refused.value.status) == ("UNAUTHORIZED", 403)
    for action, message in (
        (lambda ctx: pf.do_delete_profile_field(ctx, admin, realm, 99999999),
         "Field id 99999999 not found."),
        (lambda ctx: pf.do_update_profile_field(ctx, admin, realm, 0, name="y"),
         "Field id 0 not found."),
        (lambda ctx: pf.do_reorder_profile_fields(ctx, admin, realm, []),
         "Invalid order mapping."),
    ):  # fmt: skip
        assert refusal(domain, action) == message
    assert [f["name"] for f in domain.fetch()["custom_profile_fields"]] == ["Taken", "One", "Two"]


def test_value_refusals(domain):
    othello, polonius = domain.id("othello"), domain.id("polonius")
    ids = {
        kind: domain.run(_create(domain, f"F{kind}", kind, **extra))
        for kind, extra in (
            (SHORT_TEXT, {}),
            (LONG_TEXT, {}),
            (SELECT, {"field_data": OPTIONS}),
            (DATE, {}),
            (URL, {}),
            (USER, {}),
        )
    }
    bot = domain.run(
        lambda ctx: bots.do_create_bot(ctx, domain.id("hamlet"), domain.realm_id, "B", "b")
    ).user_id
    domain.run(lambda ctx: do_deactivate_user(ctx, None, domain.realm_id, polonius))
    for kind, value, message in (
        (SHORT_TEXT, "x" * 51, r"F1 is too long \(limit: 50 characters\)"),
        (SHORT_TEXT, ["x"], "F1 is not a string"),
        (SHORT_TEXT, "a\x00b", "F1 must not contain null bytes"),
        (LONG_TEXT, "x" * 501, r"F2 is too long \(limit: 500 characters\)"),
        (SELECT, "7", "'7' is not a valid choice for 'F3'."),
        (DATE, "2024-02-30", "F4 is not a date"),
        (DATE, "20240201", "F4 is not a date"),
        (URL, "example.com", "F5 is not a URL"),
        (URL, "javascript://alert(1)", "F5 is not a URL"),
        (URL, "https://300.1.1.1/", "F5 is not a URL"),
        (USER, "x", "User IDs is not a list"),
        (USER, [True], r"User IDs\[0\] is not an integer"),
        (USER, [othello, 0, 2**70], f"Invalid user IDs: 0, {2**70}"),
        (USER, [polonius], f"User with ID {polonius} is deactivated"),
        (USER, [bot], f"User with ID {bot} is a bot"),
    ):
        with pytest.raises(ActionError, match=message):
            domain.run(_set(domain, "hamlet", (ids[kind], value)))
    for action, message in (
        (_set(domain, "hamlet", (ids[SHORT_TEXT], "ok"), (424242, "x")),
         "Field id 424242 not found."),
        (_remove(domain, "hamlet", 424242), "Field id 424242 not found."),
        (lambda ctx: pf.do_update_profile_data(
            ctx, None, domain.realm_id, bot, [(ids[SHORT_TEXT], "x")]
        ), "This endpoint does not accept bot requests."),
    ):  # fmt: skip
        assert refusal(domain, action) == message
    # Nothing was written: the first value was refused with the rest.
    assert _person(domain.fetch(), domain, "hamlet")["profile_data"] == {}
    # Accepted forms of the same types.
    for kind, value in (
        (URL, "http://localhost:8000/x"),
        (URL, "ftp://[::1]/file"),
        (URL, "https://例え.jp/"),
        (DATE, "2024-02-29"),
        (USER, []),
    ):
        domain.run(_set(domain, "hamlet", (ids[kind], value)))
