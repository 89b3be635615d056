"""Resume benchmark: what `POST /api/v1/register` with
`resume_from` costs the server's IO loop, and its client, over a realm's
event log of 1 GiB.

Run from the repository root:

    flock /tmp/eventq-cpu.lock .venv/bin/python tests/benchmarks/resume.py
        [--users 2000] [--log-bytes 1073741824] [--repeat 20] [--json] [--explain]

It builds its own world and tears it down (as register.py does): a fresh
database `eventq_bench_<random>`, migrated, with one realm of --users members
and one guest, --streams channels (one in ten public) with each member
subscribed to --subs-per-user of them (register.py's `populate_domain`, with
--messages messages in the domain), a private channel of the guest and ten
members; then an event log of about --log-bytes (the sum of the notices'
bytes) written in SQL in the form the server's writers give it
(generation/eventlog.py: the orjson wire form of the notice, `recipients`,
`public_message`): channel messages to the channel's subscribers with their
flags (one in ten to a public channel), direct messages (one row in 20),
deletions (one in 1,000) and about 100 rows naming the guest (one of their
messages deleted later). Each kind of row is checked to be byte for byte what
`encode_notice(parse_notice(row))` gives. Then the indexes as a deployment
gets them (`eventq db background run --until-done`: the
`event_log_realm_index` and `event_log_recipients_index` updates), VACUUM
ANALYZE, every user's floor (`user_stream_floors`) at the log's first
position, and only then the real server (`python -m server serve`, no broker,
free port), whose stream starts at the log's end.

Phases, each --repeat requests after one uncounted warm-up (whose time is
reported as `first`), HTTP Basic auth on every request, the `zulip` client's
parameters (every event type, apply_markdown, client_gravatar):

a. the guest resumes from the log's first position (its ~100 rows in the log);
b. the guest sends resume_from=0: refused, RESUME_POSITION_UNKNOWN;
c. an active member resumes from a recent position (the newest 1 % of the log);
d. the same member resumes from the log's first position: more than a resume
   replays (--resume-max-events, the server's EVENTQ_RESUME_MAX_EVENTS, at
   most a queue's worth), RESUME_EXPIRED after the bounded read;
e. another member with all_public_streams=true resumes from the recent position;
f. the comparison: the member of c registers afresh with the whole state;
g. the member of c resumes from where 90 % of a resume's events follow (the
   most a resume that succeeds puts in a queue at once);
a x N. phase a with --concurrency clients at once (--repeat each).

Each reports latency p50/p99/max, the server process's CPU per request
(/proc/<pid>/stat over the counted requests) and that of the PostgreSQL
backends of the benchmark's database, and the server's IO-loop lag: its own
sampler (`POST /api/internal/stats`, `loop_lag`), which wakes every 100 ms
and keeps the last 600 samples (60 s): before each phase the run waits
--settle seconds so that no earlier phase is in that window, and reads it
every 10 s during the phase and at its end; the phase's lag is the largest
`window_max_ms` (and `p99_ms`) so read; beside it the longest stop of
Python's cyclic GC during the phase (the server's `python_gc.pauses`), one
cause of lag told apart from the others (the sampler sees a stop only
when it overlaps one of its wake-ups; a GC stop is timed whole). A first
row `idle` is the same window with no request. Bar: the longer of the two
over the resume phases <= 5 ms, so that one client's resume does not hold
up the others' deliveries. The ratio c/f (latency and CPU) is printed.

Every answer is checked: a resumed queue must hold exactly the events logged
for its user after the position (the guest's known by construction, the
members' read from the log), less the messages deleted since; b must be
RESUME_POSITION_UNKNOWN, d RESUME_EXPIRED. A wrong answer fails the run
(exit 1) after the report. --explain adds EXPLAIN (ANALYZE, BUFFERS) of the
server's `LOG_FOR_USER` and `deleted_messages` queries for the phases' users
(custom plans, and the plan a prepared statement settles on, as psycopg
prepares a query after 5 executions, unless the server passes prepare=False,
as it does for `LOG_FOR_USER`). Whatever happens (error, Ctrl-C,
SIGTERM) the server is stopped and the database dropped (unless --keep-db).
`--quick`: a log of 4 MB, 40 users, 3 requests a phase, queues and resumes of 40 events,
in seconds (tests/test_benchmarks.py runs it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import psycopg
import requests

# Shared with the other benchmarks: the world (database, server process).
from fanout import (
    API_KEY_SECRET,
    DEFAULT_BASE_URL,
    REPO,
    TICKS,
    BenchError,
    Database,
    ServerProcess,
    User,
    die_with_parent,
    log,
    percentile,
    source_state,
)
from quickmode import parse_with_quick
from register import populate_domain

from generation.accounts import ROLE_GUEST
from generation.notice import encode_notice, parse_notice
from generation.sharding import reaches_whole_realm
from server.database.db import Database as ServerDb
from server.durability.resume import RESUME_PAGE

SECRET = "resume-benchmark-secret"
LOOP_LAG_BAR_MS = 5.0  # a resume may cost the IO loop at most this
# The server's loop-lag sampler (server/observability/looplag.py): one sample every 100 ms,
# the last 600 kept.
LAG_WINDOW_SECS = 60.0
LAG_POLL_SECS = 10.0
QUEUE_MAX_EVENTS = 10_000  # the server's default (EVENTQ_QUEUE_MAX_EVENTS)
RESUME_MAX_EVENTS = 1_000  # the server's default (EVENTQ_RESUME_MAX_EVENTS)
MAX_QUEUES_PER_USER = 100  # the server's default (EVENTQ_MAX_QUEUES_PER_USER)
# The message ids of the log, clear of the domain's own messages.
MESSAGE_ID_BASE = 1_000_000
# Each channel's notices have this many senders (and flags) in turn.
SENDER_VARIANTS = 10
# Members of the guest's private channel besides the guest.
GUEST_CHANNEL_MEMBERS = 10
RECENT_SHARE = 0.01  # phases c and e resume from the newest 1 % of the log
NEAR_FULL = 0.9  # phase g resumes to this share of the events a resume replays
QUICK = {
    "users": 40,
    "streams": 20,
    "messages": 200,
    "log_bytes": 4 << 20,
    "repeat": 3,
    "concurrency": 2,
    "queue_max_events": 40,
    "resume_max_events": 40,
    "settle": 0.0,
    "idle_secs": 0.5,
}
# What the `zulip` client's register() sends (register.py's register_once).
ZULIP_FORM = {"event_types": "null", "apply_markdown": "true", "client_gravatar": "true"}

CONTENT = (
    "Deploy {n} finished at 10:42; the **queue depth** graphs are back to normal."
    " Thanks @**Bench 3** for watching them during the window."
)
RENDERED = (
    "<p>Deploy {n} finished at 10:42; the <strong>queue depth</strong> graphs are back"
    ' to normal. Thanks <span class="user-mention" data-user-id="3">@Bench 3</span>'
    " for watching them during the window.</p>"
)


def _json_around(template: str) -> tuple[str, str]:
    """orjson's encoding of `template` split at its `{n}`: exact escaping."""
    before, after = orjson.dumps(template).decode().split("{n}")
    return before, after


# -- the world ----------------------------------------------------------------


@dataclass
class World:
    realm_id: int
    members: list[User]
    guest: User
    guest_stream: int
    rows: dict[str, int] = field(default_factory=dict)
    log: dict[str, Any] = field(default_factory=dict)
    first: int = 0  # the log's first and last positions
    last: int = 0
    period: int = 0  # a deletion every `period` rows
    guest_every: int = 0  # a row naming the guest every `guest_every` rows
    count: int = 0  # rows in the log


def build_domain(database: Database, args: argparse.Namespace) -> World:
    """Users, the guest, channels (one in ten public), subscriptions, messages
    and presence (register.py's `populate_domain`), the guest's channel."""
    users = database.populate(args.users + 1)
    members, guest = users[:-1], users[-1]
    rows = populate_domain(database, members, args.streams, args.subs_per_user, args.messages)
    with psycopg.connect(database.url) as conn:
        conn.execute("UPDATE users SET role = %s WHERE id = %s", (ROLE_GUEST, guest.user_id))
        # populate_domain makes one channel in ten private; here one in ten is
        # public, and the default channels are public ones.
        conn.execute("UPDATE streams SET invite_only = NOT invite_only")
        conn.execute("DELETE FROM default_streams")
        conn.execute(
            "INSERT INTO default_streams (realm_id, stream_id)"
            " SELECT realm_id, id FROM streams WHERE NOT invite_only ORDER BY id LIMIT 5"
        )
        row = conn.execute(
            "INSERT INTO streams (realm_id, name, description, invite_only)"
            " VALUES (%s, 'guests', 'With our guest', true) RETURNING id",
            (database.realm_id,),
        ).fetchone()
        assert row is not None
        guest_stream = int(row[0])
        with (
            conn.cursor() as cur,
            cur.copy("COPY subscriptions (user_id, stream_id, color) FROM STDIN") as copy,
        ):
            for user in [guest, *members[:GUEST_CHANNEL_MEMBERS]]:
                copy.write_row((user.user_id, guest_stream, "#76ce90"))
        conn.execute("ANALYZE")
    rows["streams"] += 1
    rows["subscriptions"] += GUEST_CHANNEL_MEMBERS + 1
    return World(database.realm_id, members, guest, guest_stream, rows)


