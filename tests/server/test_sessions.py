"""Browser sessions on the /json/ paths (login, CSRF, several users in one
browser, logout), and the browser's pages and files as HTTP sees them (the
pages in a real browser: tests/browser/)."""

from __future__ import annotations

import http.client
import re
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests

from generation import accounts
from tests.support import ServerProcess, World, external_address, run_eventq, wait_for


def login(server: ServerProcess, user: accounts.CreatedUser, **headers: str) -> requests.Session:
    session = requests.Session()
    response = session.post(
        f"{server.url}/json/login",
        data={"username": user.email, "api_key": user.api_key},
        headers=headers,
        timeout=10,
    )
    assert response.status_code == 200, response.text
    assert response.json()["user_id"] == user.user_id
    return session


def cookie_header(response: requests.Response, name: str) -> str:
    raw = response.raw.headers.getlist("Set-Cookie")
    return next(c for c in raw if c.startswith(f"{name}="))


def test_login_sets_an_httponly_session_and_a_csrf_token(server: ServerProcess, world: World):
    user = world.user()
    session = requests.Session()
    response = session.post(
        f"{server.url}/json/login",
        data={"username": user.email, "api_key": user.api_key},
        timeout=10,
    )
    assert response.status_code == 200, response.text
    assert response.json() == {
        "result": "success",
        "msg": "",
        "user_id": user.user_id,
        "email": user.email,
        "full_name": user.full_name,
    }
    session_cookie = cookie_header(response, "eventq_session")
    assert "HttpOnly" in session_cookie
    assert "SameSite=Lax" in session_cookie
    assert "Path=/" in session_cookie
    csrf_cookie = cookie_header(response, "csrftoken")
    assert "HttpOnly" not in csrf_cookie
    assert "SameSite=Lax" in csrf_cookie
    assert user.api_key not in str(response.headers)

    # The cookie alone authenticates /json/ GETs; /api/v1/ still wants Basic.
    me = session.get(f"{server.url}/json/users/me", timeout=10)
    assert me.status_code == 200, me.text
    assert me.json()["user_id"] == user.user_id
    assert session.get(f"{server.url}/api/v1/users/me", timeout=10).status_code == 401

    # A POST needs the CSRF token in X-CSRFToken.
    token = session.cookies["csrftoken"]
    registered = session.post(
        f"{server.url}/json/register",
        data={"event_types": '["message"]'},
        headers={"X-CSRFToken": token},
        timeout=10,
    )
    assert registered.status_code == 200, registered.text
    queue_id = registered.json()["queue_id"]
    polled = session.get(
        f"{server.url}/json/events",
        params={"queue_id": queue_id, "last_event_id": "-1", "dont_block": "true"},
        timeout=10,
    )
    assert polled.status_code == 200, polled.text


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({}, "CSRF error: CSRF token missing."),
        ({"X-CSRFToken": "x" * 43}, "CSRF error: CSRF token incorrect."),
        (
            {"X-CSRFToken": "<token>", "Origin": "http://evil.example"},
            "CSRF error: Origin checking failed - http://evil.example does not match any"
            " trusted origins.",
        ),
    ],
)
def test_a_post_without_the_right_csrf_token_or_from_another_origin_is_refused(
    server: ServerProcess, world: World, headers: dict[str, str], message: str
):
    session = login(server, world.user())
    if headers.get("X-CSRFToken") == "<token>":
        headers["X-CSRFToken"] = session.cookies["csrftoken"]
    for method, path in (("POST", "register"), ("DELETE", "events"), ("POST", "messages")):
        response = session.request(method, f"{server.url}/json/{path}", headers=headers, timeout=10)
        assert response.status_code == 403, response.text
        assert response.json() == {"result": "error", "msg": message, "code": "CSRF_FAILED"}


def test_cookies_are_secure_when_our_proxy_says_the_browser_used_tls(
    server: ServerProcess, world: World
):
    user = world.user()
    form = {"username": user.email, "api_key": user.api_key}
    url = f"{server.url}/json/login"
    plain = requests.post(url, data=form, timeout=10)
    assert "Secure" not in cookie_header(plain, "eventq_session")
    # From loopback, as our nginx sends it: trusted.
    behind_tls = requests.post(url, data=form, headers={"X-Forwarded-Proto": "https"}, timeout=10)
    assert "Secure" in cookie_header(behind_tls, "eventq_session")
    assert "Secure" in cookie_header(behind_tls, "csrftoken")


