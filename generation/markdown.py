"""Message content as HTML, and whom it mentions (Zulip's Markdown, the part
we model).

Content is CommonMark rendered by markdown-it-py with raw HTML disabled, so
that any HTML a sender types is shown escaped, never interpreted. On top of
CommonMark, Zulip's mention syntax:

- `@**Full Name**` and `@**Full Name|user_id**`: a user of the realm; renders
  `<span class="user-mention" data-user-id="N">@Full Name</span>` and sets that
  recipient's `mentioned` flag. A name matches case-insensitively and only if
  exactly one active user has it (otherwise the `|user_id` form is needed).
- `@_**Full Name**`: a silent mention: rendered without the `@`, sets no flag.
- `@**all**`, `@**everyone**`, `@**channel**`, `@**stream**`: a wildcard
  mention of everyone who receives a channel message (`wildcard_mentioned`).
- `@*group name*`: a user group of the realm, by its exact name; renders
  `<span class="user-group-mention" data-user-group-id="N">@group name</span>`
  (a system group under Zulip's display name, `@Everyone`). Its members get
  `mentioned` (the caller expands them: `Rendered.mentioned_group_ids`).
  `@_*group name*`, and any mention of a deactivated group, is silent: no
  `@`, no flag (Zulip's UserGroupMentionPattern).

A mention of no known user is left to CommonMark (as Zulip does): `@**Nobody**`
renders `@<strong>Nobody</strong>`. Mentions inside code are code.

Pure: the caller looks up the people `possible_mentions` names and the groups
`possible_group_mentions` names, and passes them to `render`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
from markdown_it.rules_inline import StateInline
from markdown_it.token import Token

WILDCARDS = frozenset({"all", "everyone", "channel", "stream"})

# Zulip's mention pattern: `@`, an optional `_` (silent), then `**name**`
# where the name has no `*`; it must start the text or follow whitespace or
# one of `'"(,:<`, so that an e-mail address like a@**b** is not a mention.
_MENTION = re.compile(r"@(_?)\*\*([^*\n]+)\*\*")
_MENTION_ANYWHERE = re.compile(r"(?:^|(?<=[\s'\"(,:<]))" + _MENTION.pattern)
_PRECEDES = frozenset(" \t\n\r\f\v'\"(,:<")
# Zulip's group mention: `@`, an optional `_`, then `*name*` (one `*`: a
# `@**...**` is a user mention, never this), after the same characters.
_GROUP_MENTION = re.compile(r"@(_?)\*([^*\n]+)\*")
_GROUP_MENTION_ANYWHERE = re.compile(r"(?:^|(?<=[\s'\"(,:<]))" + _GROUP_MENTION.pattern)
# How a mention shows a system group (Zulip's SystemGroups.GROUP_DISPLAY_NAME_MAP).
SYSTEM_GROUP_DISPLAY_NAMES = {
    "role:nobody": "Nobody",
    "role:owners": "Owners",
    "role:administrators": "Administrators",
    "role:moderators": "Moderators",
    "role:fullmembers": "Full members",
    "role:members": "Members",
    "role:everyone": "Everyone",
    "role:internet": "Everyone on the internet",
}
_NAME_WITH_ID = re.compile(r"(.*)\|([0-9]{1,18})", re.DOTALL)


@dataclasses.dataclass(frozen=True, slots=True)
class Person:
    """Someone a message may mention: an active user of the sender's realm."""

    id: int
    full_name: str


@dataclasses.dataclass(frozen=True, slots=True)
class MentionGroup:
    """A user group of the sender's realm that a message may mention."""

    id: int
    name: str
    is_system_group: bool
    deactivated: bool

    @property
    def display_name(self) -> str:
        if self.is_system_group:
            return SYSTEM_GROUP_DISPLAY_NAMES.get(self.name, self.name)
        return self.name


@dataclasses.dataclass(frozen=True, slots=True)
class PossibleMentions:
    """Who a message's text may mention, before rendering: the people to look
    up (lower-cased full names, and ids of the `|user_id` form)."""

    names: frozenset[str]
    user_ids: frozenset[int]

    def __bool__(self) -> bool:
        return bool(self.names or self.user_ids)


@dataclasses.dataclass(frozen=True, slots=True)
class Rendered:
    """A message's HTML and the mentions it actually rendered (silent ones and
    those inside code excluded)."""

    html: str
    mentioned_user_ids: frozenset[int]
    wildcard: bool
    # Active groups mentioned aloud; their members are the caller's to find.
    mentioned_group_ids: frozenset[int] = frozenset()


def _split(target: str) -> tuple[str, int | None]:
    """`Full Name|12` -> ("Full Name", 12); `Full Name` -> ("Full Name", None)."""
    found = _NAME_WITH_ID.fullmatch(target)
    if found is None:
        return target, None
    return found.group(1), int(found.group(2))


def possible_mentions(content: str) -> PossibleMentions:
    """The names and ids `content` may mention (a superset: some may sit in
    code, where they mention nobody)."""
    names: set[str] = set()
    user_ids: set[int] = set()
    for found in _MENTION_ANYWHERE.finditer(content):
        name, user_id = _split(found.group(2))
        if user_id is not None:
            user_ids.add(user_id)
        elif name.strip().lower() not in WILDCARDS:
            names.add(name.strip().lower())
    return PossibleMentions(frozenset(names), frozenset(user_ids))


def possible_group_mentions(content: str) -> frozenset[str]:
    """The group names `content` may mention, as written (a superset, as
    `possible_mentions`). Zulip matches a group's name exactly."""
    return frozenset(found.group(2) for found in _GROUP_MENTION_ANYWHERE.finditer(content))


