"""verify_action for the realm's own events."""

from __future__ import annotations

import pytest

from generation.actions.base import ActionError
from generation.actions.realm import do_set_message_edit_limit, do_set_realm_property
from tests.domain.harness import covers


@covers(("realm", "update"))
def test_realm_properties(domain):
    iago = domain.id("iago")
    for prop, value in (
        ("name", "New name"),
        ("description", "A new description"),
        ("allow_message_editing", False),
        ("mandatory_topics", True),
    ):
        [event] = domain.verify(
            lambda ctx, p=prop, v=value: do_set_realm_property(ctx, iago, domain.realm_id, p, v)
        )
        assert (event["property"], event["value"]) == (prop, value)
    assert domain.fetch()["realm_name"] == "New name"


@covers(("realm", "update_dict"))
def test_message_edit_limit(domain):
    iago = domain.id("iago")
    for seconds in (3600, None):
        domain.verify(
            lambda ctx, s=seconds: do_set_message_edit_limit(ctx, iago, domain.realm_id, s)
        )
    assert domain.fetch()["realm_message_content_edit_limit_seconds"] is None


@covers(("realm", "update"))
def test_an_event_outside_fetch_event_types_changes_nothing(domain):
    iago = domain.id("iago")
    domain.verify(
        lambda ctx: do_set_realm_property(ctx, iago, domain.realm_id, "name", "Elsewhere"),
        fetch_event_types=["message"],
        state_change_expected=False,
    )


def test_only_administrators_change_the_realm(domain):
    with pytest.raises(ActionError, match="Must be an organization administrator"):
        domain.run(
            lambda ctx: do_set_realm_property(
                ctx, domain.id("hamlet"), domain.realm_id, "name", "x"
            )
        )
    with pytest.raises(ActionError, match="Unknown realm property"):
        domain.run(
            lambda ctx: do_set_realm_property(ctx, domain.id("iago"), domain.realm_id, "bogus", 1)
        )
