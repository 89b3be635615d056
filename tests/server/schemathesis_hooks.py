"""A schemathesis check of our own (loaded with SCHEMATHESIS_HOOKS by
test_schemathesis.py): a request answered with an error changed nothing.

After every response, the user's queues (from the server's internal stats
endpoint) and a digest of the realm's rows in every domain table (from
PostgreSQL) are read; an error response (4xx or 5xx) must leave both exactly
as the previous response left them. EVENTQ_ST_URL, EVENTQ_ST_SECRET,
EVENTQ_ST_USER_ID, EVENTQ_ST_REALM_ID and EVENTQ_ST_DATABASE_URL say where
and whose.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import psycopg
import requests
import schemathesis

# Every row of the realm, table by table, as text: what a domain request can
# change. Presence rows carry times that only successes move.
_REALM_ROWS = """
SELECT md5(concat_ws('|',
  (SELECT string_agg(x::text, ',' ORDER BY x::text) FROM realms x WHERE id = %(r)s),
  (SELECT string_agg(x::text, ',' ORDER BY x::text) FROM users x WHERE realm_id = %(r)s),
  (SELECT string_agg(x::text, ',' ORDER BY x::text) FROM user_settings x
     JOIN users u ON u.id = x.user_id WHERE u.realm_id = %(r)s),
  (SELECT string_agg(x::text, ',' ORDER BY x::text) FROM streams x WHERE realm_id = %(r)s),
  (SELECT string_agg(x::text, ',' ORDER BY x::text) FROM subscriptions x
     JOIN users u ON u.id = x.user_id WHERE u.realm_id = %(r)s),
  (SELECT string_agg(x::text, ',' ORDER BY x::text) FROM messages x WHERE realm_id = %(r)s),
  (SELECT string_agg(x::text, ',' ORDER BY x::text) FROM user_messages x
     JOIN users u ON u.id = x.user_id WHERE u.realm_id = %(r)s),
  (SELECT string_agg(x::text, ',' ORDER BY x::text) FROM reactions x
     JOIN users u ON u.id = x.user_id WHERE u.realm_id = %(r)s),
  (SELECT string_agg(x::text, ',' ORDER BY x::text) FROM presences x WHERE realm_id = %(r)s),
  (SELECT string_agg(x::text, ',' ORDER BY x::text) FROM default_streams x
     WHERE realm_id = %(r)s),
  (SELECT string_agg(x::text, ',' ORDER BY x::text) FROM custom_profile_fields x
     WHERE realm_id = %(r)s),
  (SELECT string_agg(x::text, ',' ORDER BY x::text) FROM custom_profile_field_values x
     JOIN users u ON u.id = x.user_id WHERE u.realm_id = %(r)s)
))
"""


class _Readers(threading.local):
    """A database connection and an HTTP session per thread, kept for the
    whole run: a new connection per response cost 30 ms of PostgreSQL's
    time on a loaded machine, against 0.4 ms for the digest itself, and
    thousands of responses are checked."""

    def __init__(self) -> None:
        self.conn: psycopg.Connection[Any] | None = None
        self.http = requests.Session()

    def realm_digest(self) -> str:
        if self.conn is None or self.conn.closed:
            self.conn = psycopg.connect(os.environ["EVENTQ_ST_DATABASE_URL"], autocommit=True)
        row = self.conn.execute(
            _REALM_ROWS, {"r": int(os.environ["EVENTQ_ST_REALM_ID"])}
        ).fetchone()
        assert row is not None
        return str(row[0])

    def queues(self) -> frozenset[str]:
        response = self.http.post(
            f"{os.environ['EVENTQ_ST_URL']}/api/internal/stats",
            data={
                "secret": os.environ["EVENTQ_ST_SECRET"],
                "user_id": os.environ["EVENTQ_ST_USER_ID"],
            },
            timeout=30,
        )
        response.raise_for_status()
        return frozenset(queue["queue_id"] for queue in response.json()["user_queues"])


_readers = _Readers()


@schemathesis.check
class ErrorsChangeNothing:
    """An error response left the user's queues as they were."""

    def __init__(self) -> None:
        self.known: tuple[frozenset[str], str] | None = None

    def after_response(self, ctx: Any, response: Any, case: Any) -> None:
        now = (_readers.queues(), _readers.realm_digest())
        before, self.known = self.known, now
        if response.status_code < 400 or before is None:
            return
        if now[0] != before[0]:
            raise AssertionError(
                f"{case.operation.label} answered {response.status_code} but changed the"
                f" user's queues: {sorted(before[0] ^ now[0])}"
            )
        if now[1] != before[1]:
            raise AssertionError(
                f"{case.operation.label} answered {response.status_code} but changed the"
                " realm's rows in the database"
            )
