"""A schemathesis check of our own (loaded with SCHEMATHESIS_HOOKS by
test_schemathesis.py): a request answered with an error changed nothing.

After every response the user's queues are read from the server's internal
stats endpoint; an error response (4xx or 5xx) must leave them exactly as the
previous response left them. EVENTQ_ST_URL, EVENTQ_ST_SECRET and
EVENTQ_ST_USER_ID say where and whose.
"""

from __future__ import annotations

import os
from typing import Any

import requests
import schemathesis


def _queues() -> frozenset[str]:
    response = requests.post(
        f"{os.environ['EVENTQ_ST_URL']}/api/internal/stats",
        data={"secret": os.environ["EVENTQ_ST_SECRET"], "user_id": os.environ["EVENTQ_ST_USER_ID"]},
        timeout=10,
    )
    response.raise_for_status()
    return frozenset(queue["queue_id"] for queue in response.json()["user_queues"])


@schemathesis.check
class ErrorsChangeNothing:
    """An error response left the user's queues as they were."""

    def __init__(self) -> None:
        self.known: frozenset[str] | None = None

    def after_response(self, ctx: Any, response: Any, case: Any) -> None:
        now = _queues()
        before, self.known = self.known, now
        if response.status_code >= 400 and before is not None and now != before:
            raise AssertionError(
                f"{case.operation.label} answered {response.status_code} but changed the"
                f" user's queues: {sorted(before ^ now)}"
            )