@dataclasses.dataclass(slots=True)
class _People:
    """The people one rendering may mention (in markdown-it's `env`)."""

    by_id: dict[int, Person]
    # lower-cased name -> the one person with it, or None when several share it
    by_name: dict[str, Person | None]

    @classmethod
    def of(cls, people: Iterable[Person]) -> _People:
        by_id: dict[int, Person] = {}
        by_name: dict[str, Person | None] = {}
        for person in people:
            by_id[person.id] = person
            key = person.full_name.lower()
            by_name[key] = None if key in by_name else person
        return cls(by_id, by_name)

    def find(self, target: str) -> Person | None:
        name, user_id = _split(target)
        if user_id is not None:
            return self.by_id.get(user_id)
        return self.by_name.get(name.strip().lower())


def _mention_rule(state: StateInline, silent: bool) -> bool:
    """markdown-it inline rule: a mention at `state.pos`, or nothing (the
    other rules then read the text as CommonMark)."""
    pos = state.pos
    if state.src[pos] != "@" or (pos > 0 and state.src[pos - 1] not in _PRECEDES):
        return False
    found = _MENTION.match(state.src, pos, state.posMax)
    if found is None:
        return False
    target = found.group(2)
    wildcard = target.strip().lower() in WILDCARDS
    person = None
    if not wildcard:
        people = state.env.get("people")
        assert isinstance(people, _People)
        person = people.find(target)
        if person is None:
            return False
    if not silent:
        token = state.push("mention", "span", 0)
        token.meta = {
            "silent": found.group(1) == "_",
            "wildcard": target.strip().lower() if wildcard else None,
            "person": person,
        }
    state.pos = found.end()
    return True


def _group_mention_rule(state: StateInline, silent: bool) -> bool:
    """markdown-it inline rule: a group mention at `state.pos`, or nothing."""
    pos = state.pos
    if state.src[pos] != "@" or (pos > 0 and state.src[pos - 1] not in _PRECEDES):
        return False
    found = _GROUP_MENTION.match(state.src, pos, state.posMax)
    if found is None:
        return False
    groups = state.env.get("groups", {})
    assert isinstance(groups, dict)
    group = groups.get(found.group(2))
    if group is None:
        return False
    if not silent:
        token = state.push("group_mention", "span", 0)
        # A deactivated group is shown, silently (Zulip).
        token.meta = {"silent": found.group(1) == "_" or group.deactivated, "group": group}
    state.pos = found.end()
    return True


def _render_group_mention(
    _renderer: Any, tokens: Sequence[Token], idx: int, _options: Any, _env: Any
) -> str:
    meta = tokens[idx].meta
    group: MentionGroup = meta["group"]
    silent: bool = meta["silent"]
    css = "user-group-mention silent" if silent else "user-group-mention"
    prefix = "" if silent else "@"
    name = escapeHtml(group.display_name)
    return f'<span class="{css}" data-user-group-id="{group.id}">{prefix}{name}</span>'


def _render_mention(
    _renderer: Any, tokens: Sequence[Token], idx: int, _options: Any, _env: Any
) -> str:
    meta = tokens[idx].meta
    silent: bool = meta["silent"]
    prefix = "" if silent else "@"
    silent_class = " silent" if silent else ""
    if meta["wildcard"] is not None:
        return (
            f'<span class="user-mention channel-wildcard-mention{silent_class}"'
            f' data-user-id="*">{prefix}{escapeHtml(meta["wildcard"])}</span>'
        )
    person: Person = meta["person"]
    return (
        f'<span class="user-mention{silent_class}" data-user-id="{person.id}">'
        f"{prefix}{escapeHtml(person.full_name)}</span>"
    )


def _make_parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False})
    # Before emphasis, which would otherwise take the `**` of a mention.
    md.inline.ruler.before("emphasis", "mention", _mention_rule)
    md.inline.ruler.before("emphasis", "group_mention", _group_mention_rule)
    md.add_render_rule("mention", _render_mention)
    md.add_render_rule("group_mention", _render_group_mention)
    return md


_PARSER = _make_parser()


def _mentions(tokens: Iterable[Token]) -> Iterable[Token]:
    for token in tokens:
        if token.type in ("mention", "group_mention"):
            yield token
        if token.children:
            yield from _mentions(token.children)


def render(
    content: str, people: Iterable[Person] = (), groups: Iterable[MentionGroup] = ()
) -> Rendered:
    """`content` as HTML (without the trailing newline), and whom it mentions
    among `people` (the realm's active users that `possible_mentions` named)
    and `groups` (the realm's groups `possible_group_mentions` named)."""
    env: dict[str, Any] = {
        "people": _People.of(people),
        "groups": {group.name: group for group in groups},
    }
    tokens = _PARSER.parse(content, env)
    mentioned: set[int] = set()
    mentioned_groups: set[int] = set()
    wildcard = False
    for token in _mentions(tokens):
        if token.meta["silent"]:
            continue
        if token.type == "group_mention":
            mentioned_groups.add(token.meta["group"].id)
        elif token.meta["wildcard"] is not None:
            wildcard = True
        else:
            mentioned.add(token.meta["person"].id)
    html = _PARSER.renderer.render(tokens, _PARSER.options, env)
    return Rendered(html.rstrip("\n"), frozenset(mentioned), wildcard, frozenset(mentioned_groups))


def is_me_message(content: str) -> bool:
    """A `/me` status message: one line starting with `/me ` (Zulip's rule)."""
    return content.startswith("/me ") and "\n" not in content
