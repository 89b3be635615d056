"""A webhook receiver on loopback for the notification worker's tests, doing
what docs/notifications.md ("The webhook") asks of one, with its own code
(not server/notifications/webhook.py's, so that a wrong signature is caught):
it recomputes the HMAC-SHA256 of `<timestamp>.<body>`, refuses a timestamp
more than five minutes from its clock, and refuses a delivery id it already
took. It can be told to answer 500 to the next calls, or to take the next
calls and lose their answers (the connection closed before any)."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import http.server
import json
import threading
import time
from typing import Any

import requests
from requests.structures import CaseInsensitiveDict

from tests.support import wait_for

TOLERANCE_SECS = 300


@dataclasses.dataclass(frozen=True)
class Call:
    """One POST and the status it was answered."""

    headers: CaseInsensitiveDict[str]  # urllib sends `X-eventq-delivery`
    body: bytes
    status: int
    reason: str

    @property
    def delivery(self) -> str:
        return self.headers.get("X-Eventq-Delivery", "")

    def json(self) -> Any:
        return json.loads(self.body)


class WebhookReceiver:
    """http.server in a thread; `calls` holds every POST, `accepted` the
    bodies it took (2xx), in order. Fields shared with the server's threads
    are guarded by `_lock`."""

    def __init__(self, secret: str):
        self.secret = secret.encode()
        self._lock = threading.Lock()
        self.calls: list[Call] = []
        self.seen: set[str] = set()
        self._fail = 0
        self._drop = 0
        # Added to the receiver's clock: a replay "later" without waiting.
        self.clock_offset = 0.0
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                headers = CaseInsensitiveDict(self.headers.items())
                status, reason = receiver._judge(headers, body)
                with receiver._lock:
                    receiver.calls.append(Call(headers, body, status, reason))
                    drop = status == 200 and receiver._drop > 0
                    receiver._drop -= drop
                if drop:
                    self.close_connection = True
                    return
                payload = reason.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/eventq-hook"

    def start(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def fail_next(self, count: int) -> None:
        with self._lock:
            self._fail = count

    def drop_next(self, count: int) -> None:
        """Take the next `count` good calls, then close without answering."""
        with self._lock:
            self._drop = count

    def forget(self) -> None:
        """Drop the delivery ids taken (a receiver keeps them five minutes)."""
        with self._lock:
            self.seen.clear()

    def _judge(self, headers: CaseInsensitiveDict[str], body: bytes) -> tuple[int, str]:
        delivery = headers.get("X-Eventq-Delivery", "")
        timestamp = headers.get("X-Eventq-Timestamp", "")
        signature = headers.get("X-Eventq-Signature", "")
        if not delivery or not timestamp.isdigit() or not signature:
            return 400, "missing the delivery, timestamp or signature header"
        digest = hmac.new(self.secret, timestamp.encode() + b"." + body, hashlib.sha256)
        if not hmac.compare_digest(signature, "v1=" + digest.hexdigest()):
            return 401, "bad signature"
        with self._lock:
            if abs(time.time() + self.clock_offset - int(timestamp)) > TOLERANCE_SECS:
                return 401, "timestamp too far from now"
            if delivery in self.seen:
                return 409, "delivery already taken"
            if self._fail > 0:
                self._fail -= 1
                return 500, "told to fail"
            self.seen.add(delivery)
        return 200, "ok"

    def accepted(self) -> list[Call]:
        with self._lock:
            return [call for call in self.calls if call.status == 200]

    def wait_accepted(self, condition: Any, what: str, timeout: float = 30.0) -> list[Call]:
        """The accepted calls once `condition(accepted calls)` holds."""
        return list(
            wait_for(
                lambda: (taken := self.accepted()) and condition(taken) and taken, timeout, what
            )
        )

    def replay(self, call: Call, changed: dict[str, str] | None = None) -> requests.Response:
        """POST a captured call again (its headers `changed`), as someone who
        copied it would."""
        headers = CaseInsensitiveDict(call.headers)
        for name in ("Host", "Content-Length", "Connection"):
            headers.pop(name, None)
        headers.update(changed or {})
        return requests.post(self.url, data=call.body, headers=headers, timeout=30)