# The log's helper tables (dropped once it is written): each person as a
# sender and a direct message's participant, and each channel's recipients
# with SENDER_VARIANTS senders and their users' flags.
_HELPERS = """
CREATE TABLE bench_people AS
SELECT row_number() OVER (ORDER BY id) - 1 AS idx, id, email, full_name,
       'https://secure.gravatar.com/avatar/' || md5(lower(email))
         || '?d=identicon&version=1' AS avatar,
       '{"id":' || id || ',"email":"' || email || '","full_name":"' || full_name
         || '","is_mirror_dummy":false}' AS dr
FROM users;
CREATE UNIQUE INDEX ON bench_people (idx);
CREATE UNIQUE INDEX ON bench_people (id);
CREATE TABLE bench_channels AS
SELECT CASE WHEN s.id = %(guest_stream)s THEN -1
            ELSE row_number() OVER (ORDER BY s.id = %(guest_stream)s, s.id) - 1 END AS j,
       s.id AS stream_id, s.name, s.invite_only,
       array_agg(sub.user_id ORDER BY sub.user_id) AS recipients
FROM streams s JOIN subscriptions sub ON sub.stream_id = s.id AND sub.active
GROUP BY s.id;
CREATE TABLE bench_frag AS
SELECT c.j, v AS variant, c.stream_id, c.name, c.invite_only, c.recipients,
       c.recipients[1 + mod(v * 7, cardinality(c.recipients))] AS sender,
       (SELECT string_agg('{"id":' || u || ',"flags":' || CASE
                  WHEN u = c.recipients[1 + mod(v * 7, cardinality(c.recipients))]
                    THEN '["read"]'
                  WHEN mod(v, 3) = 0
                       AND u = c.recipients[1 + mod(v * 7 + 3, cardinality(c.recipients))]
                    THEN '["mentioned"]'
                  ELSE '[]' END || '}', ',' ORDER BY u)
        FROM unnest(c.recipients) AS u) AS users_json
FROM bench_channels c CROSS JOIN generate_series(0, %(variants)s - 1) AS v;
CREATE UNIQUE INDEX ON bench_frag (j, variant);
ANALYZE bench_people;
ANALYZE bench_frag;
"""

# Row n of the log (position base + n), by kind, in the server's wire form:
#   gch  a message in the guest's channel, gdm a direct message to the guest
#        (n mod G = 7; one in five a direct message);
#   gdel the deletion of the guest's message of row 5G + 7 (row 5G + 10);
#   del  the deletion of the channel message of row n - 7 (n mod P = P/2);
#   dm   a direct message between two members (n mod 20 = 11);
#   ch   a channel message, channel (37 n mod S), to its subscribers.
# (P is a multiple of 200 and G of P, so that no two rules meet and a
# deletion's row n - 7 is a `ch`.)
_ROWS = """
SELECT %(base)s + g.n AS position,
       CASE WHEN k.kind IN ('del', 'gdel') THEN 'delete_message' ELSE 'message' END
         AS event_type,
       convert_to(CASE
         WHEN k.kind IN ('ch', 'gch') THEN
           '{"event":{"type":"message","message":{"id":' || s.mid
           || ',"type":"stream","sender_id":' || ps.id
           || ',"sender_email":"' || ps.email || '","sender_full_name":"' || ps.full_name
           || '","sender_realm_str":"bench","avatar_url":"' || ps.avatar
           || '","client":"website","content":' || %(c1)s || g.n || %(c2)s
           || ',"rendered_content":' || %(r1)s || g.n || %(r2)s
           || ',"display_recipient":"' || f.name || '","subject":"topic ' || mod(s.m, 23)
           || '","topic_links":[],"is_me_message":false,"reactions":[],"submessages":[]'
           || ',"timestamp":' || s.ts || ',"stream_id":' || f.stream_id
           || '},"invite_only":' || f.invite_only::text || '},"users":[' || f.users_json
           || '],"realm_id":' || %(realm)s || '}'
         WHEN k.kind IN ('dm', 'gdm') THEN
           '{"event":{"type":"message","message":{"id":' || s.mid
           || ',"type":"private","sender_id":' || pa.id
           || ',"sender_email":"' || pa.email || '","sender_full_name":"' || pa.full_name
           || '","sender_realm_str":"bench","avatar_url":"' || pa.avatar
           || '","client":"website","content":' || %(c1)s || g.n || %(c2)s
           || ',"rendered_content":' || %(r1)s || g.n || %(r2)s
           || ',"display_recipient":['
           || CASE WHEN pa.id < pb.id THEN pa.dr || ',' || pb.dr ELSE pb.dr || ',' || pa.dr END
           || '],"subject":"","topic_links":[],"is_me_message":false,"reactions":[]'
           || ',"submessages":[],"timestamp":' || s.ts || '}},"users":['
           || CASE WHEN pa.id < pb.id
                THEN '{"id":' || pa.id || ',"flags":["read"]},{"id":' || pb.id || ',"flags":[]}'
                ELSE '{"id":' || pb.id || ',"flags":[]},{"id":' || pa.id || ',"flags":["read"]}'
              END
           || '],"realm_id":' || %(realm)s || '}'
         ELSE
           '{"event":{"type":"delete_message","message_ids":[' || s.mid
           || '],"message_type":"stream","stream_id":' || f.stream_id
           || ',"topic":"topic ' || mod(s.m, 23) || '"},"users":['
           || array_to_string(f.recipients, ',') || '],"realm_id":' || %(realm)s || '}'
       END, 'UTF8') AS notice,
       CASE WHEN k.kind IN ('dm', 'gdm') THEN ARRAY[least(pa.id, pb.id), greatest(pa.id, pb.id)]
            ELSE f.recipients END AS recipients,
       k.kind IN ('ch', 'gch') AND NOT f.invite_only AS public_message,
       %(t0)s::timestamptz + g.n * %(step)s::interval AS created_at
FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) AS g(n)
CROSS JOIN LATERAL (SELECT CASE
    WHEN mod(g.n, %(every)s) = 7 THEN
      CASE WHEN mod(g.n / %(every)s, 5) = 4 THEN 'gdm' ELSE 'gch' END
    WHEN g.n = 5 * %(every)s + 10 THEN 'gdel'
    WHEN mod(g.n, %(period)s) = %(period)s / 2 THEN 'del'
    WHEN mod(g.n, 20) = 11 THEN 'dm'
    ELSE 'ch' END AS kind) AS k
CROSS JOIN LATERAL (SELECT
    CASE k.kind WHEN 'ch' THEN mod(g.n * 37, %(streams)s)
                WHEN 'del' THEN mod((g.n - 7) * 37, %(streams)s)
                WHEN 'gch' THEN -1 WHEN 'gdel' THEN -1 ELSE -2 END AS j,
    CASE k.kind WHEN 'ch' THEN mod(g.n / %(streams)s, %(variants)s)
                WHEN 'gch' THEN mod(g.n / %(every)s, %(variants)s) ELSE 0 END AS variant,
    CASE k.kind WHEN 'del' THEN g.n - 7 WHEN 'gdel' THEN g.n - 3 ELSE g.n END AS m,
    %(message_base)s + CASE k.kind WHEN 'del' THEN g.n - 7 WHEN 'gdel' THEN g.n - 3
                                   ELSE g.n END AS mid,
    floor(%(ts0)s + g.n * %(ts_step)s)::bigint AS ts,
    CASE k.kind WHEN 'dm' THEN mod(g.n * 13, %(members)s)
                WHEN 'gdm' THEN mod((g.n / %(every)s) * 11, %(members)s) END AS a,
    CASE k.kind WHEN 'dm' THEN mod(g.n * 7 + 1 + CASE WHEN mod(g.n * 7 + 1, %(members)s)
                                                    = mod(g.n * 13, %(members)s)
                                                  THEN 1 ELSE 0 END, %(members)s)
                WHEN 'gdm' THEN %(members)s END AS b
  ) AS s
LEFT JOIN bench_frag f ON f.j = s.j AND f.variant = s.variant
LEFT JOIN bench_people ps ON ps.id = f.sender
LEFT JOIN bench_people pa ON pa.idx = s.a
LEFT JOIN bench_people pb ON pb.idx = s.b
ORDER BY g.n
"""


