"""History benchmark: what `GET /api/v1/messages` costs on a realm of a
million messages, the way a client pays for it.

Run from the repository root:

    flock /tmp/eventq-cpu.lock .venv/bin/python tests/benchmarks/history.py   # a few minutes
    .venv/bin/python tests/benchmarks/history.py --quick                     # seconds

It builds its own world and drops it (as register.py does): a database
`eventq_bench_<random>`, migrated, one realm of --users members and
--streams channels (one in ten private), each user subscribed to
--subs-per-user of them, --messages channel messages (each of a topic of
its channel, with two words of a vocabulary of --words, so that a word
is in about 2 * messages / words of them) and a direct message in about
every hundred (drawn by a hash), every recipient's `user_messages` row (a tenth unread); the
indexes of the `message_history_indexes` background update; VACUUM
ANALYZE; then the real server (`python -m server serve`) on a free port.

Each phase is --requests requests, one at a time, by --measured users in
turn, each authenticated with HTTP Basic as a client does, timed from the
request sent to the answer read:

a. no narrow, `anchor=newest`, 50 before (the terminal client's first page);
b. a channel and topic narrow, newest, 50 before;
c. a public channel the user is not subscribed to (its shared history);
d. `search` for one word of the vocabulary, newest, 50 before (the
   user's own messages);
e. `anchor=first_unread`, 25 before and 25 after;
f. `GET messages/{id}`;
g. `search` in the shared history of a channel the user is not in;
h. a `dm` narrow: one direct conversation of the user's;
i. `is:starred` (one in a hundred of a user's messages is starred).

Beside each, in the same run, the peer: the same page's statements sent
straight to PostgreSQL by one psycopg connection (what the server's
queries cost without HTTP, auth and JSON), and the ratio. Bars (issue 34):
a and b p50 <= 15 ms and p99 <= 50 ms, d and g p50 <= 100 ms.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg
import requests
from fanout import (
    DEFAULT_BASE_URL,
    REPO,
    BenchError,
    Database,
    ServerProcess,
    User,
    log,
    percentile,
    source_state,
)
from quickmode import parse_with_quick

sys.path.insert(0, str(REPO))

from server.database.updates import MESSAGE_HISTORY_INDEXES

SECRET = "history-benchmark-secret"
QUICK = {
    "users": 40,
    "streams": 10,
    "subs_per_user": 3,
    "messages": 3000,
    "words": 100,
    "requests": 20,
    "measured": 4,
}
PAGE = 50
BARS = {"a": (15.0, 50.0), "b": (15.0, 50.0), "d": (100.0, None), "g": (100.0, None)}


def build(database: Database, users: Sequence[User], args: argparse.Namespace) -> dict[str, int]:
    """The realm's channels, subscriptions, messages and their rows, in SQL."""
    ids = [u.user_id for u in users]
    with psycopg.connect(database.url, autocommit=True) as conn:
        realm = database.realm_id
        conn.execute(
            "INSERT INTO streams (realm_id, name, invite_only)"
            " SELECT %s, 'channel ' || n, n %% 10 = 0 FROM generate_series(1, %s) n",
            (realm, args.streams),
        )
        streams = [r[0] for r in conn.execute("SELECT id FROM streams ORDER BY id")]
        with conn.cursor() as cur, cur.copy(
            "COPY subscriptions (user_id, stream_id) FROM STDIN"
        ) as copy:  # fmt: skip
            for i, user_id in enumerate(ids):
                for k in range(min(args.subs_per_user, len(streams))):
                    copy.write_row((user_id, streams[(i + k) % len(streams)]))
        # Message n: in channel n % streams, topic (n / streams) % 20 of it,
        # sent by one of its subscribers; every hundredth a direct message
        # between two users.
        conn.execute(
            """
            INSERT INTO messages (realm_id, sender_id, stream_id, topic, participant_ids,
                                  content, rendered_content, client, date_sent)
            SELECT %(realm)s, sender, stream, topic, participants, body,
                   '<p>' || body || '</p>', 'bench', now() - (%(n)s - n) * interval '1 second'
            FROM generate_series(1, %(n)s) n
            CROSS JOIN LATERAL (SELECT
                (%(streams)s::bigint[])[1 + n %% %(nstreams)s] AS channel,
                (%(users)s::bigint[])[1 + n %% %(nusers)s] AS a,
                (%(users)s::bigint[])[1 + (n / 7) %% %(nusers)s] AS b,
                -- A hash, not n: every hundredth n would be channel 0 and 100's.
                (hashint4(n * 7 + 3) & 2147483647) %% 100 = 0 AS direct,
                'message ' || n || ' w' || (hashint4(n) & 2147483647) %% %(words)s
                    || ' w' || (hashint4(n + 1) & 2147483647) %% %(words)s AS body) v
            CROSS JOIN LATERAL (SELECT
                CASE WHEN v.direct THEN NULL ELSE v.channel END AS stream,
                CASE WHEN v.direct THEN '' ELSE 'topic ' || (n / %(nstreams)s) %% 20 END
                    AS topic,
                CASE WHEN v.direct THEN ARRAY(SELECT DISTINCT unnest(ARRAY[v.a, v.b])
                    ORDER BY 1) END AS participants,
                CASE WHEN v.direct THEN v.a ELSE (SELECT user_id FROM subscriptions
                    WHERE stream_id = v.channel LIMIT 1) END AS sender) w
            """,
            {
                "realm": realm, "n": args.messages, "streams": streams,
                "nstreams": len(streams), "users": ids, "nusers": len(ids), "words": args.words,
            },
        )  # fmt: skip
        conn.execute(
            """
            INSERT INTO user_messages (user_id, message_id, read, starred)
            SELECT r.user_id, m.id, hashint8(m.id * 1000003 + r.user_id) % 10 <> 0,
                   hashint8(m.id * 1000033 + r.user_id) % 100 = 0
            FROM messages m
            CROSS JOIN LATERAL (
                SELECT s.user_id FROM subscriptions s WHERE s.stream_id = m.stream_id
                UNION SELECT unnest(m.participant_ids)) r
            """
        )
        for name, definition in MESSAGE_HISTORY_INDEXES.items():
            conn.execute(f"CREATE INDEX {name} ON messages {definition}".encode())
        conn.execute("VACUUM ANALYZE")
        row = conn.execute(
            "SELECT (SELECT count(*) FROM messages), (SELECT count(*) FROM user_messages),"
            " pg_total_relation_size('messages'), pg_total_relation_size('user_messages')"
        ).fetchone()
        assert row is not None
    return {
        "messages": row[0], "user_messages": row[1],
        "messages_bytes": row[2], "user_messages_bytes": row[3],
    }  # fmt: skip


