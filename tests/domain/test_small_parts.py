"""Smaller parts of Zulip's API, each as Zulip does it: a user's status read
by id; the realm's custom emoji in reactions and statuses; user group
mentions on sending and editing; alert words recounted on an edit; and
register's `user_avatar_url_field_optional` for long-term idle users."""

from __future__ import annotations

import time

import pytest

from generation.actions import groups, personal
from generation.actions import realm_config as emoji_actions
from generation.actions.base import ActionError
from generation.actions.bots import do_create_bot
from generation.actions.messages import (
    do_add_reaction,
    do_remove_reaction,
    do_send_direct_message,
    do_send_stream_message,
    do_update_message,
)
from generation.actions.presence import do_update_presence
from generation.actions.users import do_change_full_name, do_deactivate_user
from generation.markdown import MentionGroup, Person, possible_group_mentions, render
from tests.domain.harness import MODERN, covers

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 40
MESSAGE = ("message", None)
UPDATE = ("update_message", None)
REACTION_ADD = ("reaction", "add")
REACTION_REMOVE = ("reaction", "remove")


def refused(domain, action, message: str) -> None:
    with pytest.raises(ActionError) as caught:
        domain.run(action)
    assert caught.value.msg == message
    assert caught.value.code == "BAD_REQUEST"


def sql(domain, statement, params=()):
    """Rows of a statement (none for one that returns none)."""

    async def run(ctx):
        cur = await ctx.conn.execute(statement, params)
        return await cur.fetchall() if cur.description else []

    return domain.run(run)


def send(domain, sender, content, stream="Denmark", topic="t"):
    return domain.run(
        lambda ctx: do_send_stream_message(ctx, domain.id(sender), stream, topic, content)
    )


def flags_of(domain, message_id):
    """Each holder's (mentioned, has_alert_word) on a message, by name."""
    names = {member.id: name for name, member in domain.users.items()}
    rows = sql(
        domain,
        "SELECT user_id, mentioned, has_alert_word FROM user_messages WHERE message_id = %s",
        (message_id,),
    )
    return {names[user_id]: (mentioned, alerted) for user_id, mentioned, alerted in rows}


def add_emoji(domain, name, user="hamlet"):
    """A custom emoji of the domain's realm; returns its id as a string."""
    info = domain.run(
        lambda ctx: emoji_actions.do_add_realm_emoji(
            ctx, domain.id(user), domain.realm_id, name, PNG
        )
    )
    return info["id"]


def deactivate_emoji(domain, name):
    domain.run(
        lambda ctx: emoji_actions.do_remove_realm_emoji(
            ctx, domain.id("iago"), domain.realm_id, name
        )
    )


# -- GET users/{id}/status ---------------------------------------------------------


def test_a_users_status_reads_as_register_shows_it(domain):
    hamlet, othello = domain.id("hamlet"), domain.id("othello")

    def read(user_id):
        return domain.run(lambda ctx: personal.user_status(ctx.conn, domain.realm_id, user_id))

    assert read(othello) == {}
    domain.run(
        lambda ctx: personal.do_update_user_status(
            ctx, othello, away=True, status_text="Out", emoji_name="coffee"
        )
    )
    status = read(othello)
    assert status == {
        "away": True,
        "status_text": "Out",
        "emoji_name": "coffee",
        "emoji_code": "2615",
        "reaction_type": "unicode_emoji",
    }
    assert domain.fetch("polonius")["user_status"][str(othello)] == status
    # Cleared field by field: what is unset disappears, as in register.
    domain.run(lambda ctx: personal.do_update_user_status(ctx, othello, emoji_name=""))
    domain.run(lambda ctx: personal.do_update_user_status(ctx, othello, away=False))
    assert read(othello) == {"status_text": "Out"}
    assert read(hamlet) == {}


