"""HTTP Basic authentication with Zulip's answers, and the auth cache."""

from __future__ import annotations

import base64
import hashlib
import hmac

import psycopg
import pytest
import requests

from generation import accounts
from generation.config import _api_key_secret, api_key_secret
from tests.support import API_KEY_SECRET, run_eventq, wait_for


def _get(server, authorization: str | None) -> requests.Response:
    headers = {} if authorization is None else {"Authorization": authorization}
    return requests.get(
        f"{server.url}/api/v1/events", params={"dont_block": "true"}, headers=headers, timeout=10
    )


def _basic(email: str, key: str) -> str:
    return "Basic " + base64.b64encode(f"{email}:{key}".encode()).decode()


def test_missing_header_is_401_with_a_basic_challenge(server):
    response = _get(server, None)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == 'Basic realm="zulip"'
    assert response.json() == {
        "result": "error",
        "msg": "Missing authorization header for basic auth",
        "code": "UNAUTHORIZED",
    }


def test_another_scheme_is_400(server):
    response = _get(server, "Bearer abc")
    assert response.status_code == 400
    assert response.json()["msg"] == "This endpoint requires HTTP basic authentication."


def test_undecodable_credentials_are_401(server):
    for header in ("Basic !!!notbase64", "Basic " + base64.b64encode(b"no-colon").decode()):
        response = _get(server, header)
        assert response.status_code == 401
        assert response.json()["msg"] == "Invalid authorization header for basic auth"


def test_wrong_key_or_wrong_email_is_invalid_api_key(server, world):
    user = world.user()
    other = world.user()
    for header in (
        _basic(user.email, "x" * 32),
        _basic(user.email, "short"),
        _basic(other.email, user.api_key),
        _basic(user.email, user.api_key[:8] + other.api_key[8:]),
    ):
        response = _get(server, header)
        assert response.status_code == 401
        assert response.headers["WWW-Authenticate"] == 'Basic realm="zulip"'
        assert response.json() == {
            "result": "error",
            "msg": "Invalid API key",
            "code": "INVALID_API_KEY",
        }


def test_scheme_and_email_are_case_insensitive(server, world):
    user = world.user()
    header = "basic " + base64.b64encode(f"{user.email.upper()}:{user.api_key}".encode()).decode()
    assert _get(server, header).status_code == 200


def test_deactivated_user_and_realm_are_refused(server, world, database_url):
    realm = world.realm()
    user = world.user(realm)
    with psycopg.connect(database_url, autocommit=True) as conn:
        accounts.set_user_active(conn, realm, user.email, False)
    response = _get(server, _basic(user.email, user.api_key))
    assert response.status_code == 401
    assert response.json()["code"] == "USER_DEACTIVATED"
    assert response.json()["msg"] == "Account is deactivated"

    other = world.user(realm)
    with psycopg.connect(database_url, autocommit=True) as conn:
        accounts.set_realm_active(conn, realm, False)
    response = _get(server, _basic(other.email, other.api_key))
    assert response.status_code == 401
    assert response.json()["code"] == "REALM_DEACTIVATED"


def test_rotated_key_replaces_the_old_one(server, world, database_url):
    realm = world.realm()
    user = world.user(realm)
    with psycopg.connect(database_url, autocommit=True) as conn:
        rotated = accounts.rotate_api_key(conn, realm, user.email)
    assert _get(server, _basic(user.email, user.api_key)).status_code == 401
    assert _get(server, _basic(user.email, rotated.api_key)).status_code == 200


def test_a_long_poll_client_costs_one_lookup_per_cache_period(server, world):
    user = world.user()
    header = _basic(user.email, user.api_key)
    before = server.stats()["auth_lookups"]
    for _ in range(5):
        assert _get(server, header).status_code == 200
    assert server.stats()["auth_lookups"] == before + 1


def test_api_keys_are_not_stored_in_the_database(world, database_url):
    user = world.user()
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT u.*::text FROM users u WHERE id = %s", (user.user_id,)
        ).fetchone()
    assert row is not None
    assert user.api_key not in row[0]
    assert user.api_key[8:] not in row[0]


