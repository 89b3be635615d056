"""ClientDescriptor and QueueOptions: acceptance, expiry and the saved form."""

from __future__ import annotations

import pytest

from generation.events import CLIENT_RULES
from queues.client import ClientDescriptor, QueueOptions
from queues.event_queue import EventQueue
from queues.narrow import parse_narrow
from tests.queues.helpers import FakeWaiter, encode, options


def test_idle_client_expires_at_exactly_its_lifespan():
    client = ClientDescriptor("q0", 1, 1, options(lifespan_secs=60.0), 100.0, EventQueue(encode))

    assert not client.expired(159.9)
    assert client.expired(160.0)


def test_client_with_a_parked_request_never_expires():
    client = ClientDescriptor("q0", 1, 1, options(lifespan_secs=60.0), 0.0, EventQueue(encode))
    client.waiter = FakeWaiter()

    assert not client.expired(1e9)


def test_accepts_follows_event_types_and_channel_typing_capability():
    plain = ClientDescriptor("q0", 1, 1, options(), 0.0, EventQueue(encode))
    typing_only = ClientDescriptor(
        "q1", 1, 1, options(event_types=["typing"]), 0.0, EventQueue(encode)
    )

    # the rule the registry passes for typing events (declared with the type)
    typing = CLIENT_RULES["typing"]

    assert plain.accepts("anything", {})
    assert plain.accepts("typing", {"recipients": []}, typing)
    assert not plain.accepts("typing", {"stream_id": 3}, typing)
    assert typing_only.accepts("typing", {}, typing)
    assert not typing_only.accepts("message", {})


def test_options_round_trip_through_their_saved_form():
    original = QueueOptions(
        event_types=frozenset({"message", "realm"}),
        narrow=parse_narrow([["stream", "denmark"]]),
        all_public_streams=True,
        apply_markdown=True,
        client_gravatar=True,
        slim_presence=True,
        capabilities=frozenset({"bulk_message_deletion"}),
        lifespan_secs=120.0,
        client_name="ZulipMobile",
    )

    assert QueueOptions.from_dict(original.to_dict()) == original


def test_saved_options_missing_keys_take_defaults_and_unknown_capabilities_drop():
    loaded = QueueOptions.from_dict({"capabilities": ["bulk_message_deletion", "time_travel"]})

    assert loaded == QueueOptions(capabilities=frozenset({"bulk_message_deletion"}))
    assert loaded.event_types is None
    assert loaded.lifespan_secs == 600.0


def test_descriptor_saved_form_stores_ages_not_clock_values():
    client = ClientDescriptor("q0", 1, 2, options(), 100.0, EventQueue(encode))
    client.last_active = 150.0

    saved = client.to_dict(200.0)
    loaded = ClientDescriptor.from_dict(saved, 10_000.0, encode)

    assert (saved["idle_secs"], saved["age_secs"]) == (50.0, 100.0)
    assert (loaded.last_active, loaded.created_at) == (9_950.0, 9_900.0)
    assert (loaded.queue_id, loaded.user_id, loaded.realm_id) == ("q0", 1, 2)
    assert loaded.waiter is None


def test_queues_saved_together_share_each_distinct_options_form():
    mobile = {"client_name": "ZulipMobile"}
    clients = [
        ClientDescriptor(
            f"q{n}", n, 2, options(**(mobile if n % 2 else {})), 0.0, EventQueue(encode)
        )
        for n in range(4)
    ]
    forms: dict[QueueOptions, dict[str, object]] = {}

    together = [client.to_dict(5.0, forms) for client in clients]

    assert together == [client.to_dict(5.0) for client in clients]
    # Equal options made apart (not the same object) share one form.
    assert clients[1].options is not clients[3].options
    assert len(forms) == 2
    assert together[1]["options"] is together[3]["options"]


def test_descriptor_with_bad_options_names_the_queue():
    saved = ClientDescriptor("q7", 1, 2, options(), 0.0, EventQueue(encode)).to_dict(0.0)
    saved["options"]["narrow"] = [["is", "followed"]]

    with pytest.raises(ValueError, match=r"^queue q7: Operand followed not supported\.$"):
        ClientDescriptor.from_dict(saved, 0.0, encode)


def test_messages_kept_for_the_missed_message_hook_survive_a_restart():
    client = ClientDescriptor("q1", 1, 2, options(), 0.0, EventQueue(encode))
    assert "notifiable" not in client.to_dict(0.0)  # nothing saved when there is nothing
    client.notifiable = [(3, 40, 1), (5, 41, 3)]

    loaded = ClientDescriptor.from_dict(client.to_dict(0.0), 0.0, encode)

    assert loaded.notifiable == [(3, 40, 1), (5, 41, 3)]


@pytest.mark.parametrize("bad", [[[1, 2]], [["1", 2, 3]], [[1, 2, True]], {"1": 2}])
def test_a_malformed_missed_message_list_names_the_queue(bad):
    saved = ClientDescriptor("q8", 1, 2, options(), 0.0, EventQueue(encode)).to_dict(0.0)
    saved["notifiable"] = bad

    with pytest.raises(ValueError, match=r"^queue q8: notifiable is not a list"):
        ClientDescriptor.from_dict(saved, 0.0, encode)