def _phase_params(database: Database, user: User, key: str, args: argparse.Namespace) -> Any:
    """The request of phase `key` for `user`: (path, params)."""
    with psycopg.connect(database.url) as conn:
        subscribed = conn.execute(
            "SELECT s.id, s.name FROM subscriptions sub JOIN streams s ON s.id = sub.stream_id"
            " WHERE sub.user_id = %s AND NOT s.invite_only ORDER BY s.id LIMIT 1",
            (user.user_id,),
        ).fetchone()
        other = conn.execute(
            "SELECT s.name FROM streams s WHERE NOT s.invite_only AND NOT EXISTS (SELECT 1 FROM"
            " subscriptions sub WHERE sub.stream_id = s.id AND sub.user_id = %s)"
            " ORDER BY s.id LIMIT 1",
            (user.user_id,),
        ).fetchone()
        newest = conn.execute(
            "SELECT max(message_id) FROM user_messages WHERE user_id = %s", (user.user_id,)
        ).fetchone()
        # Someone they have a direct conversation with (a small realm may
        # have none for them: anyone else, then).
        partner = None
        if key == "h":
            partner = conn.execute(
                "SELECT u.email FROM users u WHERE u.id = COALESCE((SELECT p FROM messages m,"
                " unnest(m.participant_ids) p WHERE %(me)s = ANY(m.participant_ids)"
                " AND p <> %(me)s LIMIT 1), (SELECT min(id) FROM users WHERE id <> %(me)s))",
                {"me": user.user_id},
            ).fetchone()
    assert subscribed is not None
    assert other is not None
    assert newest is not None
    page = {"anchor": "newest", "num_before": PAGE, "num_after": 0}
    if key == "a":
        return "messages", {**page, "narrow": []}
    if key == "b":
        narrow = [["channel", subscribed[1]], ["topic", "topic 3"]]
        return "messages", {**page, "narrow": narrow}
    if key == "c":
        return "messages", {**page, "narrow": [["channel", other[0]]]}
    if key == "d":
        word = f"w{user.user_id % args.words}"
        return "messages", {**page, "narrow": [["search", word]]}
    if key == "g":
        word = f"w{user.user_id % args.words}"
        return "messages", {**page, "narrow": [["channel", other[0]], ["search", word]]}
    if key == "h":
        assert partner is not None
        return "messages", {**page, "narrow": [["dm", partner[0]]]}
    if key == "i":
        return "messages", {**page, "narrow": [["is", "starred"]]}
    if key == "e":
        params = {"anchor": "first_unread", "num_before": PAGE // 2, "num_after": PAGE // 2}
        return "messages", {**params, "narrow": []}
    return f"messages/{newest[0]}", {}


PHASES = {
    "a": "a. no narrow, newest, 50 before",
    "b": "b. channel + topic, newest, 50 before",
    "c": "c. channel not subscribed (shared history)",
    "d": "d. search one word, newest, 50 before",
    "e": "e. first_unread, 25 before and after",
    "f": "f. GET messages/{id}",
    "g": "g. search in a channel's shared history",
    "h": "h. one direct conversation, newest, 50 before",
    "i": "i. is:starred, newest, 50 before",
}


def _timed(call: Callable[[], Any], n: int) -> list[float]:
    samples = []
    for _ in range(n):
        began = time.perf_counter()
        call()
        samples.append((time.perf_counter() - began) * 1000)
    return sorted(samples)


def _stats(samples: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(percentile(samples, 0.5), 2),
        "p99_ms": round(percentile(samples, 0.99), 2),
        "max_ms": round(samples[-1], 2),
    }


def run_phase(
    server: ServerProcess, database: Database, users: Sequence[User], key: str, args: Any
) -> dict[str, Any]:
    url = f"http://127.0.0.1:{server.port}/api/v1/"
    requests_of = [_phase_params(database, user, key, args) for user in users]
    sessions = []
    for user in users:
        session = requests.Session()
        session.auth = (user.email, user.api_key)
        sessions.append(session)
    turn = iter(range(10**9))
    answered: list[int] = []

    def one() -> None:
        i = next(turn) % len(users)
        path, params = requests_of[i]
        encoded = {k: v if isinstance(v, str) else json.dumps(v) for k, v in params.items()}
        response = sessions[i].get(url + path, params=encoded, timeout=30)
        if response.status_code != 200:
            raise BenchError(f"{key}: {response.status_code} {response.text[:300]}")
        body = response.json()
        answered.append(len(body.get("messages", [body.get("message")])))

    for _ in range(min(5, args.requests)):  # warm the auth cache and the pool
        one()
    answered.clear()
    cpu0 = server.cpu_secs()
    samples = _timed(one, args.requests)
    cpu1 = server.cpu_secs()
    for session in sessions:
        session.close()
    return {
        **_stats(samples),
        "server_cpu_ms_per_request": round((cpu1 - cpu0) * 1000 / args.requests, 2),
        "messages_per_answer": round(sum(answered) / max(1, len(answered)), 1),
    }


def peer_phase(database: Database, users: Sequence[User], args: Any) -> dict[str, float]:
    """Phase a's statements straight to PostgreSQL: the user's newest 50 ids
    by their rows, then those messages with their senders and flags, as the
    server reads them (server/database/history.py, message_rows.py)."""
    turn = iter(range(10**9))
    with psycopg.connect(database.url, autocommit=True) as conn:

        def one() -> None:
            user = users[next(turn) % len(users)]
            ids = [r[0] for r in conn.execute(
                "SELECT um.message_id FROM user_messages um JOIN messages m ON m.id ="
                " um.message_id WHERE um.user_id = %s AND um.message_id <= %s"
                " ORDER BY um.message_id DESC LIMIT %s",
                (user.user_id, 10**16, PAGE),
            )]  # fmt: skip
            conn.execute(
                "SELECT m.*, su.email, su.full_name, s.name, um.read, um.starred FROM messages m"
                " JOIN users su ON su.id = m.sender_id LEFT JOIN streams s ON s.id = m.stream_id"
                " LEFT JOIN user_messages um ON um.message_id = m.id AND um.user_id = %s"
                " WHERE m.id = ANY(%s) ORDER BY m.id",
                (user.user_id, ids),
            ).fetchall()

        for _ in range(5):
            one()
        return _stats(_timed(one, args.requests))


def render(results: dict[str, Any]) -> str:
    rows = results["rows"]
    lines = [
        f"server code: {results['source']}",
        f"realm: {rows['messages']:,} messages ({rows['messages_bytes'] / 2**20:,.0f} MiB),"
        f" {rows['user_messages']:,} user_messages rows"
        f" ({rows['user_messages_bytes'] / 2**20:,.0f} MiB); built in {results['build_secs']} s",
        "",
        f"{'phase':<46}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}{'srv CPU':>9}{'msgs':>7}{'bar':>16}",
    ]
    for key, name in PHASES.items():
        p = results["phases"][key]
        bar = BARS.get(key)
        verdict = ""
        if bar is not None:
            met = p["p50_ms"] <= bar[0] and (bar[1] is None or p["p99_ms"] <= bar[1])
            verdict = f"{bar[0]:g}/{bar[1] or '-'} {'met' if met else 'MISSED'}"
        lines.append(
            f"{name:<46}{p['p50_ms']:>9}{p['p99_ms']:>9}{p['max_ms']:>9}"
            f"{p['server_cpu_ms_per_request']:>9}{p['messages_per_answer']:>7}{verdict:>16}"
        )
    peer = results["peer"]
    a = results["phases"]["a"]
    lines += [
        "",
        f"peer: phase a's two statements straight to PostgreSQL: p50 {peer['p50_ms']} ms,"
        f" p99 {peer['p99_ms']} ms; eventq / peer p50 {a['p50_ms'] / peer['p50_ms']:.2f}x",
        f"server loop lag over the run: max {results['loop_lag']['window_max_ms']} ms,"
        f" p99 {results['loop_lag']['p99_ms']} ms",
    ]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default=DEFAULT_BASE_URL)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--subs-per-user", type=int, default=2)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--words", type=int, default=4000)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--measured", type=int, default=10)
    parser.add_argument("--json", action="store_true", help="results as JSON on stdout")
    return parse_with_quick(parser, argv, QUICK)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    database = Database(args.database_url)
    workdir = Path(tempfile.mkdtemp(prefix="eventq-history-bench-"))
    server: ServerProcess | None = None
    results: dict[str, Any] = {
        "source": source_state(),
        "config": vars(args),
        "database": database.name,
        "workdir": str(workdir),
    }
    try:
        log(f"creating {database.name}")
        database.create()
        users = database.populate(args.users)
        began = time.monotonic()
        results["rows"] = build(database, users, args)
        results["build_secs"] = round(time.monotonic() - began, 1)
        log(f"realm: {results['rows']} in {results['build_secs']} s")
        server = ServerProcess(database.url, workdir, SECRET)
        server.start()
        measured = users[: args.measured]
        results["phases"] = {}
        for key, name in PHASES.items():
            log(f"phase {name}")
            results["phases"][key] = run_phase(server, database, measured, key, args)
        log("peer: the statements straight to PostgreSQL")
        results["peer"] = peer_phase(database, measured, args)
        response = requests.post(
            f"http://127.0.0.1:{server.port}/api/internal/stats",
            data={"secret": SECRET},
            timeout=10,
        )
        results["loop_lag"] = response.json()["loop_lag"]
        results["figures"] = {
            f"{key}_p50_ms": phase["p50_ms"] for key, phase in results["phases"].items()
        }
        results["completed"] = True
        server.check()
    except BenchError as exc:
        log(f"benchmark failed: {exc}")
        return 1
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    finally:
        if server is not None:
            server.stop()
        try:
            database.drop()
        except psycopg.Error as exc:
            log(f"could not drop database {database.name}: {exc}")
        shutil.rmtree(workdir, ignore_errors=True)
    table = render(results)
    if args.json:
        print(table, file=sys.stderr)
        print(json.dumps(results, indent=2))
    else:
        print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
