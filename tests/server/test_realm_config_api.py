"""The realm's configuration over HTTP against the real server: custom emoji
(a multipart upload, its image served at `source_url`), linkifiers, code
playgrounds and domains; the events other clients see, what register
answers, and bad input (4xx JSON, never 500)."""

from __future__ import annotations

import requests

from tests.support import Api, error, ok, wait_for

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 40
GIF = b"GIF89a" + b"\x00" * 40
# Zulip requires `notification_settings_null` in every client_capabilities.
MODERN = {"notification_settings_null": False, "linkifier_url_template": True}


def clients(server, domain, *names: str, prefix: str = "/api/v1") -> list[Api]:
    return [Api(server, domain.accounts[name], prefix) for name in names]


def wait_events(client: Api, queue_id: str, count: int) -> list[dict]:
    """The first `count` events of a queue (waiting for them to arrive)."""
    return wait_for(
        lambda: (events := client.events(queue_id, -1)) and len(events) >= count and events,
        what=f"{count} events on {queue_id}",
    )


def upload(client: Api, name: str, *files: tuple[str, bytes]) -> requests.Response:
    url = f"{client.server.url}{client.prefix}/realm/emoji/{name}"
    return client.session.post(
        url, files=[(field, (f"{field}.bin", body)) for field, body in files], timeout=30
    )


def test_custom_emoji_are_uploaded_listed_served_and_deactivated(server, domain):
    hamlet, othello, polonius = clients(server, domain, "hamlet", "othello", "polonius")
    queue = othello.register(event_types=["realm_emoji"])["queue_id"]

    ok(upload(hamlet, "green tick", ("file", PNG)))
    [event] = wait_events(othello, queue, 1)
    [emoji] = event["realm_emoji"].values()
    assert (event["type"], event["op"]) == ("realm_emoji", "update")
    assert (emoji["name"], emoji["author_id"]) == ("green_tick", domain.id("hamlet"))
    listed = ok(othello.request("GET", "realm/emoji"))["emoji"]
    assert listed == event["realm_emoji"]
    assert othello.register(fetch_event_types=["realm_emoji"])["realm_emoji"] == listed

    # The image, as uploaded, to anyone who has its URL (as Zulip's).
    image = requests.get(server.url + emoji["source_url"], timeout=10)
    assert image.status_code == 200
    assert (image.headers["Content-Type"], image.content) == ("image/png", PNG)
    assert "immutable" in image.headers["Cache-Control"]
    assert image.headers["X-Content-Type-Options"] == "nosniff"
    wrong_realm = emoji["source_url"].replace(f"/{domain.realm_id}/", f"/{domain.realm_id + 1}/")
    assert requests.get(server.url + wrong_realm, timeout=10).status_code == 404

    msg = error(upload(hamlet, "green_tick", ("file", GIF)))["msg"]
    assert msg == "A custom emoji with this name already exists."
    assert error(othello.request("DELETE", "realm/emoji/green_tick"))["msg"] == (
        "Must be an organization administrator or emoji author"
    )
    ok(hamlet.request("DELETE", "realm/emoji/green_tick"))
    [_, event] = wait_events(othello, queue, 2)
    assert event["realm_emoji"][emoji["id"]]["deactivated"] is True
    # A deactivated emoji's image is still served: old messages show it.
    assert requests.get(server.url + emoji["source_url"], timeout=10).status_code == 200

    assert error(upload(polonius, "party", ("file", GIF)), 403)["msg"] == (
        "Not allowed for guest users"
    )
    for client in (hamlet, othello, polonius):
        client.close()