def _row_params(world: World, args: argparse.Namespace, base: int, count: int) -> dict[str, Any]:
    c1, c2 = _json_around(CONTENT)
    r1, r2 = _json_around(RENDERED)
    now = time.time()
    span = 12 * 3600.0  # the log spans the last 12 hours (retention: 24)
    return {
        "base": base,
        "realm": world.realm_id,
        "c1": c1,
        "c2": c2,
        "r1": r1,
        "r2": r2,
        "every": world.guest_every,
        "period": world.period,
        "streams": args.streams,
        "variants": SENDER_VARIANTS,
        "members": len(world.members),
        "message_base": MESSAGE_ID_BASE,
        "ts0": now - span,
        "ts_step": span / max(1, count),
        "t0": time.strftime("%Y-%m-%d %H:%M:%S+00", time.gmtime(now - span)),
        "step": f"{span / max(1, count):.6f} seconds",
    }


def _layout(world: World, count: int) -> None:
    """The deletion period and the guest's spacing for a log of `count` rows:
    a deletion every 1,000 rows (200 in a small log), ~100 rows for the guest."""
    world.count = count
    world.period = 1000 if count >= 50_000 else 200
    world.guest_every = world.period * max(1, round(count / 100 / world.period))


def build_log(database: Database, world: World, args: argparse.Namespace) -> None:
    """Write the event log in SQL, in batches, until about --log-bytes."""
    started = time.monotonic()
    with psycopg.connect(database.url, autocommit=True) as conn:
        conn.execute("SET work_mem = '256MB'")
        helpers = _HELPERS.replace("%(guest_stream)s", str(world.guest_stream)).replace(
            "%(variants)s", str(SENDER_VARIANTS)
        )
        conn.execute(helpers.encode())
        # The mean notice size, from a sample of the rows to be written.
        _layout(world, 100_000)
        sample = conn.execute(
            f"SELECT avg(octet_length(notice)) FROM ({_ROWS}) r",  # noqa: S608 (constants)
            {**_row_params(world, args, 0, 100_000), "lo": 1, "hi": 5000},
        ).fetchone()
        assert sample is not None
        assert sample[0] is not None
        count = max(200, math.ceil(args.log_bytes / float(sample[0])))
        _layout(world, count)
        row = conn.execute("SELECT nextval('event_log_position')").fetchone()
        assert row is not None
        base = int(row[0])  # the log's first row is base + 1
        params = _row_params(world, args, base, count)
        batch = 50_000
        written = total = 0
        log(
            f"event log: {count:,} rows of about {float(sample[0]):,.0f} bytes"
            f" ({args.log_bytes / 2**20:,.0f} MiB) in batches of {batch:,}"
        )
        insert = (
            "WITH written AS (INSERT INTO event_log (position, event_type, notice, recipients,"  # noqa: S608
            " public_message, created_at, realm_id)"
            " SELECT position, event_type, notice, recipients, public_message, created_at,"
            f" %(realm)s FROM ({_ROWS}) r RETURNING octet_length(notice) AS size)"
            " SELECT count(*), sum(size) FROM written"
        )
        for lo in range(1, count + 1, batch):
            hi = min(count, lo + batch - 1)
            got = conn.execute(insert, {**params, "lo": lo, "hi": hi}).fetchone()  # type: ignore[arg-type]
            assert got is not None
            written += int(got[0])
            total += int(got[1])
            if hi < count:
                log(f"event log: {written:,} rows, {total / 2**20:,.0f} MiB")
        conn.execute("SELECT setval('event_log_position', %s)", (base + count,))
        conn.execute("DROP TABLE bench_frag, bench_channels, bench_people")
    world.first, world.last = base + 1, base + count
    world.log.update(
        {
            "rows": written,
            "notice_bytes": total,
            "mean_notice_bytes": round(total / written),
            "first_position": world.first,
            "last_position": world.last,
            "deletion_every": world.period,
            "guest_every": world.guest_every,
            "write_secs": round(time.monotonic() - started, 1),
        }
    )
    log(f"event log: {written:,} rows, {total / 2**20:,.1f} MiB of notices written")


