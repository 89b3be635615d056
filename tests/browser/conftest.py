"""Fixtures of the browser tests: Debian's Chromium driven through its
chromedriver (headless, a profile of its own per browser), and a server of
the test's own with the demo on (EVENTQ_DEMO=1) and the demo realm made by
`eventq demo`, its users subscribed to one channel."""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.chrome.webdriver import WebDriver

from generation.send import close_for_thread, send_event
from tests.support import REPO, ServerProcess, run_eventq

# Screenshots the browser tests keep.
ARTIFACTS = REPO / "var" / "test-artifacts" / "browser"
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
# Every demo user is subscribed to it before a page opens.
CHANNEL = "general"


@pytest.fixture(scope="session")
def chromium() -> None:
    missing = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not path.is_file()]
    if missing:
        pytest.fail(
            f"{' and '.join(missing)} missing: `bash deploy/test.sh` installs Debian's"
            " chromium and chromium-driver",
            pytrace=False,
        )


@pytest.fixture
def browser(chromium: None, tmp_path: Path) -> Iterator[Callable[[], WebDriver]]:
    """`browser()` starts a new headless Chromium: a browser context of its
    own (profile, cookies, storage). All are quit after the test."""
    drivers: list[WebDriver] = []

    def launch() -> WebDriver:
        options = webdriver.ChromeOptions()
        options.binary_location = str(CHROMIUM)
        profile = tmp_path / f"chromium-{len(drivers)}"
        for argument in (
            "--headless=new",
            "--no-sandbox",
            "--disable-dev-shm-usage",
            f"--user-data-dir={profile}",
            "--window-size=1280,1000",
            "--no-first-run",
            "--disable-background-timer-throttling",
            "--disable-renderer-backgrounding",
        ):
            options.add_argument(argument)
        # The console, for the tests that check pages log no error (a script
        # error, a request the Content Security Policy refused).
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
        drivers.append(driver)
        return driver

    yield launch
    for driver in drivers:
        driver.quit()


def free_port() -> int:
    """A loopback port free now (for a server restarted on the same port)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@dataclass
class DemoUser:
    user_id: int
    realm_id: int
    email: str
    full_name: str
    api_key: str


@dataclass
class DemoSite:
    """A server with the demo on, and the demo realm's users by first name
    (iago, hamlet, othello, polonius)."""

    server: ServerProcess
    users: dict[str, DemoUser]

    @property
    def url(self) -> str:
        return f"{self.server.url}/demo"

    def rest(self, name: str, method: str, path: str, **params: Any) -> dict[str, Any]:
        """A REST call as user `name` (Basic auth), asserting success."""
        user = self.users[name]
        encoded = {k: v if isinstance(v, str) else json.dumps(v) for k, v in params.items()}
        response = requests.request(
            method,
            f"{self.server.url}/api/v1/{path}",
            data=encoded,
            auth=(user.email, user.api_key),
            timeout=10,
        )
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def note(self, to: str, **fields: Any) -> None:
        """A `demo_note` event to user `to`, through send_event (RabbitMQ and
        the event log), as a backend service sends one."""
        user = self.users[to]
        event = {"type": "demo_note", **fields}
        send_event(user.realm_id, event, [user.user_id], config=self.server.producer())


@pytest.fixture
def demo_site(
    database_url: str, amqp_url: str, tmp_path: Path
) -> Iterator[Callable[..., DemoSite]]:
    """`demo_site(serve_args=..., **env)` starts a server with EVENTQ_DEMO=1
    (stopped after the test) on the demo realm, created (or given fresh keys)
    by `eventq demo`."""
    started: list[ServerProcess] = []

    def start(serve_args: tuple[str, ...] = ("--port", "0"), **env: str) -> DemoSite:
        made = run_eventq("demo", EVENTQ_DATABASE_URL=database_url)
        assert made.returncode == 0, made.stderr
        users = {
            user["email"].split("@")[0]: DemoUser(
                user["user_id"], user["realm_id"], user["email"], user["full_name"], user["api_key"]
            )
            for user in json.loads(made.stdout)["users"]
        }
        state_dir = tmp_path / f"state-{uuid.uuid4().hex[:6]}"
        server = ServerProcess(
            database_url, state_dir, {"EVENTQ_DEMO": "1", **env}, amqp_url, serve_args
        )
        started.append(server)
        server.start()
        server.wait_consuming()
        site = DemoSite(server, users)
        for name in ("iago", "hamlet", "othello"):
            site.rest(name, "POST", "users/me/subscriptions", subscriptions=[{"name": CHANNEL}])
        return site

    yield start
    for server in started:
        server.kill()
    close_for_thread()
