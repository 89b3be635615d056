"""schemathesis against the running server, driven by its OpenAPI document
(a client's mistake must be a documented error, never a 5xx or a change):
generated requests to every documented operation (the events API,
and every domain endpoint from its route), and every check
but one: no 5xx, every response (status, headers, body) as documented,
schema-violating requests refused; and ours, that a request answered with an
error changed none of the user's queues and none of the realm's rows
(tests/server/schemathesis_hooks.py).

Excluded: `positive_data_acceptance`, which expects every schema-valid request
to succeed; a made-up `queue_id` is schema-valid and is rightly refused with
BAD_EVENT_QUEUE_ID.

A bounded run here: every operation's coverage phase (each parameter's
boundaries, wrong types, missing required ones: about 1,050 cases), then
EVENTQ_SCHEMATHESIS_EXAMPLES generated cases per operation (default 25) and
the stateful phase; about 2,000 requests in all. A long one (its time budget
grows with the examples):

    EVENTQ_SCHEMATHESIS_EXAMPLES=5000 ./deploy/test.sh tests/server/test_schemathesis.py -s
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO, SECRET, ServerProcess, World

EXAMPLES = int(os.environ.get("EVENTQ_SCHEMATHESIS_EXAMPLES", "25"))
# The run's cost: about 1,050 coverage cases plus 36 requests per example
# (33 operations), 15-20 ms of CPU each (schemathesis, our check, the
# server). 25 examples took 52 s on .ci/slow (one core shared with a busy
# loop), where each example more costs about 1 s: 4 s an example keeps a
# margin of 3x and more for a long run.
BUDGET_SECS = 180 + 4 * EXAMPLES


@pytest.mark.timeout(BUDGET_SECS)
def test_generated_requests_find_no_server_error_and_no_undocumented_response(
    start_server, world: World, database_url: str
):
    # No GC sweep during the run: a generated lifespan of 1 s would otherwise
    # end a queue between two requests, and our check would blame the next.
    server: ServerProcess = start_server(EVENTQ_GC_INTERVAL_SECS="3600")
    user = world.user()
    token = base64.b64encode(f"{user.email}:{user.api_key}".encode()).decode()
    command = [
        str(Path(sys.executable).parent / "schemathesis"),
        "run",
        f"{server.url}/api/v1/openapi.json",
        "--url", server.url,
        "--max-examples", str(EXAMPLES),
        "--checks", "all",
        "--exclude-checks", "positive_data_acceptance",
        "--header", f"Authorization: Basic {token}",
        "--request-timeout", "20",
        "--seed", os.environ.get("EVENTQ_SCHEMATHESIS_SEED", "1"),
    ]  # fmt: skip
    env = os.environ | {
        # Our own check (tests/server/schemathesis_hooks.py): an error
        # response changed none of the user's queues.
        "SCHEMATHESIS_HOOKS": "tests.server.schemathesis_hooks",
        "PYTHONPATH": str(REPO),
        "EVENTQ_ST_URL": server.url,
        "EVENTQ_ST_SECRET": SECRET,
        "EVENTQ_ST_USER_ID": str(user.user_id),
        "EVENTQ_ST_REALM_ID": str(user.realm_id),
        "EVENTQ_ST_DATABASE_URL": database_url,
    }
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            # Before pytest's own timeout, which would lose schemathesis' output.
            timeout=BUDGET_SECS - 30,
            check=False,
            cwd=server.state_dir,
            env=env,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else ""
        pytest.fail(f"schemathesis ran past {exc.timeout:g} s; its output ends:\n{out[-8000:]}")
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-2000:]
    print(done.stdout[done.stdout.find("API Operations:") :])  # shown with -s
    assert " 0 generated" not in done.stdout
    # The server stayed healthy and logged no error of its own.
    assert server.stats()["in_flight"] == 1  # only this stats request
    assert " ERROR " not in server.settled_log(), server.log()[-4000:]
