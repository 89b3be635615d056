"""verify_action for the realm's configuration: custom emoji, linkifiers,
code playgrounds and the realm's domains; and the refusals of each."""

from __future__ import annotations

import pytest

from generation.actions import realm_config as actions
from generation.actions.base import ActionError
from generation.actions.realm_config.common import template_variables
from tests.domain.harness import MODERN, covers

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 40
GIF = b"GIF89a" + b"\x00" * 40
JPEG = b"\xff\xd8\xff\xe0" + b"\x00" * 40
WEBP = b"RIFF\x24\x00\x00\x00WEBPVP8 " + b"\x00" * 40


def refused(domain, action, message: str) -> None:
    with pytest.raises(ActionError, match=message):
        domain.run(action)


# -- realm_emoji --------------------------------------------------------------------


@covers(("realm_emoji", "update"))
def test_adding_and_deactivating_custom_emoji(domain):
    hamlet, iago, realm = domain.id("hamlet"), domain.id("iago"), domain.realm_id
    [event] = domain.verify(
        lambda ctx: actions.do_add_realm_emoji(ctx, hamlet, realm, "green tick", PNG)
    )
    [emoji] = event["realm_emoji"].values()
    assert (emoji["name"], emoji["author_id"], emoji["deactivated"]) == (
        "green_tick",
        hamlet,
        False,
    )
    assert emoji["source_url"].startswith(f"/user_avatars/{realm}/emoji/images/")
    assert emoji["source_url"].endswith(".png")
    assert emoji["still_url"] is None
    for name, image in (("party", GIF), ("photo", JPEG), ("sticker", WEBP)):
        domain.verify(
            lambda ctx, n=name, i=image: actions.do_add_realm_emoji(ctx, iago, realm, n, i),
            user="polonius",
        )
    # Its author deactivates it; it stays in the dict, deactivated.
    [event] = domain.verify(
        lambda ctx: actions.do_remove_realm_emoji(ctx, hamlet, realm, "green_tick")
    )
    assert event["realm_emoji"][emoji["id"]]["deactivated"] is True
    assert len(event["realm_emoji"]) == 4
    # An administrator deactivates anyone's; the name can be taken again.
    domain.verify(lambda ctx: actions.do_remove_realm_emoji(ctx, iago, realm, "party"))
    domain.verify(lambda ctx: actions.do_add_realm_emoji(ctx, hamlet, realm, "green_tick", GIF))
    names = sorted((e["name"], e["deactivated"]) for e in domain.fetch()["realm_emoji"].values())
    assert names == [
        ("green_tick", False), ("green_tick", True), ("party", True), ("photo", False),
        ("sticker", False),
    ]  # fmt: skip


def test_an_emoji_image_is_kept_as_uploaded_under_its_source_url(domain):
    realm = domain.realm_id
    added = domain.run(
        lambda ctx: actions.do_add_realm_emoji(ctx, domain.id("hamlet"), realm, "wave", GIF)
    )
    file_name = added["source_url"].rsplit("/", 1)[1]
    assert domain.run(lambda ctx: actions.emoji_image(ctx.conn, realm, file_name)) == (
        "image/gif",
        GIF,
    )
    other_realm = realm + 1_000_000
    assert domain.run(lambda ctx: actions.emoji_image(ctx.conn, other_realm, file_name)) is None


def test_custom_emoji_refusals(domain):
    realm, hamlet = domain.realm_id, domain.id("hamlet")

    def add(name: str, image: bytes = PNG, user: str = "hamlet"):
        return lambda ctx: actions.do_add_realm_emoji(ctx, domain.id(user), realm, name, image)

    refused(domain, add("  "), "Emoji name is missing")
    refused(domain, add("Smile"), "Emoji names must contain only lowercase")
    refused(domain, add("smile!"), "Emoji names must contain only lowercase")
    refused(domain, add("smile_"), "Emoji names must end with either a letter or digit.")
    refused(domain, add("s" * 101), "Emoji name is too long")
    refused(domain, add("smile", b"<svg/>"), "Invalid image format")
    refused(domain, add("smile", b""), "Invalid image format")
    big = PNG + b"\x00" * actions.MAX_EMOJI_BYTES
    refused(domain, add("smile", big), "larger than the allowed limit of 512 KiB")
    refused(domain, add("smile", user="polonius"), "Not allowed for guest users")
    domain.run(add("smile"))
    refused(domain, add("smile", GIF, user="iago"), "A custom emoji with this name already exists.")
    refused(
        domain,
        lambda ctx: actions.do_remove_realm_emoji(ctx, domain.id("othello"), realm, "smile"),
        "Must be an organization administrator or emoji author",
    )
    refused(
        domain,
        lambda ctx: actions.do_remove_realm_emoji(ctx, hamlet, realm, "frown"),
        "Emoji 'frown' does not exist",
    )
    assert [e["name"] for e in domain.fetch()["realm_emoji"].values()] == ["smile"]


