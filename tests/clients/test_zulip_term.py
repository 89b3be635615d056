"""Zulip's terminal client, zulip-term 0.7.0, unchanged, against eventq, in a
real terminal (tmux): it starts (server settings, message history, register,
presence, the long poll), shows the realm's channels and recent messages,
shows a message sent while it runs, sends one typed into it, and goes on
after the server restarts.

The client is installed by `bash deploy/test.sh` (deploy/bootstrap.sh,
`ensure_zulip_clients`) in var/zulip-clients."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.domain.harness import Domain
from tests.shards import free_ports
from tests.support import REPO, Api, ServerProcess, ok, wait_for

ZULIP_TERM = REPO / "var" / "zulip-clients" / "bin" / "zulip-term"


@pytest.fixture(scope="module")
def zulip_term() -> Path:
    if not ZULIP_TERM.is_file() or shutil.which("tmux") is None:
        pytest.fail(
            f"{ZULIP_TERM} or tmux missing: `bash deploy/test.sh` installs them",
            pytrace=False,
        )
    return ZULIP_TERM


class Terminal:
    """A tmux session of its own (its own server socket) running one command."""

    def __init__(self, command: list[str], env: dict[str, str], cwd: Path):
        self.socket = f"eventq-test-{uuid.uuid4().hex[:8]}"
        shell = " ".join(f"'{part}'" for part in command)
        self._tmux(
            "new-session", "-d", "-s", "t", "-x", "160", "-y", "45",
            # The screen stays after the client exits, for the failure's message.
            f"cd '{cwd}' && {shell}; echo '[exited]' $?; sleep 3600",
            env=env,
        )  # fmt: skip
        self.socket_path = Path(self._tmux("display-message", "-p", "#{socket_path}").strip())

    def _tmux(self, *args: str, env: dict[str, str] | None = None) -> str:
        done = subprocess.run(
            ["tmux", "-L", self.socket, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return done.stdout

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", "t")

    def keys(self, *keys: str, literal: bool = False) -> None:
        self._tmux("send-keys", "-t", "t", *(["-l"] if literal else []), *keys)

    def type(self, text: str) -> None:
        self.keys(text, literal=True)

    def wait(self, *texts: str, timeout: float = 60.0) -> str:
        def shown() -> str | None:
            screen = self.screen()
            if "[exited]" in screen or "crashed" in screen:
                raise AssertionError(f"zulip-term stopped:\n{screen}")
            return screen if all(text in screen for text in texts) else None

        try:
            return str(wait_for(shown, timeout, f"{texts} on zulip-term's screen"))
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the screen:\n{self.screen()}") from None

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, check=False)
        self.socket_path.unlink(missing_ok=True)


@pytest.fixture
def own_server(database_url: str, amqp_url: str, tmp_path: Path) -> Iterator[ServerProcess]:
    """A server on a fixed port (the client's zuliprc names it), restartable."""
    [port] = free_ports(1)
    server = ServerProcess(
        database_url, tmp_path / "state", amqp_url=amqp_url, serve_args=("--port", str(port))
    )
    yield server.start()
    server.kill()


def test_zulip_term_starts_shows_history_and_live_messages_sends_and_survives_a_restart(
    zulip_term: Path, own_server: ServerProcess, database_url: str, tmp_path: Path
):
    domain = Domain(database_url)
    hamlet, iago = (Api(own_server, domain.accounts[name]) for name in ("hamlet", "iago"))
    ok(iago.request("POST", "messages", type="stream", to="Denmark", topic="castle",
                    content="the ghost walks on the battlements"))  # fmt: skip
    home = tmp_path / "home"
    home.mkdir()
    zuliprc = home / "zuliprc"
    account = domain.accounts["hamlet"]
    zuliprc.write_text(
        f"[api]\nemail={account.email}\nkey={account.api_key}\nsite={own_server.url}\n"
        "[zterm]\ntheme=zt_dark\nnotify=disabled\nautohide=no_autohide\ncolor-depth=256\n"
    )
    zuliprc.chmod(0o600)
    # Not PYTEST_CURRENT_TEST: with it, zulip-term runs its threads' work
    # inline (its own tests' switch), and never gets past its loading spinner.
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("ZULIP_", "EVENTQ_", "PYTEST_"))
    }
    env.update({"HOME": str(home), "TERM": "xterm-256color", "LANG": "C.UTF-8"})
    terminal = Terminal([str(zulip_term), "-c", str(zuliprc)], env, home)
    try:
        # Started: its channels and the realm's recent message.
        terminal.wait("Denmark", "Verona", "the ghost walks on the battlements")
        # A message sent while it runs shows up.
        ok(iago.request("POST", "messages", type="stream", to="Denmark", topic="castle",
                        content="something is rotten"))  # fmt: skip
        terminal.wait("something is rotten")
        # One typed into it is sent (c: a channel message; Tab between the
        # fields; Ctrl+D sends).
        terminal.keys("c")
        terminal.wait("\u2717")  # the compose box is open: its empty channel marked invalid
        terminal.type("Denmark")
        terminal.keys("Tab")
        terminal.type("castle")
        terminal.keys("Tab")
        terminal.type("words words words")
        terminal.keys("C-d")

        def typed() -> list[dict[str, object]]:
            page = ok(hamlet.request("GET", "messages", anchor="newest", num_before=5,
                                     narrow=[["channel", "Denmark"]]))  # fmt: skip
            return [m for m in page["messages"] if m["content"] == "<p>words words words</p>"]

        body = wait_for(typed, 30, "the message typed into zulip-term")
        assert body[0]["sender_id"] == domain.id("hamlet")
        assert body[0]["client"].startswith("ZulipTerminal")
        terminal.keys("Escape")
        terminal.wait("words words words")
        # The server restarts; the client goes on with the same queue.
        assert own_server.stop() == 0
        own_server.start()
        ok(iago.request("POST", "messages", type="stream", to="Denmark", topic="castle",
                        content="the rest is silence"))  # fmt: skip
        terminal.wait("the rest is silence")
    finally:
        terminal.close()
        for api in (hamlet, iago):
            api.close()