def test_non_ascii_credentials_are_401_not_500(server):
    response = requests.get(
        f"{server.url}/api/v1/events",
        params={"dont_block": "true"},
        headers={"Authorization": "Basic \xe9\xe9\xe9\xe9".encode("latin-1")},
        timeout=10,
    )
    assert response.status_code == 401
    assert response.json()["msg"] == "Invalid authorization header for basic auth"
    utf8 = base64.b64encode("é@x.com:é".encode("latin-1")).decode()
    assert _get(server, f"Basic {utf8}").status_code == 401


def test_a_deactivation_reaches_a_cached_client_within_one_poll(start_server, world, database_url):
    server = start_server(EVENTQ_AUTH_CACHE_SECS="0.2")
    realm = world.realm()
    user = world.user(realm)
    header = _basic(user.email, user.api_key)
    assert _get(server, header).status_code == 200
    with psycopg.connect(database_url, autocommit=True) as conn:
        accounts.set_user_active(conn, realm, user.email, False)
    # Past the cache time the cached user is served once more while it is
    # checked again in the background; the next request is refused.
    refused = wait_for(
        lambda: [r for r in [_get(server, header)] if r.status_code == 401], 10, "the 401"
    )
    assert refused[0].json()["code"] == "USER_DEACTIVATED"


def _stored(database_url: str, user_id: int) -> tuple[bytes, int]:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT api_key_hash, api_key_hash_scheme FROM users WHERE id = %s", (user_id,)
        ).fetchone()
    assert row is not None
    return bytes(row[0]), row[1]


def test_keys_are_stored_as_a_keyed_hash(world, database_url):
    user = world.user()
    stored, scheme = _stored(database_url, user.user_id)
    assert scheme == accounts.HASH_HMAC
    expected = hmac.digest(API_KEY_SECRET.encode(), user.api_key.encode(), "sha256")
    assert stored == expected
    # Not the plain digest: a dump alone cannot be checked against guesses.
    assert stored != hashlib.sha256(user.api_key.encode()).digest()


def test_a_server_with_another_api_key_secret_refuses_the_key(start_server, world):
    server = start_server(EVENTQ_API_KEY_SECRET="another-installation")
    user = world.user()
    response = _get(server, _basic(user.email, user.api_key))
    assert response.status_code == 401
    assert response.json()["code"] == "INVALID_API_KEY"


def test_a_plain_sha256_row_works_once_and_is_rewritten_keyed(server, world, database_url):
    """Rows written before migration 0004 keep working and are upgraded."""
    user = world.user()
    legacy = hashlib.sha256(user.api_key.encode()).digest()
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "UPDATE users SET api_key_hash = %s, api_key_hash_scheme = 1 WHERE id = %s",
            (legacy, user.user_id),
        )
    assert _get(server, _basic(user.email, user.api_key)).status_code == 200
    stored, scheme = _stored(database_url, user.user_id)
    assert (stored, scheme) == (accounts.hash_api_key(user.api_key), accounts.HASH_HMAC)


def test_the_api_key_secret_is_generated_once_per_installation(tmp_path, caplog):
    env = {"EVENTQ_STATE_DIR": str(tmp_path)}
    first = api_key_secret(env)
    path = tmp_path / "api_key_secret"
    assert f"generated a new API key secret in {path}" in caplog.text
    _api_key_secret.cache_clear()  # read the file again, as another process would
    assert api_key_secret(env) == first
    assert path.read_text().strip().encode() == first
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert len(first) >= 40
    configured = "a-configured-secret-value"
    assert api_key_secret({**env, "EVENTQ_API_KEY_SECRET": configured}) == configured.encode()


@pytest.mark.parametrize("value", ["short", "CHANGE-ME-TOO", "change-me-please-really"])
def test_a_placeholder_api_key_secret_is_refused(value, database_url):
    done = run_eventq("serve", EVENTQ_API_KEY_SECRET=value, EVENTQ_DATABASE_URL=database_url)
    assert done.returncode == 2
    assert "EVENTQ_API_KEY_SECRET must be a random value of at least 16 characters" in (done.stderr)


def test_api_keys_never_reach_the_log(server, world):
    user = world.user()
    wrong = "y" * 32
    assert _get(server, _basic(user.email, user.api_key)).status_code == 200
    assert _get(server, _basic(user.email, wrong)).status_code == 401
    log = server.settled_log()  # at DEBUG: every request is logged
    assert user.api_key not in log
    assert wrong not in log