def test_a_login_from_another_origin_or_with_a_wrong_key_is_refused(
    server: ServerProcess, world: World
):
    user = world.user()
    url = f"{server.url}/json/login"
    other = requests.post(
        url,
        data={"username": user.email, "api_key": user.api_key},
        headers={"Origin": "http://127.0.0.1:1"},
        timeout=10,
    )
    assert other.status_code == 403
    assert other.json()["code"] == "CSRF_FAILED"
    assert "set-cookie" not in {k.lower() for k in other.headers}
    wrong = requests.post(url, data={"username": user.email, "api_key": "A" * 32}, timeout=10)
    assert wrong.status_code == 401
    assert wrong.json()["code"] == "INVALID_API_KEY"
    missing = requests.post(url, data={"username": user.email}, timeout=10)
    assert missing.status_code == 400
    assert missing.json()["msg"] == "Missing 'api_key' argument"
    # A login from the page's own origin is fine.
    assert login(server, user, Origin=server.url).cookies["eventq_session"]


def test_a_forged_or_tampered_session_is_not_logged_in(server: ServerProcess, world: World):
    user = world.user()
    good = login(server, user).cookies["eventq_session"]
    version, user_id, tag, rest = good.split(".", 3)
    assert (version, int(user_id)) == ("v1", user.user_id)
    assert user.api_key[:8] not in good  # no part of the key
    other = world.user()
    for token in (
        "garbage",
        f"v1.{other.user_id}.{tag}.{rest}",  # another user's id under this signature
        good[:-2] + ("AA" if not good.endswith("AA") else "BB"),
    ):
        response = requests.get(
            f"{server.url}/json/users/me", cookies={"eventq_session": token}, timeout=10
        )
        assert response.status_code == 401, token
        assert response.json()["msg"] == (
            "Not logged in: API authentication or user session required"
        )
        assert response.headers["WWW-Authenticate"] == 'Session realm="zulip"'


def test_a_session_in_the_cache_is_not_an_authorization_header(server: ServerProcess, world: World):
    user = world.user()
    session = login(server, user)
    assert session.get(f"{server.url}/json/users/me", timeout=10).status_code == 200  # cached
    token = session.cookies["eventq_session"]
    _, user_id, tag, generation, _ = token.split(".", 4)
    for header in (
        f"session:{user_id}.{tag}",
        f"session {user_id} {tag} {generation}",
        str(("session", user_id, tag, generation)),
    ):
        for path in ("/api/v1/users/me", "/json/users/me", "/api/v1/events"):
            response = requests.get(
                f"{server.url}{path}", headers={"Authorization": header}, timeout=10
            )
            assert response.status_code in (400, 401), (header, path, response.text)


def test_logout_ends_the_session_a_copied_cookie_included(server: ServerProcess, world: World):
    user = world.user()
    browser = login(server, user)
    copied = requests.Session()
    copied.cookies.update(browser.cookies)
    assert copied.get(f"{server.url}/json/users/me", timeout=10).status_code == 200
    out = browser.post(
        f"{server.url}/json/logout",
        headers={"X-CSRFToken": browser.cookies["csrftoken"]},
        timeout=10,
    )
    assert out.status_code == 200, out.text
    assert "eventq_session" not in browser.cookies
    assert copied.get(f"{server.url}/json/users/me", timeout=10).status_code == 401
    # A new login works again.
    again = login(server, user)
    assert again.get(f"{server.url}/json/users/me", timeout=10).status_code == 200