def test_a_users_status_refusals(domain, database_url):
    from tests.domain.harness import Domain

    other_realm = Domain(database_url)
    bot = domain.run(
        lambda ctx: do_create_bot(ctx, domain.id("hamlet"), domain.realm_id, "Helper", "helper")
    )
    domain.run(lambda ctx: do_deactivate_user(ctx, None, domain.realm_id, domain.id("othello")))
    for user_id, message in (
        (other_realm.id("hamlet"), "No such user"),
        (bot.user_id, "No such user"),
        (2**62, "No such user"),
        (domain.id("othello"), "User is deactivated"),
    ):
        refused(
            domain,
            lambda ctx, u=user_id: personal.user_status(ctx.conn, domain.realm_id, u),
            message,
        )


# -- custom emoji in reactions and statuses ------------------------------------------


@covers(REACTION_ADD, REACTION_REMOVE)
def test_a_custom_emoji_reaction_by_name_or_by_id(domain):
    message_id = send(domain, "iago", "hello")
    tick = add_emoji(domain, "green_tick")
    othello, hamlet = domain.id("othello"), domain.id("hamlet")
    [event] = domain.verify(
        lambda ctx: do_add_reaction(ctx, othello, message_id, "green_tick"),
        state_change_expected=False,
    )
    assert (event["emoji_name"], event["emoji_code"], event["reaction_type"]) == (
        "green_tick", tick, "realm_emoji",
    )  # fmt: skip
    domain.verify(
        lambda ctx: do_add_reaction(ctx, hamlet, message_id, "green_tick", tick, "realm_emoji"),
        state_change_expected=False,
    )
    [event] = domain.verify(
        lambda ctx: do_remove_reaction(ctx, hamlet, message_id, emoji_code=tick,
                                       reaction_type="realm_emoji"),
        state_change_expected=False,
    )  # fmt: skip
    assert event["emoji_code"] == tick
    # A custom emoji of the name wins over the Unicode one (Zulip's get_emoji_data).
    octopus = add_emoji(domain, "octopus")
    [event] = domain.verify(
        lambda ctx: do_add_reaction(ctx, hamlet, message_id, "octopus"),
        state_change_expected=False,
    )
    assert (event["emoji_code"], event["reaction_type"]) == (octopus, "realm_emoji")
    # A name of up to 100 characters (deploy/migrations/0021_emoji_lengths.sql).
    long_name = "a" * 100
    long_id = add_emoji(domain, long_name)
    [event] = domain.verify(
        lambda ctx: do_add_reaction(ctx, hamlet, message_id, long_name),
        state_change_expected=False,
    )
    assert (event["emoji_name"], event["emoji_code"]) == (long_name, long_id)
    reactions = sql(
        domain,
        "SELECT emoji_name, reaction_type FROM reactions WHERE message_id = %s ORDER BY 1",
        (message_id,),
    )
    assert reactions == [
        (long_name, "realm_emoji"),
        ("green_tick", "realm_emoji"),
        ("octopus", "realm_emoji"),
    ]


@covers(REACTION_ADD, REACTION_REMOVE)
def test_a_deactivated_custom_emoji_is_refused_but_its_reactions_stay(domain):
    message_id = send(domain, "iago", "hello")
    party = add_emoji(domain, "party")
    hamlet, othello, iago = domain.id("hamlet"), domain.id("othello"), domain.id("iago")
    domain.run(lambda ctx: do_add_reaction(ctx, othello, message_id, "party"))
    domain.run(lambda ctx: do_add_reaction(ctx, iago, message_id, "party"))
    deactivate_emoji(domain, "party")
    fresh = send(domain, "iago", "x")
    refused(
        domain,
        lambda ctx: do_add_reaction(ctx, hamlet, fresh, "party", party, "realm_emoji"),
        "This custom emoji has been deactivated.",
    )
    refused(
        domain,
        lambda ctx: do_add_reaction(ctx, hamlet, message_id, "party"),
        "Emoji 'party' does not exist",
    )
    # A vote for the reaction already on the message: its name, unchecked.
    [event] = domain.verify(
        lambda ctx: do_add_reaction(ctx, hamlet, message_id, "whatever", party, "realm_emoji"),
        state_change_expected=False,
    )
    assert (event["emoji_name"], event["emoji_code"]) == ("party", party)
    # Removed by code and type, or by name, though deactivated.
    domain.verify(
        lambda ctx: do_remove_reaction(ctx, othello, message_id, emoji_code=party,
                                       reaction_type="realm_emoji"),
        state_change_expected=False,
    )  # fmt: skip
    domain.verify(
        lambda ctx: do_remove_reaction(ctx, iago, message_id, emoji_name="party"),
        state_change_expected=False,
    )
    # The name is free again: a new emoji of it is another id.
    again = add_emoji(domain, "party")
    assert again != party
    [event] = domain.verify(
        lambda ctx: do_add_reaction(ctx, othello, message_id, "party"),
        state_change_expected=False,
    )
    assert event["emoji_code"] == again