def test_a_realm_has_at_most_max_emoji_deactivated_ones_included(domain, monkeypatch):
    from generation.actions.realm_config import emoji

    monkeypatch.setattr(emoji, "MAX_EMOJI", 2)
    realm, hamlet = domain.realm_id, domain.id("hamlet")
    domain.run(lambda ctx: actions.do_add_realm_emoji(ctx, hamlet, realm, "one", PNG))
    domain.run(lambda ctx: actions.do_remove_realm_emoji(ctx, hamlet, realm, "one"))
    domain.run(lambda ctx: actions.do_add_realm_emoji(ctx, hamlet, realm, "two", PNG))
    refused(
        domain,
        lambda ctx: actions.do_add_realm_emoji(ctx, hamlet, realm, "three", PNG),
        "at most 2 custom emoji",
    )


# -- realm_linkifiers -----------------------------------------------------------------


@covers(("realm_linkifiers", None))
def test_adding_changing_reordering_and_removing_linkifiers(domain):
    iago, realm = domain.id("iago"), domain.realm_id
    [event] = domain.verify(
        lambda ctx: actions.do_add_linkifier(
            ctx, iago, realm, " #(?P<id>[0-9]+) ", "https://trac.example.com/ticket/{id}"
        )
    )
    [first] = event["realm_linkifiers"]
    assert first["pattern"] == "#(?P<id>[0-9]+)"
    [event] = domain.verify(
        lambda ctx: actions.do_add_linkifier(
            ctx, iago, realm, r"(?P<org>\w+)/(?P<repo>\w+)#(?P<id>\d+)",
            "https://github.com/{org}/{repo}/issues/{id}",
        )
    )  # fmt: skip
    second = event["realm_linkifiers"][1]
    assert [x["id"] for x in event["realm_linkifiers"]] == [first["id"], second["id"]]
    [event] = domain.verify(
        lambda ctx: actions.do_update_linkifier(
            ctx, iago, realm, first["id"], "T(?P<id>[0-9]+)", "https://t.example.com{/id}"
        )
    )
    assert event["realm_linkifiers"][0]["url_template"] == "https://t.example.com{/id}"
    [event] = domain.verify(
        lambda ctx: actions.do_reorder_linkifiers(ctx, iago, realm, [second["id"], first["id"]])
    )
    assert [x["id"] for x in event["realm_linkifiers"]] == [second["id"], first["id"]]
    # A new one applies last.
    [event] = domain.verify(
        lambda ctx: actions.do_add_linkifier(ctx, iago, realm, "X(?P<x>.)", "https://x/{x}")
    )
    assert event["realm_linkifiers"][-1]["pattern"] == "X(?P<x>.)"
    [event] = domain.verify(lambda ctx: actions.do_remove_linkifier(ctx, iago, realm, second["id"]))
    assert [x["pattern"] for x in event["realm_linkifiers"]] == ["T(?P<id>[0-9]+)", "X(?P<x>.)"]


@covers()
def test_a_client_without_url_templates_sees_no_linkifiers(domain):
    """Zulip 7's rule: no event, and an empty `realm_linkifiers` at register;
    `realm_filters` is always empty."""
    iago, realm = domain.id("iago"), domain.realm_id
    domain.verify(
        lambda ctx: actions.do_add_linkifier(ctx, iago, realm, "#(?P<id>[0-9]+)", "https://t/{id}"),
        capabilities=MODERN - {"linkifier_url_template"},
        num_events=0,
        state_change_expected=False,
    )
    legacy = domain.fetch(capabilities=frozenset())
    assert (legacy["realm_linkifiers"], legacy["realm_filters"]) == ([], [])
    modern = domain.fetch()
    assert len(modern["realm_linkifiers"]) == 1
    assert modern["realm_filters"] == []


