"""A real SMTP server on loopback for the notification worker's tests
(aiosmtpd, in a thread of its own): it keeps what it accepts, and can be
told to refuse the next emails with a 4xx, as a greylisting or overloaded
server does, or to hang in DATA until released, to kill the worker there."""

from __future__ import annotations

import asyncio
import dataclasses
import email
import email.policy
import threading
import time
from email.message import EmailMessage
from typing import Any

from aiosmtpd.controller import Controller

from tests.support import wait_for


@dataclasses.dataclass(frozen=True)
class Received:
    """An email the server accepted (answered 250 to its DATA)."""

    mail_from: str
    rcpt_tos: tuple[str, ...]
    message: EmailMessage
    at: float  # time.time() when accepted

    def plain(self) -> str:
        part = self.message.get_body(("plain",))
        assert part is not None, f"no text/plain part in:\n{self.message}"
        return str(part.get_content())

    def html(self) -> str:
        part = self.message.get_body(("html",))
        assert part is not None, f"no text/html part in:\n{self.message}"
        return str(part.get_content())


class Mailbox:
    """The aiosmtpd handler. `handle_DATA` runs on the server's loop; the rest
    is called from the test's thread. Every field below is guarded by
    `_lock`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.received: list[Received] = []
        # DATA commands seen, accepted or not, and the times of the refused ones.
        self.attempts = 0
        self.refused_at: list[float] = []
        # How many of the next DATA commands to refuse with a 4xx.
        self._refuse = 0
        # Whether the next DATA hangs until `release`; set when one does, and
        # when the client went away while it hung (the email not accepted).
        self._hang_next = False
        self.hanging = threading.Event()
        self.abandoned = threading.Event()
        self._release: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None

    # -- told by the test -------------------------------------------------

    def refuse_next(self, count: int) -> None:
        with self._lock:
            self._refuse = count

    def hang_next(self) -> None:
        with self._lock:
            self._hang_next = True

    def release(self) -> None:
        """Let a hanging DATA go on (and accept its email if its client is
        still there)."""
        with self._lock:
            release, self._release = self._release, None
        if release is not None:
            loop, event = release
            loop.call_soon_threadsafe(event.set)

    def to(self, address: str) -> list[Received]:
        with self._lock:
            return [mail for mail in self.received if address in mail.rcpt_tos]

    def wait_for(self, address: str, count: int = 1, timeout: float = 30.0) -> list[Received]:
        """The first `count` emails to `address`, once they are here."""
        return list(
            wait_for(
                lambda: (found := self.to(address)) and len(found) >= count and found,
                timeout,
                f"{count} email(s) to {address}",
            )
        )

    # -- aiosmtpd's hook --------------------------------------------------

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        with self._lock:
            self.attempts += 1
            if self._refuse > 0:
                self._refuse -= 1
                self.refused_at.append(time.time())
                return "451 4.3.0 Try again later"
            hang, self._hang_next = self._hang_next, False
            if hang:
                release = asyncio.Event()
                self._release = (asyncio.get_running_loop(), release)
        if hang:
            self.hanging.set()
            try:
                await release.wait()
            except asyncio.CancelledError:
                # aiosmtpd cancels the handler when the connection is lost:
                # the client never heard a 250, so the email is not taken.
                self.abandoned.set()
                raise
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(message, EmailMessage)
        with self._lock:
            self.received.append(
                Received(envelope.mail_from, tuple(envelope.rcpt_tos), message, time.time())
            )
        return "250 OK: queued"


class SmtpServer(Controller):
    """aiosmtpd's threaded controller on a free loopback port (`port`, known
    once `start` returns)."""

    def __init__(self, mailbox: Mailbox):
        super().__init__(mailbox, hostname="127.0.0.1", port=0)
        self.mailbox = mailbox

    async def _bind(self) -> asyncio.AbstractServer:
        server = await self.loop.create_server(
            self._factory_invoker, host=self.hostname, port=0, ssl=self.ssl_context
        )
        # The controller's start connects to `port` to check the server answers.
        self.port = server.sockets[0].getsockname()[1]
        return server

    def _create_server(self) -> Any:
        return self._bind()

    @property
    def url(self) -> str:
        return f"smtp://127.0.0.1:{self.port}"
