"""Every event type is declared once, with every fact about it
(docs/event-types.md): its schema per op, the register sections that apply
it or why it is transient, and its capability rule or none. Each check is a
function over declarations, run on the real ones and, to prove it can fail,
on a small fake."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterable, Mapping
from typing import Any, Literal, NotRequired, TypedDict

import pytest

from apply_events.engine import apply_events
from apply_events.section import Section
from apply_events.sections import SECTIONS
from apply_events.state import Event, State, StateContext
from generation.events import CATALOGUE, CLIENT_RULES, EVENT_TYPES, TRANSIENT
from generation.events.declaration import ClientRule, EventType, Transient, client_rules, index
from queues.client import CAPABILITIES, QueueOptions
from queues.specialize import FORMS
from tests.domain import harness
from tests.queues.helpers import client_events, make_registry, options

# -- the checks ------------------------------------------------------------------


def _literal(schema: type, key: str) -> tuple[object, ...] | None:
    """The values a TypedDict's `key` may take if it is a Literal, else None."""
    hints = typing.get_type_hints(schema)
    if key not in hints or typing.get_origin(hints[key]) is not Literal:
        return None
    return typing.get_args(hints[key])


def schema_problems(event_type: EventType) -> list[str]:
    """A schema per op, each a TypedDict of this type and op."""
    name = event_type.name
    if not event_type.schemas:
        return [f"{name}: no schema"]
    problems = []
    for op, schema in event_type.schemas.items():
        if not typing.is_typeddict(schema):
            problems.append(f"{name}/{op}: schema {schema!r} is not a TypedDict")
            continue
        if _literal(schema, "type") != (name,):
            problems.append(f"{name}/{op}: {schema.__name__}'s `type` is not Literal[{name!r}]")
        if op is None and "op" in typing.get_type_hints(schema):
            problems.append(f"{name}: {schema.__name__} has an `op` but is declared without")
        if op is not None and _literal(schema, "op") != (op,):
            problems.append(f"{name}/{op}: {schema.__name__}'s `op` is not Literal[{op!r}]")
    return problems


def state_problems(types: Mapping[str, EventType], sections: Iterable[Section]) -> list[str]:
    """Transient with a reason, or sections that each have an applier for the
    type; and no section applies a type not declared stateful for it."""
    by_name = {section.name: section for section in sections}
    problems = []
    for name, event_type in types.items():
        state = event_type.state
        if isinstance(state, Transient):
            if not state.reason.strip():
                problems.append(f"{name}: transient without a reason")
            continue
        if not isinstance(state, tuple) or not state:
            problems.append(f"{name}: neither state sections nor Transient: {state!r}")
            continue
        for section_name in state:
            section = by_name.get(section_name)
            if section is None:
                problems.append(f"{name}: names state section {section_name!r}, which is not one")
            elif name not in section.appliers:
                problems.append(f"{name}: section {section_name!r} has no applier for it")
    for section in by_name.values():
        for applied in section.appliers:
            declared = types.get(applied)
            if declared is None:
                problems.append(f"section {section.name!r} applies {applied!r}, not declared")
            elif isinstance(declared.state, Transient) or section.name not in declared.state:
                problems.append(
                    f"section {section.name!r} applies {applied!r}, "
                    "whose declaration does not name that section"
                )
    return problems


def capability_problems(types: Mapping[str, EventType]) -> list[str]:
    """None, or a rule naming a capability queues knows (or a boolean register
    option), forms queues can build, and keys the type's schemas have."""
    problems = []
    option_flags = {
        field.name
        for field in dataclasses.fields(QueueOptions)
        if isinstance(getattr(QueueOptions(), field.name), bool)
    }
    for name, event_type in types.items():
        for rule in event_type.rules():
            problems.extend(_rule_problems(types, name, event_type, rule, option_flags))
    try:
        client_rules(types)
    except ValueError as exc:
        problems.append(str(exc))
    return problems


