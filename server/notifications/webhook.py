"""The notification webhook: a signed JSON POST per user batch, for a
backend that sends mobile push or SMS its own way (docs/notifications.md,
"The webhook").

Each call carries three headers:
- `X-Eventq-Delivery`: the batch's id, the same on every retry of it;
- `X-Eventq-Timestamp`: when this try was signed, seconds since the epoch;
- `X-Eventq-Signature`: `v1=` and the hex HMAC-SHA256, keyed with
  `EVENTQ_NOTIFICATION_WEBHOOK_SECRET`, of `<timestamp>.<body>`.

A receiver recomputes the signature over the raw body, refuses a timestamp
more than five minutes from its clock, and refuses a delivery id it has
already taken, with 409: a copied call cannot be replayed later, and a retry
of a call whose answer was lost is recognised. Any 2xx answer is success, and
so is 409 (the receiver has the call already: retrying it could only be
refused again, up to the last try, and the batch would end `failed` although
delivered); anything else, or no answer within the timeout, is retried with
backoff.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import ssl
import time
import urllib.parse

from server.notifications.mail import SendFailed

SIGNATURE_VERSION = "v1"
# What a receiver should accept between the signing and its own clock.
TOLERANCE_SECS = 300
# A receiver's answer to a delivery id it already took.
ALREADY_TAKEN = 409


def signature(secret: str, timestamp: int, body: bytes) -> str:
    signed = str(timestamp).encode() + b"." + body
    digest = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return f"{SIGNATURE_VERSION}={digest}"


class WebhookClient:
    """Calls the webhook on one HTTP/1.1 connection kept open across the
    batches of a tick (`close` ends it). Worker thread only."""

    def __init__(self, url: str, secret: str, timeout_secs: float):
        parts = urllib.parse.urlsplit(url)
        assert parts.scheme in ("http", "https"), url
        assert parts.hostname, url
        self.url = url
        self.secret = secret
        self.timeout_secs = timeout_secs
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._connection: http.client.HTTPConnection | None = None

    def _open(self) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(
                self._host,
                self._port,
                timeout=self.timeout_secs,
                context=ssl.create_default_context(),
            )
        return http.client.HTTPConnection(self._host, self._port, timeout=self.timeout_secs)

    def post(self, body: bytes, delivery_id: str, now: float | None = None) -> None:
        """POST `body` (JSON) signed; `SendFailed` unless the answer is 2xx
        or 409 (`ALREADY_TAKEN`). A kept connection the receiver closed
        while idle is opened again once (a retry of the same delivery id:
        a receiver that took it answers 409)."""
        timestamp = int(time.time() if now is None else now)
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "eventq-notifications",
            "X-Eventq-Delivery": delivery_id,
            "X-Eventq-Timestamp": str(timestamp),
            "X-Eventq-Signature": signature(self.secret, timestamp, body),
        }
        for attempt in (1, 2):
            fresh = self._connection is None
            if self._connection is None:
                self._connection = self._open()
            try:
                self._connection.request("POST", self._path, body=body, headers=headers)
                response = self._connection.getresponse()
                detail = response.read(65536)
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as exc:
                self.close()
                if fresh or attempt == 2:
                    raise SendFailed(f"the webhook at {self.url} is unreachable: {exc}") from exc
                continue
            except (http.client.HTTPException, OSError) as exc:
                self.close()
                raise SendFailed(f"the webhook at {self.url} is unreachable: {exc}") from exc
            if response.will_close:
                self.close()
            if 200 <= response.status < 300 or response.status == ALREADY_TAKEN:
                return
            text = detail[:500].decode("utf-8", "replace")
            raise SendFailed(f"the webhook answered {response.status}: {text}")

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()