def test_linkifier_refusals(domain):
    iago, realm = domain.id("iago"), domain.realm_id

    def add(pattern: str, template: str, user: str = "iago"):
        return lambda ctx: actions.do_add_linkifier(ctx, domain.id(user), realm, pattern, template)

    refused(domain, add("#(?P<id>[0-9]+)", "https://t/{id}", "hamlet"), "Must be an organization")
    refused(domain, add("#(?P<id>[0-9+", "https://t/{id}"), "Bad regular expression: ")
    refused(domain, add("", "https://t/"), "This field cannot be blank.")
    refused(domain, add("a" * 1001, "https://t/"), "pattern is too long")
    refused(domain, add("#(?P<id>[0-9]+)", "https://t/{id"), "Invalid URL template.")
    refused(domain, add("#(?P<id>[0-9]+)", "https://t/{i d}"), "Invalid URL template.")
    refused(domain, add("#(?P<id>[0-9]+)", "https://t/ {id}"), "Invalid URL template.")
    refused(
        domain,
        add("#(?P<id>[0-9]+)", "https://t/{id}/{page}"),
        "Group 'page' in URL template is not present in linkifier pattern.",
    )
    refused(
        domain,
        add("#(?P<id>[0-9]+)(?P<page>.)", "https://t/{id}"),
        "Group 'page' in linkifier pattern is not present in URL template.",
    )
    linkifier_id = domain.run(add("#(?P<id>[0-9]+)", "https://t/{id}"))
    refused(
        domain,
        add("#(?P<id>[0-9]+)", "https://u/{id}"),
        "Realm filter with this Realm and Pattern already exists.",
    )
    refused(
        domain,
        lambda ctx: actions.do_update_linkifier(ctx, iago, realm, linkifier_id + 999, "a", "b"),
        "Linkifier not found.",
    )
    refused(
        domain,
        lambda ctx: actions.do_remove_linkifier(ctx, iago, realm, linkifier_id + 999),
        "Linkifier not found.",
    )
    refused(
        domain,
        lambda ctx: actions.do_reorder_linkifiers(ctx, iago, realm, [linkifier_id, linkifier_id]),
        "must not contain duplicated linkifiers",
    )
    refused(
        domain,
        lambda ctx: actions.do_reorder_linkifiers(ctx, iago, realm, []),
        "must enumerate all existing linkifiers exactly once",
    )
    assert len(domain.fetch()["realm_linkifiers"]) == 1


def test_url_templates_follow_rfc_6570():
    assert template_variables("https://example.com/{id}") == {"id"}
    assert template_variables("https://e.com{/org,repo}{?q*}{#frag:3}{&a.b}") == {
        "org", "repo", "q", "frag", "a.b",
    }  # fmt: skip
    assert template_variables("https://e.com/%7Euser/") == set()
    for bad in ("{}", "{id", "id}", "{=id}", "a b", "{id:0}", "{id:10000}", "%zz", "{a,}"):
        assert template_variables(bad) is None, bad


# -- realm_playgrounds ----------------------------------------------------------------


@covers(("realm_playgrounds", None))
def test_adding_and_removing_code_playgrounds(domain):
    iago, realm = domain.id("iago"), domain.realm_id
    [event] = domain.verify(
        lambda ctx: actions.do_add_realm_playground(
            ctx, iago, realm, " Python playground ", "python", "https://python.example.com?{code}"
        )
    )
    [playground] = event["realm_playgrounds"]
    assert (playground["name"], playground["pygments_language"]) == ("Python playground", "python")
    domain.verify(
        lambda ctx: actions.do_add_realm_playground(
            ctx, iago, realm, "Rust", "rust", "https://play.rust-lang.org/?code={code}"
        ),
        user="polonius",
    )
    [event] = domain.verify(
        lambda ctx: actions.do_remove_realm_playground(ctx, iago, realm, playground["id"])
    )
    assert [p["name"] for p in event["realm_playgrounds"]] == ["Rust"]