def test_custom_emoji_reaction_refusals(domain, database_url):
    from tests.domain.harness import Domain

    message_id = send(domain, "iago", "hello")
    tick = add_emoji(domain, "green_tick")
    elsewhere = Domain(database_url)
    theirs = add_emoji(elsewhere, "theirs")
    hamlet = domain.id("hamlet")
    for name, code, message in (
        ("green_tick", "999999999999", "Invalid custom emoji."),
        ("green_tick", "99999999999999999999", "Invalid custom emoji."),
        ("theirs", theirs, "Invalid custom emoji."),
        ("red_tick", tick, "Invalid custom emoji name."),
        ("green_tick", "1f389", "Invalid custom emoji."),
        ("green_tick", "1\x00", "Invalid custom emoji."),
    ):
        refused(
            domain,
            lambda ctx, n=name, c=code: do_add_reaction(ctx, hamlet, message_id, n, c,
                                                        "realm_emoji"),
            message,
        )  # fmt: skip
    refused(
        domain,
        lambda ctx: do_add_reaction(ctx, hamlet, message_id, "zulip", "1f389",
                                    "zulip_extra_emoji"),
        "Invalid emoji code.",
    )  # fmt: skip
    # A code of no emoji's form is refused, never looked up (a NUL is no
    # text PostgreSQL takes).
    for kind in ("unicode_emoji", None):
        refused(
            domain,
            lambda ctx, k=kind: do_add_reaction(ctx, hamlet, message_id, "smile", "\x00", k),
            "Invalid emoji code.",
        )
    refused(
        domain,
        lambda ctx: do_remove_reaction(ctx, hamlet, message_id, emoji_code="x" * 20,
                                       reaction_type="realm_emoji"),
        "Invalid emoji code.",
    )  # fmt: skip
    assert sql(domain, "SELECT count(*) FROM reactions WHERE message_id = %s", (message_id,)) == [
        (0,)
    ]


@covers(("user_status", None))
def test_a_status_takes_an_active_custom_emoji(domain):
    hamlet = domain.id("hamlet")
    tick = add_emoji(domain, "green_tick")
    [event] = domain.verify(
        lambda ctx: personal.do_update_user_status(ctx, hamlet, emoji_name="green_tick"),
        user="othello",
    )
    assert (event["emoji_name"], event["emoji_code"], event["reaction_type"]) == (
        "green_tick", tick, "realm_emoji",
    )  # fmt: skip
    assert domain.fetch()["user_status"][str(hamlet)] == {
        "emoji_name": "green_tick",
        "emoji_code": tick,
        "reaction_type": "realm_emoji",
    }
    refused(
        domain,
        lambda ctx: personal.do_update_user_status(
            ctx, hamlet, emoji_name="red_tick", emoji_code=tick, reaction_type="realm_emoji"
        ),
        "Invalid custom emoji name.",
    )
    # Deactivated: a status keeps it, a new status cannot take it.
    deactivate_emoji(domain, "green_tick")
    assert (
        domain.run(lambda ctx: personal.user_status(ctx.conn, domain.realm_id, hamlet))[
            "emoji_code"
        ]
        == tick
    )
    refused(
        domain,
        lambda ctx: personal.do_update_user_status(
            ctx, domain.id("othello"), emoji_name="green_tick", emoji_code=tick,
            reaction_type="realm_emoji",
        ),
        "This custom emoji has been deactivated.",
    )  # fmt: skip
    long_name = "b" * 100
    long_id = add_emoji(domain, long_name)
    domain.verify(
        lambda ctx: personal.do_update_user_status(ctx, hamlet, emoji_name=long_name),
    )
    assert domain.fetch()["user_status"][str(hamlet)]["emoji_code"] == long_id