def test_a_logout_reaches_another_shard_when_its_cache_checks_again(
    start_server: Any, world: World, tmp_path: Path
):
    # Two servers of one installation (the same API key secret and database).
    first = start_server(tmp_path / "first", EVENTQ_AUTH_CACHE_SECS="0.5")
    second = start_server(tmp_path / "second", EVENTQ_AUTH_CACHE_SECS="0.5")
    user = world.user()
    browser = login(first, user)
    me = "/json/users/me"
    assert browser.get(f"{second.url}{me}", timeout=10).status_code == 200  # cached there
    copied = requests.Session()  # the same session, kept aside
    copied.cookies.set("eventq_session", browser.cookies["eventq_session"])
    assert copied.get(f"{second.url}{me}", timeout=10).status_code == 200
    out = browser.post(
        f"{first.url}/json/logout",
        headers={"X-CSRFToken": browser.cookies["csrftoken"]},
        timeout=10,
    )
    assert out.status_code == 200, out.text
    assert copied.get(f"{first.url}{me}", timeout=10).status_code == 401  # at once

    def refused() -> bool:
        return copied.get(f"{second.url}{me}", timeout=10).status_code == 401

    # 30 s: the 0.5 s cache's expiry and one database check, with a wide margin.
    assert wait_for(refused, 30, "the other shard to refuse the session")


def test_credentials_and_tokens_stay_out_of_urls_and_logs(server: ServerProcess, world: World):
    user = world.user()
    in_url = requests.post(
        f"{server.url}/json/login",
        params={"username": user.email, "api_key": user.api_key},
        timeout=10,
    )
    assert in_url.status_code == 400
    assert in_url.json()["msg"] == "Send the API key in the request body, not in the URL"
    # Names percent-encoded (sent as they are: requests would decode them).
    raw = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    raw.request("POST", f"/json/login?username=x&api%5fkey={user.api_key}")
    assert raw.getresponse().status == 400
    raw.close()
    raw = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    raw.request("GET", "/operator/stats?TOK%45N=sekrit-value-456")
    assert raw.getresponse().status == 200
    raw.close()
    requests.get(f"{server.url}/operator/stats?token=sekrit-value-123", timeout=10)
    wait_for(lambda: "/json/login?username=" in server.log(), 10, "the refusal logged")
    wait_for(lambda: "TOK%45N=[redacted]" in server.log(), 10, "the encoded name logged")
    assert user.api_key not in server.settled_log()
    assert "sekrit-value" not in server.settled_log()
    assert "api_key=[redacted]" in server.settled_log()
    assert "api%5fkey=[redacted]" in server.settled_log()
    bad = requests.get(f"{server.url}/json/users/me", headers={"X-Eventq-User": "me"}, timeout=10)
    assert bad.status_code == 400
    assert bad.json()["msg"] == "Invalid X-Eventq-User header: a user id"


def test_rotating_the_api_key_or_deactivating_ends_the_session(
    start_server: Any, world: World, database_url: str
):
    server = start_server(EVENTQ_AUTH_CACHE_SECS="0")
    realm = world.realm()
    user = world.user(realm)
    session = login(server, user)
    assert session.get(f"{server.url}/json/users/me", timeout=10).status_code == 200
    with psycopg.connect(database_url, autocommit=True) as conn:
        accounts.rotate_api_key(conn, realm, user.email)

    # Served once more from the cache while it is checked again, then ended.
    def ended() -> dict[str, Any] | None:
        response = session.get(f"{server.url}/json/users/me", timeout=10)
        return response.json() if response.status_code == 401 else None

    assert wait_for(ended, 10, "the session to end")["code"] == "UNAUTHORIZED"


def test_one_browser_holds_the_sessions_of_two_users(server: ServerProcess, world: World):
    first, second = world.user(), world.user()
    browser = login(server, first)
    response = browser.post(
        f"{server.url}/json/login",
        data={"username": second.email, "api_key": second.api_key},
        timeout=10,
    )
    assert response.status_code == 200
    me = f"{server.url}/json/users/me"
    # The latest login is the default; X-Eventq-User picks either.
    assert browser.get(me, timeout=10).json()["user_id"] == second.user_id
    for user in (first, second):
        picked = browser.get(me, headers={"X-Eventq-User": str(user.user_id)}, timeout=10)
        assert picked.json()["user_id"] == user.user_id
    # Each with its own CSRF token.
    token = browser.cookies[f"csrftoken_{first.user_id}"]
    ok = browser.post(
        f"{server.url}/json/register",
        data={"event_types": '["message"]'},
        headers={"X-Eventq-User": str(first.user_id), "X-CSRFToken": token},
        timeout=10,
    )
    assert ok.status_code == 200, ok.text
    crossed = browser.post(
        f"{server.url}/json/register",
        headers={"X-Eventq-User": str(second.user_id), "X-CSRFToken": token},
        timeout=10,
    )
    assert crossed.status_code == 403
    # A user this browser has no session of is not logged in.
    stranger = browser.get(me, headers={"X-Eventq-User": "999999999"}, timeout=10)
    assert stranger.status_code == 401

    # Logging one out leaves the other.
    out = browser.post(
        f"{server.url}/json/logout",
        headers={
            "X-Eventq-User": str(first.user_id),
            "X-CSRFToken": browser.cookies[f"csrftoken_{first.user_id}"],
        },
        timeout=10,
    )
    assert out.status_code == 200, out.text
    assert f"eventq_session_{first.user_id}" not in browser.cookies
    assert (
        browser.get(me, headers={"X-Eventq-User": str(first.user_id)}, timeout=10).status_code
        == 401
    )
    assert browser.get(me, timeout=10).json()["user_id"] == second.user_id


