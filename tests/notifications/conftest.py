"""Fixtures of the notification pipeline's end-to-end tests (site.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.notifications.mailbox import Mailbox, SmtpServer
from tests.notifications.site import Site
from tests.support import ServerProcess, World


@pytest.fixture
def make_site(
    start_server: Callable[..., ServerProcess], world: World, tmp_path: Path
) -> Iterator[Callable[..., Site]]:
    """`make_site(realm_name=..., **server_env)`: a server (each test its
    own, so its own notification queue), a realm, the SMTP server and the
    webhook receiver."""
    made: list[tuple[Site, SmtpServer]] = []

    def make(realm_name: str = "Notified Inc", **server_env: str) -> Site:
        server = start_server(**server_env)
        server.wait_consuming()
        mailbox = Mailbox()
        smtp = SmtpServer(mailbox)
        smtp.start()
        site = Site(server, world, tmp_path, mailbox, smtp.url, realm_name)
        made.append((site, smtp))
        return site

    yield make
    for site, smtp in made:
        site.close()
        smtp.stop()