# -- user group mentions -----------------------------------------------------------


def test_markdown_group_mentions():
    support = MentionGroup(5, "support team", is_system_group=False, deactivated=False)
    old = MentionGroup(6, "old", is_system_group=False, deactivated=True)
    everyone = MentionGroup(7, "role:everyone", is_system_group=True, deactivated=False)
    groups = [support, old, everyone]
    rendered = render("@*support team* @_*support team* @*old* @_*role:everyone*", groups=groups)
    assert rendered.html == (
        '<p><span class="user-group-mention" data-user-group-id="5">@support team</span>'
        ' <span class="user-group-mention silent" data-user-group-id="5">support team</span>'
        ' <span class="user-group-mention silent" data-user-group-id="6">old</span>'
        ' <span class="user-group-mention silent" data-user-group-id="7">Everyone</span></p>'
    )
    assert rendered.mentioned_group_ids == {5}
    assert render("@*role:everyone*", groups=groups).mentioned_group_ids == {7}
    # Exact names only; unknown, in code or glued to a word: CommonMark.
    assert render("@*Support Team*", groups=groups).html == "<p>@<em>Support Team</em></p>"
    assert render("`@*support team*`", groups=groups).mentioned_group_ids == set()
    assert render("a@*support team*", groups=groups).mentioned_group_ids == set()
    # A user mention is never a group's.
    people = [Person(9, "support team")]
    both = render("@**support team** @*support team*", people, groups)
    assert (both.mentioned_user_ids, both.mentioned_group_ids) == ({9}, {5})
    escaped = render("@*<b>x</b>*", groups=[MentionGroup(8, "<b>x</b>", False, False)])
    assert escaped.html == (
        '<p><span class="user-group-mention" data-user-group-id="8">'
        "@&lt;b&gt;x&lt;/b&gt;</span></p>"
    )
    assert possible_group_mentions("@*a b* @_*c* @**d** x@*e*") == {"a b", "c"}


def make_group(domain, name, members, subgroups=(), settings=None):
    return domain.run(
        lambda ctx: groups.do_create_user_group(
            ctx,
            domain.id("iago"),
            domain.realm_id,
            name,
            "",
            [domain.id(m) for m in members],
            subgroups,
            settings,
        )
    )


@covers(MESSAGE)
def test_a_group_mention_flags_its_members_through_subgroups(domain):
    leads = make_group(domain, "leads", ["iago"])
    make_group(domain, "support", ["othello"], [leads])
    for user, flags in (("othello", ["mentioned"]), ("iago", ["mentioned"]), ("hamlet", ["read"])):
        [event] = domain.verify(
            lambda ctx: do_send_stream_message(
                ctx, domain.id("hamlet"), "Denmark", "t", "Hi @*support*"
            ),
            user=user,
        )
        assert event["flags"] == flags
    assert '<span class="user-group-mention" data-user-group-id=' in (event["message"]["content"])
    assert event["message"]["id"] in domain.fetch("othello")["unread_msgs"]["mentions"]
    # Silent: rendered, no flag.
    message_id = send(domain, "hamlet", "Hi @_*support*")
    assert flags_of(domain, message_id) == {
        "iago": (False, False), "hamlet": (False, False), "othello": (False, False),
    }  # fmt: skip
    # A direct message flags only its participants.
    message_id = domain.run(
        lambda ctx: do_send_direct_message(ctx, domain.id("hamlet"), [domain.id("othello")],
                                           "@*support*")
    )  # fmt: skip
    assert flags_of(domain, message_id) == {"hamlet": (False, False), "othello": (True, False)}