@pytest.fixture
def demo_server(start_server: Any, database_url: str) -> ServerProcess:
    """A server with the demo on, and the demo realm (as deploy/run.sh does)."""
    created = run_eventq("demo", EVENTQ_DATABASE_URL=database_url)
    assert created.returncode == 0, created.stderr
    return start_server(EVENTQ_DEMO="1")


def test_the_demo_logs_in_without_a_key_only_when_it_is_on(
    demo_server: ServerProcess, server: ServerProcess
):
    users = requests.get(f"{demo_server.url}/json/dev_users", timeout=10).json()["users"]
    emails = [u["email"] for u in users]
    assert "hamlet@demo.example.com" in emails
    browser = requests.Session()
    response = browser.post(
        f"{demo_server.url}/json/dev_login", data={"email": "hamlet@demo.example.com"}, timeout=10
    )
    assert response.status_code == 200, response.text
    me = browser.get(f"{demo_server.url}/json/users/me", timeout=10).json()
    assert me["email"] == "hamlet@demo.example.com"
    unknown = browser.post(
        f"{demo_server.url}/json/dev_login", data={"email": "nobody@example.com"}, timeout=10
    )
    assert unknown.status_code == 400
    rebound = requests.post(
        f"{demo_server.url}/json/dev_login",
        data={"email": "hamlet@demo.example.com"},
        headers={"Host": "attacker.example:80"},
        timeout=10,
    )
    assert rebound.status_code == 403
    assert "eventq_session" not in rebound.cookies
    assert "EVENTQ_DEMO=1: the demo page is on" in demo_server.settled_log()
    page = requests.get(f"{demo_server.url}/demo", timeout=10)
    assert page.status_code == 200
    assert page.headers["Content-Type"] == "text/html; charset=utf-8"
    assert "script-src 'self'" in page.headers["Content-Security-Policy"]

    # The shared server has the demo off: none of it exists there.
    for method, path in (("POST", "/json/dev_login"), ("GET", "/json/dev_users"), ("GET", "/demo")):
        off = requests.request(method, f"{server.url}{path}", data={"email": "x"}, timeout=10)
        assert off.status_code == 404, path
        assert off.json()["result"] == "error"


def test_the_client_library_and_the_pages_scripts_are_served(server: ServerProcess):
    for name, content_type, marker in (
        ("eventq.js", "text/javascript; charset=utf-8", "export"),
        ("eventq.d.ts", "text/plain; charset=utf-8", "export"),
        ("operator.js", "text/javascript; charset=utf-8", "/operator/stats"),
        ("demo.js", "text/javascript; charset=utf-8", "dev_login"),
        ("style.css", "text/css; charset=utf-8", "{"),
    ):
        response = requests.get(f"{server.url}/static/{name}", timeout=10)
        assert response.status_code == 200, name
        assert response.headers["Content-Type"] == content_type
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        assert marker in response.text, name
    # Revalidated cheaply: the same file again is a 304.
    first = requests.get(f"{server.url}/static/eventq.js", timeout=10)
    etag = first.headers["ETag"]
    again = requests.get(
        f"{server.url}/static/eventq.js", headers={"If-None-Match": etag}, timeout=10
    )
    assert again.status_code == 304
    assert again.content == b""
    head = requests.head(f"{server.url}/static/eventq.js", timeout=10)
    assert head.headers["ETag"] == etag  # of the file, not of HEAD's empty body
    assert int(head.headers["Content-Length"]) == len(first.content)
    missing = requests.get(f"{server.url}/static/../server/app.py", timeout=10)
    assert missing.status_code == 404
    assert requests.get(f"{server.url}/static/secret.py", timeout=10).json()["code"] == "NOT_FOUND"