def check_log_form(database: Database, world: World) -> list[str]:
    """Rows of every kind, compared with what the server's writers give."""
    n = [*range(1, 61), *range(world.period // 2, world.period * 6, world.period)]
    n += [world.guest_every * i + 7 for i in range(10)] + [5 * world.guest_every + 10]
    positions = sorted({world.first - 1 + i for i in n if 1 <= i <= world.count})
    problems: list[str] = []
    kinds: set[str] = set()
    with psycopg.connect(database.url) as conn:
        rows = conn.execute(
            "SELECT position, event_type, notice, recipients, public_message FROM event_log"
            " WHERE position = ANY(%s) ORDER BY position",
            (positions,),
        ).fetchall()
    for position, event_type, raw, recipients, public in rows:
        body = bytes(raw)
        notice = parse_notice(body)
        kinds.add(f"{event_type}/{notice.event.get('message', {}).get('type', '')}")
        if encode_notice(notice) != body:
            problems.append(f"log row {position} is not in the writers' wire form")
        # (generation.eventlog's rule: each user's id, in the notice's order)
        ids = [user if isinstance(user, int) else user["id"] for user in notice.users]
        if recipients != ids:
            problems.append(f"log row {position}: recipients {recipients} not the notice's")
        if public != reaches_whole_realm(notice.event) or event_type != notice.event["type"]:
            problems.append(f"log row {position}: public_message or event_type wrong")
    if len(rows) != len(positions):
        problems.append(f"{len(positions) - len(rows)} sampled log rows missing")
    world.log["kinds_checked"] = sorted(kinds)
    return problems


def _interruptible(command: list[str], env: dict[str, str], timeout: float) -> tuple[int, str]:
    """Run `command` in its own session, killed with us."""
    proc = subprocess.Popen(
        command,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
        preexec_fn=die_with_parent,  # noqa: PLW1509 (no threads yet)
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except BaseException:
        proc.kill()
        proc.wait(10)
        raise
    return proc.returncode, out


def build_indexes(database: Database, world: World) -> None:
    """The background updates a deployment runs (`eventq db background run
    --until-done`), then VACUUM ANALYZE, then every user's floor."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVENTQ_")}
    env.update(
        {
            "EVENTQ_DATABASE_URL": database.url,
            "EVENTQ_API_KEY_SECRET": API_KEY_SECRET,
            # The retention updates are not run here (they would prune a log
            # over the default 1 GiB): only the one-shot index builds.
            "EVENTQ_EVENT_LOG_PRUNE_SECS": "0",
        }
    )
    started = time.monotonic()
    status, out = _interruptible(
        [sys.executable, "-m", "server", "db", "background", "run", "--until-done"], env, 7200
    )
    if status != 0:
        raise BenchError(f"eventq db background run exited {status}:\n{out[-3000:]}")
    world.log["index_secs"] = round(time.monotonic() - started, 1)
    started = time.monotonic()
    with psycopg.connect(database.url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE event_log")
        conn.execute("ANALYZE")
        world.log["vacuum_analyze_secs"] = round(time.monotonic() - started, 1)
        done = conn.execute(
            "SELECT name FROM background_updates WHERE finished_at IS NOT NULL ORDER BY name"
        ).fetchall()
        world.log["updates_finished"] = [row[0] for row in done]
        sizes = conn.execute(
            "SELECT pg_total_relation_size('event_log'), pg_relation_size('event_log'),"
            " pg_total_relation_size('event_log') - pg_table_size('event_log')"
        ).fetchone()
        assert sizes is not None
        world.log["total_relation_bytes"] = int(sizes[0])
        world.log["heap_bytes"] = int(sizes[1])
        world.log["index_bytes"] = int(sizes[2])
        world.log["indexes"] = {
            name: int(size)
            for name, size in conn.execute(
                "SELECT c.relname, pg_relation_size(c.oid) FROM pg_index i"
                " JOIN pg_class c ON c.oid = i.indexrelid"
                " WHERE i.indrelid = 'event_log'::regclass AND i.indisvalid ORDER BY 1"
            ).fetchall()
        }
        conn.execute(
            "INSERT INTO user_stream_floors (user_id, position) SELECT id, %s FROM users",
            (world.first,),
        )
    missing = {"event_log_recipients", "event_log_public_messages", "event_log_realm_position"}
    missing -= set(world.log["indexes"])
    if missing:
        raise BenchError(f"the background updates left no index {sorted(missing)}")


# -- what each resume must answer ---------------------------------------------


def signature(event: dict[str, Any]) -> tuple[str, tuple[int, ...]]:
    """What identifies an event here: its type and the messages it is about."""
    kind = event.get("type", "")
    if kind == "message":
        return kind, (int(event["message"]["id"]),)
    if kind == "delete_message":
        ids = event.get("message_ids")
        return kind, tuple(sorted(ids if ids is not None else [event["message_id"]]))
    return kind, ()


def expected_events(
    conn: psycopg.Connection[Any], user_id: int, after: int, upto: int, public: bool
) -> list[tuple[str, tuple[int, ...]]]:
    """The events a resume of `user_id` from `after` must give: the logged
    rows naming them (and, with `public`, public channel messages) in
    order, less the messages deleted in (after, upto]."""
    deleted: set[int] = set()
    for (body,) in conn.execute(
        "SELECT notice FROM event_log WHERE event_type = 'delete_message'"
        " AND position > %s AND position <= %s",
        (after, upto),
    ):
        deleted.update(parse_notice(bytes(body)).event["message_ids"])
    rows = conn.execute(
        "SELECT notice FROM event_log WHERE position > %s AND position <= %s"
        " AND (recipients @> ARRAY[%s::bigint] OR (%s AND public_message)) ORDER BY position",
        (after, upto, user_id, public),
    )
    found = [signature(parse_notice(bytes(body)).event) for (body,) in rows]
    return [s for s in found if not (s[0] == "message" and s[1][0] in deleted)]


def guest_by_construction(world: World) -> list[tuple[str, tuple[int, ...]]]:
    """The guest's events from the log's first position, from the rules that
    wrote the log (not from its recipients column)."""
    every, found = world.guest_every, []
    # Row 5G + 10 deletes the message of row 5G + 7, when the log has it.
    deleted = 5 * every + 7 if 5 * every + 10 <= world.count else None
    for n in range(7, world.count + 1, every):  # (row 1, resume_from's, is not replayed)
        if n != deleted:
            found.append(("message", (MESSAGE_ID_BASE + n,)))
        else:
            found.append(("delete_message", (MESSAGE_ID_BASE + n,)))
    return found


# -- measuring ------------------------------------------------------------------


@dataclass
class Phase:
    key: str
    label: str
    user: User
    form: dict[str, str]
    # "events" (a resumed queue, compared with `events`), "state" (a full
    # register), or an error code the answer must carry.
    expect: str
    events: list[tuple[str, tuple[int, ...]]] | None = None
    concurrency: int = 1
    resume: bool = True


@dataclass
class Answer:
    secs: float
    status: int
    size: int
    body: dict[str, Any]


class Run:
    def __init__(self, args: argparse.Namespace, server: ServerProcess, database: Database):
        self.args = args
        self.server = server
        self.database = database
        self.url = f"http://127.0.0.1:{server.port}"
        # The server has just started: its start is in the window too.
        self.phase_ended = time.monotonic()
        self._pg = psycopg.connect(database.url, autocommit=True)
        row = self._pg.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        self._own_pid = int(row[0])

    def close(self) -> None:
        self._pg.close()

    # The server's loop lag, the CPU of the server and of its database.

    def stats(self) -> dict[str, Any]:
        response = requests.post(
            f"{self.url}/api/internal/stats", data={"secret": SECRET}, timeout=30
        )
        if response.status_code != 200:
            raise BenchError(f"stats answered {response.status_code}: {response.text[:200]}")
        body: dict[str, Any] = response.json()
        return body

    def pg_cpu(self) -> dict[int, float]:
        """CPU seconds of each backend of the benchmark's database but ours."""
        pids = [
            int(row[0])
            for row in self._pg.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid()"
            ).fetchall()
        ]
        cpu: dict[int, float] = {}
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            cpu[pid] = (int(fields[11]) + int(fields[12])) / TICKS
        return cpu

    def settle(self) -> None:
        """Wait until the previous phase has left the server's lag window."""
        wait = self.args.settle - (time.monotonic() - self.phase_ended)
        if wait > 0:
            log(f"  waiting {wait:.0f} s for the loop-lag window to hold this phase alone")
            time.sleep(wait)

    # Requests.

    def request(self, session: requests.Session, phase: Phase) -> Answer:
        started = time.perf_counter()
        response = session.post(
            f"{self.url}/api/v1/register",
            headers={"Authorization": phase.user.authorization},
            data=phase.form,
            timeout=600,
        )
        secs = time.perf_counter() - started
        try:
            body = response.json()
        except ValueError:
            body = {"raw": response.text[:300]}
        return Answer(secs, response.status_code, len(response.content), body)

    def queue_events(self, user: User, queue_id: str) -> list[dict[str, Any]]:
        response = requests.get(
            f"{self.url}/api/v1/events",
            headers={"Authorization": user.authorization},
            params={"queue_id": queue_id, "last_event_id": -1, "dont_block": "true"},
            timeout=60,
        )
        if response.status_code != 200:
            raise BenchError(f"GET /events answered {response.status_code}: {response.text[:300]}")
        events: list[dict[str, Any]] = response.json()["events"]
        return [e for e in events if e.get("type") != "heartbeat"]

    def delete_queue(self, user: User, queue_id: str) -> None:
        requests.delete(
            f"{self.url}/api/v1/events",
            headers={"Authorization": user.authorization},
            data={"queue_id": queue_id},
            timeout=60,
        )

    def judge(self, phase: Phase, answer: Answer) -> str | None:
        """What is wrong with an answer (None: right); removes its queue."""
        body = answer.body
        if phase.expect in ("events", "state"):
            if answer.status != 200 or "queue_id" not in body:
                return f"status {answer.status}: {str(body)[:200]}"
            queue_id = body["queue_id"]
            try:
                if phase.expect == "state":
                    return None if "realm_users" in body else "a register without its state"
                if body.get("resumed_from") != int(phase.form["resume_from"]):
                    return f"resumed_from {body.get('resumed_from')}"
                got = [signature(e) for e in self.queue_events(phase.user, queue_id)]
                want = phase.events or []
                if got != want:
                    pairs = zip(got, want, strict=False)
                    at = next(
                        (i for i, (a, b) in enumerate(pairs) if a != b), min(len(got), len(want))
                    )
                    return f"{len(got)} events, expected {len(want)}; they differ from event {at}"
                return None
            finally:
                self.delete_queue(phase.user, queue_id)
        code = body.get("code")
        if answer.status != 400 or code != phase.expect:
            if answer.status == 200 and "queue_id" in body:
                self.delete_queue(phase.user, body["queue_id"])
            return f"status {answer.status} code {code}, expected 400 {phase.expect}"
        return None

    def measure(self, phase: Phase) -> dict[str, Any]:
        """--repeat requests (each of --concurrency clients) after a warm-up."""
        self.settle()
        log(f"phase {phase.label}")
        lag = LagWatcher(self)
        lag.start()
        local = threading.local()

        def one(_: int) -> Answer:
            if not hasattr(local, "session"):
                local.session = requests.Session()
            return self.request(local.session, phase)

        spy = (
            None
            if self.args.py_spy is None
            else PySpy(self.server.pid, self.args.py_spy, phase, self.args.py_spy_native)
        )
        warm = self.request(requests.Session(), phase)
        total = self.args.repeat * phase.concurrency
        cpu0, pg0 = self.server.cpu_secs(), self.pg_cpu()
        started = time.perf_counter()
        with ThreadPoolExecutor(phase.concurrency) as pool:
            answers = list(pool.map(one, range(total)))
        wall = time.perf_counter() - started
        cpu1, pg1 = self.server.cpu_secs(), self.pg_cpu()
        loop_lag = lag.stop()
        self.phase_ended = time.monotonic()
        profile = None if spy is None else spy.finish()
        wrong = [w for w in (self.judge(phase, a) for a in [warm, *answers]) if w is not None]
        times = sorted(a.secs * 1000 for a in answers)
        pg_secs = sum(pg1[pid] - pg0.get(pid, 0.0) for pid in pg1)
        first = answers[0].body
        return {
            "key": phase.key,
            "user_id": phase.user.user_id,
            "form": {k: v for k, v in phase.form.items() if k not in ZULIP_FORM},
            "concurrency": phase.concurrency,
            "requests": len(answers),
            "first_ms": round(warm.secs * 1000, 1),
            "p50_ms": round(percentile(times, 0.50), 2),
            "p99_ms": round(percentile(times, 0.99), 2),
            "max_ms": round(times[-1], 2),
            "per_sec": round(len(answers) / wall, 1),
            "latencies_ms": [round(a.secs * 1000, 2) for a in answers],
            "response_bytes": answers[-1].size,
            "server_cpu_ms_per_request": round((cpu1 - cpu0) * 1000 / len(answers), 2),
            "postgres_cpu_ms_per_request": round(pg_secs * 1000 / len(answers), 2),
            "loop_lag": loop_lag,
            "answer": first.get("code") or ("resumed" if "resumed_from" in first else "state"),
            "events_expected": None if phase.events is None else len(phase.events),
            "correct": len(wrong) == 0,
            "wrong": wrong[:5],
            **({} if profile is None else {"py_spy": profile}),
        }

    def idle(self) -> dict[str, Any]:
        """The loop's lag with no request: the comparison for the others."""
        self.settle()
        log(f"phase idle: {self.args.idle_secs:g} s without requests")
        lag = LagWatcher(self)
        lag.start()
        cpu0 = self.server.cpu_secs()
        time.sleep(self.args.idle_secs)
        cpu1 = self.server.cpu_secs()
        loop_lag = lag.stop()
        self.phase_ended = time.monotonic()
        return {"secs": self.args.idle_secs, "server_cpu_secs": cpu1 - cpu0, "loop_lag": loop_lag}


def host_steal_secs() -> float:
    """The machine's steal time so far, all CPUs (the 8th field of
    /proc/stat's cpu line, in clock ticks); 0 where there is none."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
        return int(fields[8]) / TICKS
    except (OSError, IndexError, ValueError):
        return 0.0


class LagWatcher:
    """Reads the server's loop lag every LAG_POLL_SECS during a phase and at
    its end: the largest window max and p99 seen (the window is 60 s)."""

    def __init__(self, run: Run):
        self.run = run
        self.reads: list[dict[str, float]] = []
        self.before: dict[str, float] = {}
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="lag", daemon=True)

    def start(self) -> None:
        stats = self.run.stats()
        self.before = stats["loop_lag"]
        self.gc_before = stats["python_gc"]["pauses"]["count"]
        self.began = time.monotonic()
        self.steal_before = host_steal_secs()
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(LAG_POLL_SECS):
            try:
                self.reads.append(self.run.stats()["loop_lag"])
            except (BenchError, requests.RequestException) as exc:
                self.error = str(exc)

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join(60)
        elapsed = time.monotonic() - self.began
        stats = self.run.stats()
        self.reads.append(stats["loop_lag"])
        if self.error is not None:
            raise BenchError(f"reading the server's stats: {self.error}")
        pauses = stats["python_gc"]["pauses"]
        # The GC's stops of 1 ms or more during the phase (the server keeps
        # the last 64): one cause of lag told apart from the others.
        during = [p for p in pauses["recent"] if p["ago_secs"] <= elapsed]
        longest = max(during, key=lambda p: p["ms"], default=None)
        return {
            "window_max_ms": max(r["window_max_ms"] for r in self.reads),
            # Less the time the loop's thread waited for a CPU (the server's
            # sampler reads the kernel's count): what the server's own work
            # stopped the loop for, not the host's other processes.
            "own_window_max_ms": max(r.get("own_window_max_ms", 0.0) for r in self.reads),
            # The loop thread's time on a CPU in the sample of that longest own
            # lag: less than the lag, the thread was blocked (the GIL held by
            # another thread, the disk) for the difference at least.
            "own_window_max_ran_ms": max(
                self.reads, key=lambda r: r.get("own_window_max_ms", 0.0)
            ).get("own_window_max_ran_ms"),
            # ...and the server's other threads' CPU time in that sample.
            "own_window_max_others_ms": max(
                self.reads, key=lambda r: r.get("own_window_max_ms", 0.0)
            ).get("own_window_max_others_ms"),
            "p99_ms": max(r["p99_ms"] for r in self.reads),
            "reads": len(self.reads),
            "window_max_before_ms": self.before["window_max_ms"],
            # CPU time the hypervisor gave other guests while this one had
            # work (/proc/stat's steal): a machine's noisy hour, which the
            # loop's own lag cannot tell from its own work.
            "host_steal_ms_per_sec": round(
                (host_steal_secs() - self.steal_before) * 1000 / max(elapsed, 1e-9), 1
            ),
            "gc": {
                "collections": [
                    after - before
                    for after, before in zip(pauses["count"], self.gc_before, strict=True)
                ],
                "max_ms": 0.0 if longest is None else longest["ms"],
                "max_generation": None if longest is None else longest["generation"],
                # The CPU time of the longest (by CPU) collection: the stop
                # less the collecting thread's wait for a CPU.
                "cpu_max_ms": max((p.get("cpu_ms", p["ms"]) for p in during), default=0.0),
            },
        }


# -- py-spy: where the loop's time goes ---------------------------------------

# Without native frames py-spy need not pause the server: 1,000 samples a
# second time the loop's steps to a millisecond or two. With them (the GC,
# C code) each sample stops the server, so fewer.
SPY_RATE = 1000
SPY_RATE_NATIVE = 100
_REPO_PREFIX = str(REPO) + "/"


class PySpy:
    """`py-spy record --idle` of the server over one phase in Chrome's trace
    format (each stack with its time), reduced to the IO loop's steps: how
    long each callback the loop ran stayed on the main thread's stack (its
    frame's first to last sample: to within a sample or two), the longest
    with where their time went. The server is sampled from outside; with
    --py-spy-native it is paused at each sample: the phase's other figures
    are not the benchmark's."""

    def __init__(self, pid: int, directory: Path, phase: Phase, native: bool):
        directory.mkdir(parents=True, exist_ok=True)
        self.output = directory / f"phase-{phase.key}.json"
        self.rate = SPY_RATE_NATIVE if native else SPY_RATE
        binary = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        command = [binary, "record", "--pid", str(pid), "--rate", str(self.rate), "--idle"]
        command += ["--native"] if native else ["--nonblocking"]
        command += ["--threads", "--format", "chrometrace", "--output", str(self.output)]
        self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(1)  # py-spy attaches

    def finish(self) -> dict[str, Any]:
        self.proc.send_signal(signal.SIGINT)
        try:
            _, err = self.proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        if not self.output.exists():
            return {"error": err.decode(errors="replace")[-500:]}
        return {"rate": self.rate, **loop_steps(json.loads(self.output.read_bytes()))}


def _label(stack: list[dict[str, Any]]) -> str:
    """What a sample of the main thread was doing: the cyclic GC or waiting
    for the GIL (native frames only), else our innermost function [and the
    library's below it]."""
    names = {frame["name"] for frame in stack}
    if any(name.startswith("gc_collect") for name in names):
        return "Python's cyclic GC"
    if "take_gil" in names:
        return "waiting for the GIL"
    ours = lib = ""
    for frame in stack:
        filename = frame["args"]["filename"]
        if not filename.endswith(".py"):
            continue
        where = f"{frame['name']} ({Path(filename).name})"
        if filename.startswith(_REPO_PREFIX) and "/.venv/" not in filename:
            ours, lib = where, ""
        elif ours:
            lib = lib or where
    if not ours:
        python = [f for f in stack if f["args"]["filename"].endswith(".py")]
        inner = python[-1] if python else stack[-1]
        return f"{inner['name']} ({Path(inner['args']['filename']).name})"
    return ours + (f" > {lib}" if lib else "")


def loop_steps(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The main thread's samples rebuilt from the trace's begin/end events.
    A loop step is one callback the loop ran: the first Python frame above
    `Runner.run`, from its first sample to the next sample without it."""
    main = next((e["tid"] for e in events if e["ph"] == "B" and "MainThread" in e["name"]), None)
    stack: list[dict[str, Any]] = []
    samples: list[tuple[int, list[dict[str, Any]]]] = []
    for event in events:
        if event["tid"] != main:
            continue
        if event["ph"] == "B":
            stack.append(event)
        elif stack:
            stack.pop()
        if samples and samples[-1][0] == event["ts"]:
            samples[-1] = (event["ts"], list(stack))
        else:
            samples.append((event["ts"], list(stack)))
    steps: list[dict[str, Any]] = []
    total: dict[str, float] = {}
    current: dict[str, Any] | None = None
    for (ts, frames), (next_ts, _) in itertools.pairwise(samples):
        names = [frame["name"] for frame in frames]
        below = names.index("Runner.run") + 1 if "Runner.run" in names else len(frames)
        entry = next((f for f in frames[below:] if f["args"]["filename"].endswith(".py")), None)
        if current is not None and current["entry"] is not entry:
            steps.append(current)
            current = None
        if entry is None:
            continue  # the loop waiting, or in its own C code
        if current is None:
            current = {"entry": entry, "began": ts, "where": {}}
        current["ended"] = next_ts
        label = _label(frames[below:])
        ms = (next_ts - ts) / 1000
        current["where"][label] = current["where"].get(label, 0.0) + ms
        total[label] = total.get(label, 0.0) + ms
    if current is not None:
        steps.append(current)
    steps.sort(key=lambda step: step["began"] - step["ended"])

    def top(spent: dict[str, float], n: int) -> dict[str, float]:
        ranked = sorted(spent.items(), key=lambda item: -item[1])[:n]
        return {label: round(ms, 1) for label, ms in ranked}

    def ms(step: dict[str, Any]) -> float:
        return round((step["ended"] - step["began"]) / 1000, 1)

    return {
        "steps_seen": len(steps),
        "steps_over_5_ms": sum(1 for step in steps if ms(step) > LOOP_LAG_BAR_MS),
        "longest": [
            {
                "ms": ms(step),
                "callback": _label([step["entry"]]),
                "where": top(step["where"], 5),
            }
            for step in steps[:8]
        ],
        "busy_ms_by_activity": top(total, 15),
    }


# -- plans --------------------------------------------------------------------


class _Capture:
    """Stands for the server's `Database` pool: records the statements one
    of its methods executes (their rows are empty), to be EXPLAINed."""

    def __init__(self) -> None:
        self.statements: list[tuple[str, Any, bool]] = []

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[_Capture]:
        yield self

    async def execute(
        self, query: str, params: Any = None, prepare: bool | None = None, binary: bool = False
    ) -> _Capture:
        # prepare=False: psycopg never prepares it, every execution is planned
        # with its values. binary: the result's format, the same plan.
        self.statements.append((query, params, prepare is not False))
        return self

    async def fetchall(self) -> list[Any]:
        return []

    async def fetchone(self) -> None:
        return None


def server_statement(method: Callable[..., Any], *args: Any) -> tuple[str, Any, bool]:
    """The statement `server.database.db.Database.<method>(*args)` executes, and
    whether psycopg may prepare it (after 5 executions on a connection)."""
    capture = _Capture()
    asyncio.run(method(capture, *args))
    [statement] = capture.statements
    return statement


def _pg_type(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "bigint"
    if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
        return "bigint[]"
    if value is None or isinstance(value, list):
        return "text[]"
    return "text"


def _positional(query: str, params: Any) -> tuple[str, list[Any]]:
    """`query` with $n for its psycopg placeholders, and the values in order."""
    names: list[Any] = []
    values: list[Any] = []

    def number(match: re.Match[str]) -> str:
        if match.group(0) == "%%":
            return "%"
        key: Any = match.group(1) if match.group(1) else len(names)
        if key not in names:
            names.append(key)
            values.append(params[key])
        return f"${names.index(key) + 1}"

    return re.sub(r"%%|%\((\w+)\)s|%s", number, query), values


def explain_statement(
    conn: psycopg.Connection[Any], query: str, params: Any, prepared_by_server: bool
) -> dict[str, Any]:
    """EXPLAIN (ANALYZE, BUFFERS) of a statement as a one-off (a custom plan,
    as psycopg's first 5 executions on a connection), and as a prepared
    statement at its 7th execution (psycopg prepares a query after 5; then
    PostgreSQL plans 5 times with the values, and from then on may keep a
    generic plan, made without them)."""
    custom = "\n".join(
        row[0]
        for row in conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS) " + query, params, prepare=False
        ).fetchall()
    )
    text, values = _positional(query, params)
    types = ", ".join(_pg_type(value) for value in values)
    conn.execute(f"PREPARE bench_statement({types}) AS {text}".encode(), prepare=False)
    try:
        cur = psycopg.ClientCursor(conn)
        call = "EXECUTE bench_statement(" + ", ".join(["%s"] * len(values)) + ")"
        for _ in range(6):
            cur.execute(call, values)
            cur.fetchall()
        cur.execute("EXPLAIN (ANALYZE, BUFFERS) " + call, values)
        prepared = "\n".join(row[0] for row in cur.fetchall())
    finally:
        conn.execute("DEALLOCATE bench_statement", prepare=False)
    plan: dict[str, Any] = {
        "custom": custom,
        "prepared": prepared,
        "prepared_by_server": prepared_by_server,
    }
    for kind in ("custom", "prepared"):
        plan[f"{kind}_ms"] = _execution_ms(plan[kind])
        plan[f"{kind}_seq_scan"] = "Seq Scan on event_log" in plan[kind]
        plan[f"{kind}_gin"] = "event_log_recipients" in plan[kind]
    return plan


def explain(
    database: Database, world: World, choice: dict[str, Any], limit: int
) -> dict[str, dict[str, Any]]:
    """The plans of the server's reads of the log for the phases' users,
    as the server's `Database.log_for_user` and `deleted_messages` say them
    (a first page is `RESUME_PAGE` rows, or one more than the `limit` of
    events a resume replays if fewer, server/durability/resume.py)."""
    member, public = choice["member"].user_id, choice["public"].user_id
    guest = world.guest.user_id
    ids = {
        "guest": sorted(i for kind, (i, *_) in choice["guest"] if kind == "message"),
        "member": sorted(i for kind, (i, *_) in choice["member_recent"] if kind == "message"),
    }
    first, last, recent, realm = world.first, world.last, choice["recent"], world.realm_id
    first_page = min(RESUME_PAGE, limit + 1)

    def page(user: int, after: int, public: bool) -> tuple[str, Any]:
        return server_statement(
            ServerDb.log_for_user, after, last, realm, user, public, None, first_page
        )

    statements = {
        "log_for_user: guest, from the first position (a)": page(guest, first, False),
        "log_for_user: member, from the recent position (c)": page(member, recent, False),
        "log_for_user: member, from the first position, first page (d)": page(member, first, False),
        "log_for_user: all_public_streams member, recent (e)": page(public, recent, True),
        "log_for_user: member, near-full position, first page (g)": page(
            member, choice["near_full"], False
        ),
        "deleted_messages: guest's messages, whole log (a)": server_statement(
            ServerDb.deleted_messages, realm, ids["guest"], first, last
        ),
        "deleted_messages: member's messages, recent (c)": server_statement(
            ServerDb.deleted_messages, realm, ids["member"], recent, last
        ),
    }
    with psycopg.connect(database.url, autocommit=True, prepare_threshold=None) as conn:
        return {name: explain_statement(conn, *statement) for name, statement in statements.items()}


def _execution_ms(plan: str) -> float | None:
    match = re.search(r"Execution Time: ([\d.]+) ms", plan)
    return float(match.group(1)) if match else None


# -- report ---------------------------------------------------------------------


def _mib(size: int) -> str:
    return f"{size / 2**20:,.0f} MiB"


def _plan_kind(plan: dict[str, Any], kind: str) -> str:
    """The scans of a plan: the indexes it reads, or its sequential scans."""
    scans = re.findall(
        r"(?:Index Scan|Index Only Scan) (?:Backward )?using (\w+)|Bitmap Index Scan on (\w+)"
        r"|(Seq Scan on \w+)",
        plan[kind],
    )
    names = dict.fromkeys(next(name for name in groups if name) for groups in scans)
    return ", ".join(names) or "no scan"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _gc(lag: dict[str, Any]) -> str:
    """The longest GC stop of a phase, its generation, and the longest CPU
    time of a collection."""
    gc = lag.get("gc")
    if not gc or gc["max_generation"] is None:
        return "-"
    return f"{gc['max_ms']:.1f} ({gc['max_generation']}) {gc.get('cpu_max_ms', 0):.1f}"


def render(results: dict[str, Any]) -> str:
    world = results.get("world", {})
    logged = world.get("log", {})
    lines = [f"server code: {results['source']}", f"date: {results['date']}"]
    if logged.get("rows"):
        lines += [
            "realm: " + ", ".join(f"{v:,} {k}" for k, v in world["rows"].items()),
            f"event log: {logged['rows']:,} rows, {_mib(logged['notice_bytes'])} of notices"
            f" (mean {logged['mean_notice_bytes']:,} bytes); pg_total_relation_size"
            f" {_mib(logged.get('total_relation_bytes', 0))} (heap"
            f" {_mib(logged.get('heap_bytes', 0))}, indexes {_mib(logged.get('index_bytes', 0))})",
            f"  written in {logged['write_secs']} s; background updates (indexes)"
            f" {logged.get('index_secs')} s; VACUUM ANALYZE {logged.get('vacuum_analyze_secs')} s",
            "  indexes: "
            + ", ".join(f"{k} {_mib(v)}" for k, v in logged.get("indexes", {}).items()),
        ]
        for key, text in world.get("users", {}).items():
            lines.append(f"  {key}: {text}")
    phases = results.get("phases", {})
    if phases:
        lines += [
            "",
            f"{'phase':<46}{'answer':>24}{'first':>8}{'p50':>8}{'p99':>8}{'max':>8}"
            f"{'srv CPU':>9}{'PG CPU':>8}{'lag max':>9}{'own max':>9}{'ran':>8}{'others':>8}"
            f"{'lag p99':>9}"
            f"{'GC max':>14}{'steal':>7}{'ok':>4}",
            f"{'':<46}{'':>24}{'ms':>8}{'ms':>8}{'ms':>8}{'ms':>8}{'ms/req':>9}{'ms/req':>8}"
            f"{'ms':>9}{'ms':>9}{'ms':>8}{'ms':>8}{'ms':>9}{'ms (gen) cpu':>14}{'ms/s':>7}",
        ]
    idle = results.get("idle")
    if idle:
        lag = idle["loop_lag"]
        lines.append(
            f"{'idle (' + str(idle['secs']) + ' s, no request)':<46}{'':>24}{'':>8}{'':>8}"
            f"{'':>8}{'':>8}{'':>9}{'':>8}{lag['window_max_ms']:>9}"
            f"{lag.get('own_window_max_ms', '-'):>9}{_ms(lag.get('own_window_max_ran_ms')):>8}"
            f"{_ms(lag.get('own_window_max_others_ms')):>8}"
            f"{lag['p99_ms']:>9}{_gc(lag):>14}"
        )
    for name, p in phases.items():
        answer = p["answer"] + (f" ({p['events_expected']})" if p["events_expected"] else "")
        lines.append(
            f"{name:<46}{answer:>24}{p['first_ms']:>8}{p['p50_ms']:>8}{p['p99_ms']:>8}"
            f"{p['max_ms']:>8}{p['server_cpu_ms_per_request']:>9}"
            f"{p['postgres_cpu_ms_per_request']:>8}{p['loop_lag']['window_max_ms']:>9}"
            f"{p['loop_lag']['own_window_max_ms']:>9}"
            f"{_ms(p['loop_lag'].get('own_window_max_ran_ms')):>8}"
            f"{_ms(p['loop_lag'].get('own_window_max_others_ms')):>8}"
            f"{p['loop_lag']['p99_ms']:>9}{_gc(p['loop_lag']):>14}"
            f"{p['loop_lag'].get('host_steal_ms_per_sec', '-'):>7}"
            f"{'yes' if p['correct'] else 'NO':>4}"
        )
    ratios = results.get("ratios")
    if ratios:
        lines += [
            "",
            f"resume (c) / register with state (f): latency p50 {ratios['p50']}x, p99"
            f" {ratios['p99']}x, server CPU {ratios['server_cpu']}x, PostgreSQL CPU"
            f" {ratios['postgres_cpu']}x",
        ]
    bar = results.get("bar")
    if bar:
        lines.append(
            f"bar: the IO loop's longest stop of the server's making over the resume phases"
            f" (own lag max, or a GC collection's CPU time if longer): {bar['value_ms']} ms"
            f" <= {bar['limit_ms']} ms: {'met' if bar['met'] else 'MISSED'} ({bar['phase']});"
            f" lag max with the host's share: {bar['lag_max_ms']} ms ({bar['lag_max_phase']})"
        )
    plans = results.get("plans", {})
    if plans:
        lines += [
            "",
            "the server's statements, EXPLAIN ANALYZE: one-off (custom plan) / prepared,"
            " 7th execution (what a pooled connection would settle on; * the server"
            " never prepares the statement: it runs the custom plan)",
        ]
        for name, plan in plans.items():
            never = "" if plan["prepared_by_server"] else "*"
            lines.append(
                f"  {name}: {plan['custom_ms']} ms ({_plan_kind(plan, 'custom')})"
                f" / {never}{plan['prepared_ms']} ms ({_plan_kind(plan, 'prepared')})"
            )
    for problem in results.get("problems", []):
        lines.append(f"WRONG: {problem}")
    if results.get("explain_printed"):
        for name, plan in results.get("plans", {}).items():
            lines += ["", f"-- {name}: custom plan"]
            lines.append(plan["custom"])
            if "prepared" in plan:
                lines += [f"-- {name}: prepared statement, 7th execution", plan["prepared"]]
    return "\n".join(lines)


# -- main ---------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default=DEFAULT_BASE_URL)
    parser.add_argument("--users", type=int, default=2000, help="members (plus one guest)")
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--subs-per-user", type=int, default=5)
    parser.add_argument("--messages", type=int, default=5000, help="in the domain's tables")
    parser.add_argument("--log-bytes", type=int, default=1 << 30)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--queue-max-events", type=int, default=QUEUE_MAX_EVENTS)
    parser.add_argument("--resume-max-events", type=int, default=RESUME_MAX_EVENTS)
    parser.add_argument(
        "--settle",
        type=float,
        default=LAG_WINDOW_SECS + 1,
        help="seconds between phases, so that each has the server's lag window alone",
    )
    parser.add_argument("--idle-secs", type=float, default=10.0)
    parser.add_argument("--explain", action="store_true", help="print the plans too")
    parser.add_argument(
        "--py-spy",
        type=Path,
        metavar="DIR",
        help="record the server with py-spy in each phase (diagnosis: perturbs the figures)",
    )
    parser.add_argument(
        "--py-spy-native",
        action="store_true",
        help="with --py-spy: native frames too (the GC), pausing the server at each sample",
    )
    parser.add_argument("--keep-db", action="store_true", help="leave the database (drop it!)")
    parser.add_argument("--json", action="store_true", help="JSON on stdout, table on stderr")
    args = parse_with_quick(parser, argv, QUICK)
    if args.users < 2 * GUEST_CHANNEL_MEMBERS or args.streams < 10:
        parser.error("at least 20 users and 10 streams")
    if args.subs_per_user > args.streams or args.repeat < 1 or args.concurrency < 1:
        parser.error("--subs-per-user above --streams, or --repeat/--concurrency below 1")
    if args.repeat * args.concurrency + 1 > MAX_QUEUES_PER_USER:
        # A phase's queues are read and removed once it has ended.
        parser.error(f"--repeat x --concurrency + 1 above {MAX_QUEUES_PER_USER} queues a user")
    return args


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def choose_users(database: Database, world: World, args: argparse.Namespace) -> dict[str, Any]:
    """The phases' users and positions, and what each resume must answer."""
    recent = world.last - max(1, round(world.count * RECENT_SHARE))
    with psycopg.connect(database.url) as conn:
        counts = []
        for user in world.members[GUEST_CHANNEL_MEMBERS : GUEST_CHANNEL_MEMBERS + 20]:
            row = conn.execute(
                "SELECT count(*) FROM event_log WHERE recipients @> ARRAY[%s::bigint]",
                (user.user_id,),
            ).fetchone()
            assert row is not None
            counts.append((int(row[0]), user))
        counts.sort(key=lambda pair: -pair[0])
        (member_rows, member), (_, public) = counts[0], counts[1]
        guest_rows = expected_events(conn, world.guest.user_id, world.first, world.last, False)
        choice = {
            "recent": recent,
            "member": member,
            "member_rows": member_rows,
            "public": public,
            "guest": guest_by_construction(world),
            "member_recent": expected_events(conn, member.user_id, recent, world.last, False),
            "public_recent": expected_events(conn, public.user_id, recent, world.last, True),
        }
        # Phase g: the position after which the member has NEAR_FULL of a
        # resume's worth of rows (the most a resume that succeeds delivers).
        row = conn.execute(
            "SELECT position FROM event_log WHERE recipients @> ARRAY[%s::bigint]"
            " ORDER BY position DESC OFFSET %s LIMIT 1",
            (member.user_id, round(resume_limit(args) * NEAR_FULL)),
        ).fetchone()
        assert row is not None
        choice["near_full"] = int(row[0])
        choice["member_near_full"] = expected_events(
            conn, member.user_id, choice["near_full"], world.last, False
        )
        row = conn.execute(
            "SELECT count(*) FROM event_log WHERE recipients @> ARRAY[%s::bigint]",
            (world.guest.user_id,),
        ).fetchone()
        assert row is not None
        guest_logged = int(row[0])
    if guest_rows != choice["guest"]:
        raise BenchError(
            f"the guest's rows in the log ({len(guest_rows)}) are not those written for them"
            f" ({len(choice['guest'])})"
        )
    if member_rows <= resume_limit(args) or len(guest_rows) >= resume_limit(args):
        raise BenchError(
            f"phase d needs the member in more rows than a resume replays ({member_rows} <="
            f" {resume_limit(args)}) and phase a the guest in fewer ({len(guest_rows)})"
        )
    world.log["guest_rows"] = guest_logged
    return choice


def resume_limit(args: argparse.Namespace) -> int:
    """The most events a resume replays on the benchmark's server."""
    return int(min(args.resume_max_events, args.queue_max_events))


def phases_of(world: World, choice: dict[str, Any], args: argparse.Namespace) -> list[Phase]:
    guest, member, public = world.guest, choice["member"], choice["public"]
    first, recent = str(world.first), str(choice["recent"])
    return [
        Phase(
            "a",
            "a. guest, resume_from the log's first position",
            guest,
            {**ZULIP_FORM, "resume_from": first},
            "events",
            choice["guest"],
        ),
        Phase(
            "b",
            "b. guest, resume_from=0 (refused)",
            guest,
            {**ZULIP_FORM, "resume_from": "0"},
            "RESUME_POSITION_UNKNOWN",
        ),
        Phase(
            "c",
            "c. member, resume_from the newest 1 %",
            member,
            {**ZULIP_FORM, "resume_from": recent},
            "events",
            choice["member_recent"],
        ),
        Phase(
            "d",
            "d. member, resume_from the first (expired)",
            member,
            {**ZULIP_FORM, "resume_from": first},
            "RESUME_EXPIRED",
        ),
        Phase(
            "e",
            "e. member, all_public_streams, newest 1 %",
            public,
            {**ZULIP_FORM, "all_public_streams": "true", "resume_from": recent},
            "events",
            choice["public_recent"],
        ),
        Phase("f", "f. member of c, register with state", member, dict(ZULIP_FORM), "state"),
        Phase(
            "g",
            f"g. member, {NEAR_FULL:.0%} of a resume's worth",
            member,
            {**ZULIP_FORM, "resume_from": str(choice["near_full"])},
            "events",
            choice["member_near_full"],
        ),
        Phase(
            "ax",
            f"a x{args.concurrency}. guest, first position, {args.concurrency} at once",
            guest,
            {**ZULIP_FORM, "resume_from": first},
            "events",
            choice["guest"],
            concurrency=args.concurrency,
        ),
    ]


def summarize(results: dict[str, Any], phases: list[Phase]) -> None:
    measured = results["phases"]
    keys = {phase.key: phase.label for phase in phases}
    c, f = measured[keys["c"]], measured[keys["f"]]

    def ratio(a: float, b: float) -> float | None:
        return round(a / b, 3) if b else None

    results["ratios"] = {
        "p50": ratio(c["p50_ms"], f["p50_ms"]),
        "p99": ratio(c["p99_ms"], f["p99_ms"]),
        "server_cpu": ratio(c["server_cpu_ms_per_request"], f["server_cpu_ms_per_request"]),
        "postgres_cpu": ratio(c["postgres_cpu_ms_per_request"], f["postgres_cpu_ms_per_request"]),
    }
    resumes = [keys[k] for k in ("a", "b", "c", "d", "e", "g", "ax")]

    def stop(label: str) -> float:
        # The sampler sees a stop only when it overlaps one of its wake-ups
        # (every 100 ms); the GC's stops are timed whole. The longer counts.
        # The sampler's own lag leaves out the time the loop's thread waited
        # for a CPU: on two cores shared with PostgreSQL and the clients, the
        # host's doing, not the resume's.
        lag = measured[label]["loop_lag"]
        return float(max(lag["own_window_max_ms"], lag["gc"]["cpu_max_ms"]))

    def lag_max(label: str) -> float:
        return float(measured[label]["loop_lag"]["window_max_ms"])

    worst = max(resumes, key=stop)
    value = stop(worst)
    slowest = max(resumes, key=lag_max)
    results["bar"] = {
        "value_ms": value,
        "limit_ms": LOOP_LAG_BAR_MS,
        "met": value <= LOOP_LAG_BAR_MS,
        "phase": worst,
        "lag_max_ms": lag_max(slowest),
        "lag_max_phase": slowest,
    }
    for label, phase in measured.items():
        results["problems"] += [f"{label}: {wrong}" for wrong in phase["wrong"]]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    database = Database(args.database_url)
    # Removed only once the server has stopped: it saves its queues there.
    workdir = Path(tempfile.mkdtemp(prefix="eventq-resume-bench-"))
    server: ServerProcess | None = None
    run: Run | None = None
    results: dict[str, Any] = {
        "source": source_state(),
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "database": database.name,
        "workdir": str(workdir),
        "config": {
            key: getattr(args, key)
            for key in (*QUICK, "subs_per_user", "quick", "explain", "keep_db")
        },
        "problems": [],
        "explain_printed": args.explain,
    }
    status = 1
    try:
        log(f"creating {database.name}")
        database.create()
        world = build_domain(database, args)
        results["world"] = {"rows": world.rows, "log": world.log}
        log("realm: " + ", ".join(f"{v} {k}" for k, v in world.rows.items()))
        build_log(database, world, args)
        results["problems"] += check_log_form(database, world)
        log("background updates: event_log_realm_index, event_log_recipients_index")
        build_indexes(database, world)
        choice = choose_users(database, world, args)
        count = world.log["rows"]
        results["world"]["users"] = {
            "guest": f"user {world.guest.user_id}, in {world.log['guest_rows']} rows",
            "member (a, c, d, f)": f"user {choice['member'].user_id}, in"
            f" {choice['member_rows']:,} rows ({100 * choice['member_rows'] / count:.2f} %)",
            "member with all_public_streams (e)": f"user {choice['public'].user_id}",
            "recent position (c, e)": f"{choice['recent']} (the newest"
            f" {world.last - choice['recent']:,} rows)",
            "near-full position (g)": f"{choice['near_full']} (the newest"
            f" {world.last - choice['near_full']:,} rows)",
        }
        server = ServerProcess(
            database.url,
            workdir,
            SECRET,
            {
                "EVENTQ_QUEUE_MAX_EVENTS": str(args.queue_max_events),
                "EVENTQ_RESUME_MAX_EVENTS": str(args.resume_max_events),
                # Pruning goes on as deployed, with room for this log.
                "EVENTQ_EVENT_LOG_RETENTION_BYTES": str(max(1 << 30, 4 * args.log_bytes)),
            },
        )
        log(f"server: starting on port {server.port} (log {server.log_path})")
        server.start(timeout=120)
        run = Run(args, server, database)
        position = run.stats()["stream"]["position"]
        if position != world.last:
            raise BenchError(f"the server's stream is at {position}, the log ends at {world.last}")
        phases = phases_of(world, choice, args)
        results["idle"] = run.idle()
        results["phases"] = {}
        for phase in phases:
            results["phases"][phase.label] = run.measure(phase)
        summarize(results, phases)
        server.check()
        results["plans"] = explain(database, world, choice, resume_limit(args))
        status = 0 if not results["problems"] else 1
    except (BenchError, psycopg.Error, requests.RequestException) as exc:
        log(f"benchmark failed: {exc!r}")
        results["problems"].append(str(exc))
    except KeyboardInterrupt:
        log("interrupted")
        status = 130
    finally:
        if run is not None:
            run.close()
        if server is not None:
            server.stop()
        if args.keep_db:
            log(f"kept database {database.name}: drop it when done")
        else:
            try:
                database.drop()
            except psycopg.Error as exc:
                log(f"could not drop database {database.name}: {exc}")
        shutil.rmtree(workdir, ignore_errors=True)
    results["completed"] = status == 0
    report = render(results)
    if args.json:
        print(report, file=sys.stderr)
        print(json.dumps(results, indent=2, default=str))
    else:
        print(report)
    return status


if __name__ == "__main__":
    sys.exit(main())