def _rule_problems(
    types: Mapping[str, EventType],
    name: str,
    event_type: EventType,
    rule: ClientRule,
    option_flags: set[str],
) -> list[str]:
    problems = []
    if rule.option and rule.name not in option_flags:
        problems.append(f"{name}: {rule.name!r} is not a boolean register option")
    if not rule.option and rule.name not in CAPABILITIES:
        problems.append(f"{name}: {rule.name!r} is not in queues.client.CAPABILITIES")
    for form in (rule.with_it, rule.without_it):
        if form not in FORMS:
            problems.append(f"{name}: form {form!r} is not in queues.specialize.FORMS")
    if rule.with_it == rule.without_it:
        problems.append(f"{name}: the rule on {rule.name!r} changes nothing")
    if rule.when_key is not None and not any(
        rule.when_key in typing.get_type_hints(schema) for schema in event_type.schemas.values()
    ):
        problems.append(f"{name}: when_key {rule.when_key!r} is in none of its schemas")
    for legacy in rule.legacy_types:
        if legacy in types:
            problems.append(f"{name}: legacy type {legacy!r} is declared itself")
    if name == "message" and not rule.legacy_types:
        # queues builds the forms of a message itself (flags, Markdown)
        problems.append("message: queues takes no capability rule for messages")
    return problems


# -- the real declarations -------------------------------------------------------


def test_an_event_type_cannot_be_declared_without_any_of_its_facts():
    for field in dataclasses.fields(EventType):
        assert field.default is dataclasses.MISSING, field.name
        assert field.default_factory is dataclasses.MISSING, field.name
    with pytest.raises(TypeError, match="capability"):
        EventType("x", {None: _FakeEvent}, state=Transient("fake"))  # type: ignore[call-arg]


@pytest.mark.parametrize("name", sorted(EVENT_TYPES))
def test_each_declared_type_has_its_schemas(name):
    assert schema_problems(EVENT_TYPES[name]) == []


def test_state_sections_and_declarations_agree():
    assert state_problems(EVENT_TYPES, SECTIONS) == []


def test_capability_rules_name_what_queues_knows():
    assert capability_problems(EVENT_TYPES) == []


def test_the_catalogue_and_the_rules_derive_from_the_declarations():
    assert {
        (t.name, op): schema for t in EVENT_TYPES.values() for op, schema in t.schemas.items()
    } == CATALOGUE
    assert client_rules(EVENT_TYPES) == CLIENT_RULES
    assert {"typing", "delete_message", "presence", "update_display_settings"} <= set(CLIENT_RULES)
    assert {"heartbeat", "restart", "reaction", "typing"} <= TRANSIENT


def test_an_emitted_event_of_an_undeclared_type_fails_verify_action():
    """verify_action (tests/domain) validates every event an action emits
    against the catalogue, so an action cannot emit a type that is not
    declared; tests/domain/test_event_coverage.py checks the other way, that
    every declared kind has a verify_action test."""
    harness.check_schema({"id": 0, "type": "typing", "op": "stop", **_TYPING})
    with pytest.raises(AssertionError, match="not in the catalogue"):
        harness.check_schema({"id": 0, "type": "undeclared_type"})


def test_the_registry_delivers_by_the_declared_rules():
    """The legacy settings events' rule (the others have their own tests in
    tests/queues and tests/domain): only to clients without the settings
    object, and `user_settings` itself to every client."""
    registry = make_registry()
    legacy = registry.allocate(1, 1, options(), 0.0)
    modern = registry.allocate(1, 1, options(capabilities=frozenset({"user_settings_object"})), 0.0)
    for event_type in ("update_display_settings", "update_global_notifications"):
        registry.deliver({"type": event_type, "setting": True}, [1], 1, 1.0)
    registry.deliver({"type": "user_settings", "op": "update"}, [1], 1, 2.0)

    assert [e["type"] for e in client_events(legacy)] == [
        "update_display_settings",
        "update_global_notifications",
        "user_settings",
    ]
    assert [e["type"] for e in client_events(modern)] == ["user_settings"]


def test_the_engine_never_applies_a_transient_type():
    applied: list[str] = []
    section = Section(
        "fake",
        _fetch,
        {"typing": lambda state, event, ctx: applied.append("typing")},
    )
    ctx = StateContext(user_id=1, realm_id=1, queue_id="q0")
    apply_events({}, [{"type": "typing", "op": "start"}], lambda _: True, ctx, sections=[section])
    assert applied == []