def test_emoji_uploads_that_are_refused(server, domain):
    [hamlet] = clients(server, domain, "hamlet", prefix="/json")
    exactly_one = "You must upload exactly one file."
    assert error(hamlet.request("POST", "realm/emoji/smile"))["msg"] == exactly_one
    no_boundary = hamlet.session.post(
        f"{server.url}/json/realm/emoji/smile", headers={"Content-Type": "multipart/form-data"}
    )
    assert error(no_boundary)["msg"].startswith("Malformed request body")
    assert error(upload(hamlet, "smile", ("a", PNG), ("b", PNG)))["msg"] == exactly_one
    assert error(upload(hamlet, "smile", ("file", b"<svg></svg>")))["msg"] == (
        "Invalid image format"
    )
    too_big = PNG + b"\x00" * (512 * 1024)
    assert "allowed limit of 512 KiB" in error(upload(hamlet, "smile", ("file", too_big)))["msg"]
    assert (
        "must end with either a letter or digit"
        in (error(upload(hamlet, "smile_", ("file", PNG)))["msg"])
    )
    assert "lowercase English letters" in error(upload(hamlet, "Smile", ("file", PNG)))["msg"]
    assert error(hamlet.request("DELETE", "realm/emoji/nothing"))["msg"] == (
        "Emoji 'nothing' does not exist"
    )
    hamlet.close()


def test_linkifiers_reach_only_clients_that_read_url_templates(server, domain):
    iago, hamlet = clients(server, domain, "iago", "hamlet")
    modern = hamlet.register(event_types=["realm_linkifiers"], client_capabilities=MODERN)
    legacy = hamlet.register(event_types=["realm_linkifiers", "realm_emoji"])

    first = ok(
        iago.request(
            "POST",
            "realm/filters",
            pattern="#(?P<id>[0-9]+)",
            url_template="https://trac.example.com/ticket/{id}",
        )
    )["id"]
    second = ok(
        iago.request(
            "POST", "realm/filters", pattern="PR(?P<id>[0-9]+)", url_template="https://p/{id}"
        )
    )["id"]
    ok(iago.request("PATCH", f"realm/filters/{first}", pattern="T(?P<id>[0-9]+)",
                    url_template="https://t/{id}"))  # fmt: skip
    ok(iago.request("PATCH", "realm/linkifiers", ordered_linkifier_ids=[second, first]))
    ok(iago.request("DELETE", f"realm/filters/{second}"))

    events = wait_events(hamlet, modern["queue_id"], 5)
    assert [[x["id"] for x in e["realm_linkifiers"]] for e in events] == [
        [first], [first, second], [first, second], [second, first], [first],
    ]  # fmt: skip
    assert events[2]["realm_linkifiers"][0]["pattern"] == "T(?P<id>[0-9]+)"
    listed = ok(hamlet.request("GET", "realm/linkifiers"))["linkifiers"]
    assert listed == events[-1]["realm_linkifiers"]
    # The client without the capability got nothing, and registers none.
    assert hamlet.events(legacy["queue_id"], -1) == []
    state = hamlet.register(fetch_event_types=["realm_linkifiers", "realm_filters"])
    assert (state["realm_linkifiers"], state["realm_filters"]) == ([], [])
    state = hamlet.register(fetch_event_types=["realm_linkifiers"], client_capabilities=MODERN)
    assert state["realm_linkifiers"] == listed

    assert error(iago.request("POST", "realm/filters", pattern="(", url_template="https://x"))[
        "msg"
    ].startswith("Bad regular expression: ")
    assert (
        error(
            iago.request("POST", "realm/filters", pattern="x(?P<a>.)", url_template="https://x/{b}")
        )["msg"]
        == "Group 'b' in URL template is not present in linkifier pattern."
    )
    assert error(iago.request("DELETE", f"realm/filters/{second}"))["msg"] == (
        "Linkifier not found."
    )
    assert error(iago.request("PATCH", "realm/linkifiers", ordered_linkifier_ids=[]))["msg"] == (
        "The ordered list must enumerate all existing linkifiers exactly once"
    )
    assert error(iago.request("PATCH", "realm/linkifiers", ordered_linkifier_ids="[1, true]"))[
        "msg"
    ] == ("ordered_linkifier_ids[1] is not an integer")
    refused = hamlet.request("POST", "realm/filters", pattern="x", url_template="https://x")
    assert error(refused, 403)["msg"] == "Must be an organization administrator"
    iago.close()
    hamlet.close()