def test_the_operator_pages_answer_this_machine_and_refuse_an_outsider(
    start_server: Any, tmp_path: Path
):
    address = external_address()
    if address is None:
        pytest.fail("this machine has no non-loopback address to call from")
    report = tmp_path / "analytics" / "report"
    report.mkdir(parents=True)
    (report / "report.html").write_text("<html><body>the report</body></html>")
    token = "t" * 32
    server = start_server(
        EVENTQ_HOST="0.0.0.0",
        EVENTQ_OPERATOR_TOKEN=token,
        EVENTQ_ANALYTICS_DIR=str(tmp_path / "analytics"),
    )
    page = requests.get(f"{server.url}/operator", timeout=10)
    assert page.status_code == 200
    assert "operator.js" in page.text
    stats = requests.get(f"{server.url}/operator/stats", timeout=10).json()
    assert stats["result"] == "success"
    assert {"queues", "parked", "events_sent", "loop_lag_ms", "dead_lettered"} <= set(stats)
    assert stats["report"] is True
    shown = requests.get(f"{server.url}/operator/report/", timeout=10)
    assert shown.text == "<html><body>the report</body></html>"
    assert "script-src" not in shown.headers["Content-Security-Policy"]
    assert "default-src 'none'" in shown.headers["Content-Security-Policy"]
    # This machine, but under a name that is not the server's: a page that
    # pointed its own name here (DNS rebinding).
    rebound = requests.get(
        f"{server.url}/operator/stats", headers={"Host": "evil.example"}, timeout=10
    )
    assert rebound.status_code == 403
    assert rebound.json()["msg"].startswith("Unknown host 'evil.example'")
    wrong_token = requests.get(f"{server.url}/operator?token=nope", timeout=10)
    assert wrong_token.status_code == 403
    assert requests.get(f"{server.url}/operator/report/..%2Fx.html", timeout=10).status_code == 404

    outside = f"http://{address}:{server.port}"
    for path in ("/operator", "/operator/stats", "/operator/report/report.html"):
        refused = requests.get(f"{outside}{path}", timeout=10)
        assert refused.status_code == 403, path
        assert refused.json()["code"] == "UNAUTHORIZED"
    wait_for(lambda: "operator page /operator refused to" in server.log(), 30, "the refusal logged")
    wrong = requests.get(
        f"{outside}/operator/stats", headers={"Authorization": "Bearer x"}, timeout=10
    )
    assert wrong.status_code == 403
    bearer = requests.get(
        f"{outside}/operator/stats", headers={"Authorization": f"Bearer {token}"}, timeout=10
    )
    assert bearer.status_code == 200
    browser = requests.Session()
    visit = browser.get(f"{outside}/operator?token={token}", timeout=10)
    assert visit.status_code == 200  # redirected to /operator, the token in a cookie
    assert visit.url == f"{outside}/operator"
    assert browser.get(f"{outside}/operator/stats", timeout=10).status_code == 200
    assert re.search(r"eventq_operator=.*HttpOnly", str(visit.history[0].headers))


def test_only_the_operator_page_takes_the_token_in_its_address(start_server: Any):
    address = external_address()
    if address is None:
        pytest.fail("this machine has no non-loopback address to call from")
    token = "u" * 32
    server = start_server(EVENTQ_HOST="0.0.0.0", EVENTQ_OPERATOR_TOKEN=token)
    outside = f"http://{address}:{server.port}"
    # The right token, but in the address of a path that does not move it
    # into a cookie: refused, as without it.
    for path in ("/operator/stats", "/operator/report/", "/operator/report/report.html"):
        refused = requests.get(f"{outside}{path}?token={token}", timeout=10)
        assert refused.status_code == 403, path
        assert refused.json()["code"] == "UNAUTHORIZED", path
    # The page takes it and sets the cookie, which the other paths take.
    browser = requests.Session()
    visit = browser.get(f"{outside}/operator?token={token}", allow_redirects=False, timeout=10)
    assert visit.status_code == 303
    assert browser.get(f"{outside}/operator/stats", timeout=10).status_code == 200
    assert token not in server.settled_log()