# -- each check can fail ---------------------------------------------------------


class _FakeEvent(TypedDict):
    id: int
    type: Literal["fake"]
    stream_id: NotRequired[int]


class _FakeOtherEvent(TypedDict):
    id: int
    type: Literal["other"]


class _FakeOpEvent(TypedDict):
    id: int
    type: Literal["fake"]
    op: Literal["add"]


_TYPING = {"message_type": "direct", "sender": {"user_id": 1, "email": "a@example.com"}}


async def _fetch(conn: Any, ctx: StateContext) -> State:
    return {}


def _apply(state: State, event: Event, ctx: StateContext) -> None:
    pass


def _fake(**changes: Any) -> EventType:
    base = EventType("fake", {None: _FakeEvent}, state=("fake",), capability=None)
    return dataclasses.replace(base, **changes)


@pytest.mark.parametrize(
    ("declaration", "problem"),
    [
        (_fake(schemas={}), "no schema"),
        (_fake(schemas={None: dict}), "is not a TypedDict"),
        (_fake(schemas={None: _FakeOtherEvent}), "`type` is not Literal['fake']"),
        (_fake(schemas={"add": _FakeEvent}), "`op` is not Literal['add']"),
        (_fake(schemas={None: _FakeOpEvent}), "has an `op` but is declared without"),
    ],
)
def test_schema_check_fails_on_a_bad_declaration(declaration, problem):
    assert any(problem in found for found in schema_problems(declaration))


_SECTION = Section("fake", _fetch, {"fake": _apply})


@pytest.mark.parametrize(
    ("declaration", "sections", "problem"),
    [
        (_fake(state=Transient(" ")), [], "transient without a reason"),
        (_fake(state=()), [_SECTION], "neither state sections nor Transient"),
        (_fake(state=("nowhere",)), [_SECTION], "which is not one"),
        (_fake(), [Section("fake", _fetch)], "has no applier for it"),
        (_fake(state=Transient("fake")), [_SECTION], "does not name that section"),
        (_fake(), [_SECTION, Section("other", _fetch, {"fake": _apply})], "not name that section"),
        (_fake(), [_SECTION, Section("other", _fetch, {"ghost": _apply})], "'ghost', not declared"),
    ],
)
def test_state_check_fails_on_a_bad_declaration(declaration, sections, problem):
    found = state_problems({"fake": declaration}, sections)
    assert any(problem in line for line in found), found


@pytest.mark.parametrize(
    ("rule", "problem"),
    [
        (ClientRule("time_travel", without_it="dropped"), "not in queues.client.CAPABILITIES"),
        (ClientRule("time_travel", option=True, with_it="dropped"), "not a boolean register"),
        (ClientRule("bulk_message_deletion", without_it="shredded"), "not in queues.specialize"),  # type: ignore[arg-type]
        (ClientRule("bulk_message_deletion"), "changes nothing"),
        (
            ClientRule("bulk_message_deletion", without_it="dropped", when_key="topic"),
            "in none of its schemas",
        ),
        (
            ClientRule("bulk_message_deletion", without_it="dropped", legacy_types=("typing",)),
            "'typing' is declared itself",
        ),
    ],
)
def test_capability_check_fails_on_a_bad_rule(rule, problem):
    types = {**EVENT_TYPES, "fake": _fake(capability=rule)}
    found = capability_problems(types)
    assert any(problem in line for line in found), found


def test_capability_check_fails_on_two_rules_for_one_type_and_on_messages():
    twice = _fake(
        capability=ClientRule("user_settings_object", with_it="dropped", legacy_types=("x", "y"))
    )
    other = dataclasses.replace(twice, name="other")
    found = capability_problems({"fake": twice, "other": other})
    assert any("'x' is governed by two declarations' rules" in line for line in found), found

    message = dataclasses.replace(
        EVENT_TYPES["message"], capability=ClientRule("bulk_message_deletion", with_it="dropped")
    )
    found = capability_problems({"message": message})
    assert any("no capability rule for messages" in line for line in found), found


def test_a_type_declared_twice_is_refused():
    with pytest.raises(ValueError, match="declared twice"):
        index((_fake(), _fake()))