def test_deactivated_groups_and_users_are_not_flagged(domain):
    gone = make_group(domain, "gone", ["othello"])
    domain.run(lambda ctx: groups.do_deactivate_user_group(ctx, None, domain.realm_id, gone))
    message_id = send(domain, "hamlet", "@*gone*")
    assert flags_of(domain, message_id)["othello"] == (False, False)
    [(html,)] = sql(domain, "SELECT rendered_content FROM messages WHERE id = %s", (message_id,))
    assert html == (
        f'<p><span class="user-group-mention silent" data-user-group-id="{gone}">gone</span></p>'
    )
    make_group(domain, "pair", ["othello", "hamlet"])
    domain.run(lambda ctx: do_deactivate_user(ctx, None, domain.realm_id, domain.id("hamlet")))
    message_id = send(domain, "iago", "@*pair*")
    assert flags_of(domain, message_id)["othello"] == (True, False)


def test_who_may_mention_a_group(domain):
    system = domain.run(lambda ctx: groups.system_group_ids(ctx.conn, domain.realm_id))
    make_group(
        domain, "admins only", ["othello"],
        settings={"can_mention_group": system["role:administrators"]},
    )  # fmt: skip
    refused(
        domain,
        lambda ctx: do_send_stream_message(
            ctx, domain.id("hamlet"), "Denmark", "t", "@*admins only*"
        ),
        "You are not allowed to mention user group 'admins only'.",
    )
    send(domain, "hamlet", "@_*admins only*")
    message_id = send(domain, "iago", "@*admins only*")
    assert flags_of(domain, message_id)["othello"] == (True, False)
    # A system group may be mentioned by nobody (its can_mention_group is role:nobody).
    refused(
        domain,
        lambda ctx: do_send_stream_message(
            ctx, domain.id("iago"), "Denmark", "t", "@*role:everyone*"
        ),
        "You are not allowed to mention user group 'role:everyone'.",
    )
    # A guest in the setting's group may (it allows role:everyone).
    make_group(
        domain, "by guests", ["othello"], settings={"can_mention_group": system["role:everyone"]}
    )
    message_id = domain.run(
        lambda ctx: do_send_direct_message(ctx, domain.id("polonius"), [domain.id("othello")],
                                           "@*by guests*")
    )  # fmt: skip
    assert flags_of(domain, message_id)["othello"] == (True, False)


@covers(UPDATE)
def test_an_edit_flags_a_groups_members_and_unflags_them(domain):
    make_group(domain, "support", ["othello"])
    message_id = send(domain, "hamlet", "hello")
    [event] = domain.verify(
        lambda ctx: do_update_message(ctx, domain.id("hamlet"), message_id, content="@*support*"),
        user="othello",
    )
    assert event["flags"] == ["mentioned"]
    assert domain.fetch("othello")["unread_msgs"]["mentions"] == [message_id]
    [event] = domain.verify(
        lambda ctx: do_update_message(ctx, domain.id("hamlet"), message_id, content="bye"),
        user="othello",
    )
    assert event["flags"] == []
    system = domain.run(lambda ctx: groups.system_group_ids(ctx.conn, domain.realm_id))
    make_group(domain, "closed", ["othello"], settings={"can_mention_group": system["role:nobody"]})
    refused(
        domain,
        lambda ctx: do_update_message(ctx, domain.id("hamlet"), message_id, content="@*closed*"),
        "You are not allowed to mention user group 'closed'.",
    )
    [(content,)] = sql(domain, "SELECT content FROM messages WHERE id = %s", (message_id,))
    assert content == "bye"


# -- alert words on edit -------------------------------------------------------------