def test_code_playgrounds_are_added_and_removed(server, domain):
    iago, othello = clients(server, domain, "iago", "othello")
    queue = othello.register(event_types=["realm_playgrounds"])["queue_id"]
    added = ok(
        iago.request(
            "POST",
            "realm/playgrounds",
            name="Python",
            pygments_language="python",
            url_template="https://python.example.com?code={code}",
        )
    )
    ok(iago.request("DELETE", f"realm/playgrounds/{added['id']}"))
    [add, remove] = wait_events(othello, queue, 2)
    assert add["realm_playgrounds"] == [
        {
            "id": added["id"],
            "name": "Python",
            "pygments_language": "python",
            "url_template": "https://python.example.com?code={code}",
        }
    ]
    assert remove["realm_playgrounds"] == []
    assert othello.register(fetch_event_types=["realm_playgrounds"])["realm_playgrounds"] == []

    assert error(iago.request("DELETE", f"realm/playgrounds/{added['id']}"))["msg"] == (
        "Invalid playground"
    )
    bad = iago.request("POST", "realm/playgrounds", name="P", pygments_language="py thon",
                       url_template="https://p/{code}")  # fmt: skip
    assert error(bad)["msg"] == "Invalid characters in pygments language"
    missing = iago.request("POST", "realm/playgrounds", name="P", pygments_language="py")
    assert error(missing)["code"] == "REQUEST_VARIABLE_MISSING"
    iago.close()
    othello.close()


def test_domains_are_added_changed_and_removed(server, domain):
    iago, hamlet = clients(server, domain, "iago", "hamlet")
    queue = hamlet.register(event_types=["realm_domains"])["queue_id"]
    answer = ok(iago.request("POST", "realm/domains", domain="Example.com", allow_subdomains=False))
    assert answer["new_domain"][1] == "example.com"
    ok(iago.request("PATCH", "realm/domains/example.com", allow_subdomains=True))
    ok(iago.request("POST", "realm/domains", domain="zulip.org", allow_subdomains=False))
    ok(iago.request("DELETE", "realm/domains/zulip.org"))
    events = wait_events(hamlet, queue, 4)
    assert [e["op"] for e in events] == ["add", "change", "add", "remove"]
    assert events[1]["realm_domain"] == {"domain": "example.com", "allow_subdomains": True}
    listed = ok(hamlet.request("GET", "realm/domains"))["domains"]
    assert listed == [{"domain": "example.com", "allow_subdomains": True}]
    assert hamlet.register(fetch_event_types=["realm_domains"])["realm_domains"] == listed

    assert error(iago.request("POST", "realm/domains", domain="localhost",
                              allow_subdomains=False))["msg"] == (
        "Invalid domain: Domain must have at least one dot (.)"
    )  # fmt: skip
    assert error(iago.request("DELETE", "realm/domains/nowhere.com"))["msg"] == (
        "No entry found for domain nowhere.com."
    )
    refused = hamlet.request("PATCH", "realm/domains/example.com", allow_subdomains=False)
    assert error(refused, 403)["msg"] == "Must be an organization administrator"
    assert error(iago.request("PATCH", "realm/domains/example.com"))["code"] == (
        "REQUEST_VARIABLE_MISSING"
    )
    iago.close()
    hamlet.close()


def test_the_zulip_client_manages_emoji_and_linkifiers(server, domain, tmp_path):
    from tests.support import zulip_client

    iago = zulip_client(server, domain.accounts["iago"])
    image = tmp_path / "tick.gif"
    image.write_bytes(GIF)
    with image.open("rb") as file:
        assert iago.upload_custom_emoji("tick", file)["result"] == "success"
    [emoji] = iago.get_realm_emoji()["emoji"].values()
    assert (emoji["name"], emoji["source_url"].endswith(".gif")) == ("tick", True)
    assert iago.delete_custom_emoji("tick")["result"] == "success"

    added = iago.add_realm_filter("#(?P<id>[0-9]+)", "https://example.com/ticket/{id}")
    assert added["result"] == "success"
    assert iago.get_realm_linkifiers()["linkifiers"] == [
        {"id": added["id"], "pattern": "#(?P<id>[0-9]+)",
         "url_template": "https://example.com/ticket/{id}"},
    ]  # fmt: skip
    assert iago.remove_realm_filter(added["id"])["result"] == "success"
    assert iago.get_realm_linkifiers()["linkifiers"] == []