def test_code_playground_refusals(domain):
    realm = domain.realm_id

    def add(language: str, template: str, name: str = "P", user: str = "iago"):
        return lambda ctx: actions.do_add_realm_playground(
            ctx, domain.id(user), realm, name, language, template
        )

    refused(domain, add("python", "https://p/{code}", user="hamlet"), "Must be an organization")
    refused(domain, add("Py thon", "https://p/{code}"), "Invalid characters in pygments language")
    refused(domain, add("p" * 41, "https://p/{code}"), "pygments_language is too long")
    refused(domain, add("python", "https://p/{code}", name=" "), "This field cannot be blank.")
    refused(domain, add("python", "https://p/{src}"), 'Missing the required variable "code"')
    refused(domain, add("python", "https://p/{code}{x}"), '"code" should be the only variable')
    refused(domain, add("python", "https://p/{code"), "Invalid URL template.")
    domain.run(add("python", "https://p/{code}"))
    refused(domain, add("python", "https://q/{code}"), "Pygments language and Name already exists")
    refused(
        domain,
        lambda ctx: actions.do_remove_realm_playground(ctx, domain.id("iago"), realm, 2**62),
        "Invalid playground",
    )


# -- realm_domains --------------------------------------------------------------------


@covers(("realm_domains", "add"), ("realm_domains", "change"), ("realm_domains", "remove"))
def test_adding_changing_and_removing_domains(domain):
    iago, realm = domain.id("iago"), domain.realm_id
    [event] = domain.verify(
        lambda ctx: actions.do_add_realm_domain(ctx, iago, realm, " Example.COM ", False)
    )
    assert event["realm_domain"] == {"domain": "example.com", "allow_subdomains": False}
    domain.verify(lambda ctx: actions.do_add_realm_domain(ctx, iago, realm, "zulip.org", True))
    [event] = domain.verify(
        lambda ctx: actions.do_change_realm_domain(ctx, iago, realm, "example.com", True)
    )
    assert (event["op"], event["realm_domain"]["allow_subdomains"]) == ("change", True)
    [event] = domain.verify(
        lambda ctx: actions.do_remove_realm_domain(ctx, iago, realm, "zulip.org"),
        user="polonius",
    )
    assert (event["op"], event["domain"]) == ("remove", "zulip.org")
    assert domain.fetch()["realm_domains"] == [{"domain": "example.com", "allow_subdomains": True}]


def test_domain_refusals(domain):
    iago, realm = domain.id("iago"), domain.realm_id

    def add(name: str, user: str = "iago"):
        return lambda ctx: actions.do_add_realm_domain(ctx, domain.id(user), realm, name, False)

    refused(domain, add("example.com", "hamlet"), "Must be an organization administrator")
    for bad, message in (
        ("", "Domain can't be empty."),
        ("localhost", r"Domain must have at least one dot \(\.\)"),
        (".example.com", r"Domain cannot start or end with a dot \(\.\)"),
        ("example..com", "Consecutive '.' are not allowed."),
        ("-a.com", "Subdomains cannot start or end with a '-'."),
        ("ex_ample.com", "Domain can only have letters, numbers, '.' and '-'s."),
        ("a." + "b" * 254, "Domain is too long"),
    ):
        refused(domain, add(bad), f"Invalid domain: {message}")
    domain.run(add("example.com"))
    refused(domain, add("EXAMPLE.com"), "The domain example.com is already a part of your")
    for action in (
        lambda ctx: actions.do_change_realm_domain(ctx, iago, realm, "nowhere.com", True),
        lambda ctx: actions.do_remove_realm_domain(ctx, iago, realm, "nowhere.com"),
    ):
        refused(domain, action, "No entry found for domain nowhere.com.")


def test_a_realm_has_at_most_max_domains(domain, monkeypatch):
    from generation.actions.realm_config import domains

    monkeypatch.setattr(domains, "MAX_DOMAINS", 1)
    iago, realm = domain.id("iago"), domain.realm_id
    domain.run(lambda ctx: actions.do_add_realm_domain(ctx, iago, realm, "a.com", False))
    refused(
        domain,
        lambda ctx: actions.do_add_realm_domain(ctx, iago, realm, "b.com", False),
        "at most 1 domains",
    )