@covers(UPDATE)
def test_an_edit_recounts_alert_words(domain):
    hamlet, othello = domain.id("hamlet"), domain.id("othello")
    domain.run(lambda ctx: personal.do_add_alert_words(ctx, hamlet, ["ghost"]))
    domain.run(lambda ctx: personal.do_add_alert_words(ctx, othello, ["Castle"]))
    message_id = send(domain, "iago", "a quiet night")
    [event] = domain.verify(
        lambda ctx: do_update_message(ctx, domain.id("iago"), message_id, content="A GHOST!"),
        state_change_expected=False,
    )
    assert event["flags"] == ["has_alert_word"]
    assert flags_of(domain, message_id) == {
        "iago": (False, False), "hamlet": (False, True), "othello": (False, False),
    }  # fmt: skip
    # Another word, at a word boundary only; the first one's flag goes.
    [event] = domain.verify(
        lambda ctx: do_update_message(
            ctx, domain.id("iago"), message_id, content="ghostly (castle)"
        ),
        user="othello",
        state_change_expected=False,
    )
    assert event["flags"] == ["has_alert_word"]
    assert flags_of(domain, message_id) == {
        "iago": (False, False), "hamlet": (False, False), "othello": (False, True),
    }  # fmt: skip
    # A topic move alone leaves the flags as they are.
    domain.run(lambda ctx: do_update_message(ctx, domain.id("iago"), message_id, topic="moved"))
    assert flags_of(domain, message_id)["othello"] == (False, True)


# -- user_avatar_url_field_optional --------------------------------------------------


def idle_for(domain, name, days):
    """A presence of the user's, reported `days` ago."""
    domain.run(
        lambda ctx: do_update_presence(
            ctx, domain.id(name), "active", now=time.time() - days * 86400
        )
    )


def avatars(state):
    return {
        user["user_id"]: "avatar_url" in user
        for user in state["realm_users"] + state["realm_non_active_users"]
    }


def test_long_term_idle_users_have_no_avatar_url_for_clients_declaring_it(domain):
    idle_for(domain, "othello", 30)
    idle_for(domain, "polonius", 28)
    idle_for(domain, "iago", 29)
    bot = domain.run(
        lambda ctx: do_create_bot(ctx, domain.id("hamlet"), domain.realm_id, "Helper", "helper")
    )
    sql(
        domain,
        "INSERT INTO presences (user_id, realm_id, last_connected_time)"
        " VALUES (%s, %s, now() - interval '90 days')",
        (bot.user_id, domain.realm_id),
    )
    domain.run(lambda ctx: do_deactivate_user(ctx, None, domain.realm_id, domain.id("iago")))
    shown = avatars(domain.fetch(fetch_event_types=["realm_user"]))
    assert shown == {
        domain.id("iago"): False,  # deactivated, idle all the same
        domain.id("hamlet"): True,  # never reported a presence
        domain.id("othello"): False,
        domain.id("polonius"): True,  # 28 days: not yet
        bot.user_id: True,
    }
    without = domain.fetch(
        fetch_event_types=["realm_user"], capabilities=MODERN - {"user_avatar_url_field_optional"}
    )
    assert all(avatars(without).values())
    # Registering is a visit: an idle user's own register keeps their avatar.
    own = avatars(domain.fetch("othello", fetch_event_types=["realm_user"]))
    assert own[domain.id("othello")]
    assert not own[domain.id("iago")]
    # Back: a new presence makes them a regular user again.
    domain.run(lambda ctx: do_update_presence(ctx, domain.id("othello"), "active"))
    assert avatars(domain.fetch(fetch_event_types=["realm_user"]))[domain.id("othello")]


@covers(("realm_user", "update"))
def test_an_idle_users_change_applies_without_an_avatar(domain):
    idle_for(domain, "othello", 40)
    [event] = domain.verify(
        lambda ctx: do_change_full_name(
            ctx, domain.id("iago"), domain.realm_id, domain.id("othello"), "Othello"
        ),
        event_types=["realm_user"],
        fetch_event_types=["realm_user"],
    )
    assert event["person"] == {"user_id": domain.id("othello"), "full_name": "Othello"}
    [othello] = [u for u in domain.fetch()["realm_users"] if u["user_id"] == domain.id("othello")]
    assert othello["full_name"] == "Othello"
    assert "avatar_url" not in othello
