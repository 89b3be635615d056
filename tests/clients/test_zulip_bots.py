"""Zulip's bot framework, zulip-bots 0.9.0, unchanged, against eventq: its
`zulip-run-bot` runs the `helloworld` bot as a bot made with `POST /bots`
(its key from that answer), and the bot answers a direct message sent to it.

The framework is installed by `bash deploy/test.sh` (deploy/bootstrap.sh,
`ensure_zulip_clients`) in var/zulip-clients."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from generation import accounts
from tests.domain.harness import Domain
from tests.support import REPO, Api, ServerProcess, ok, wait_for

RUN_BOT = REPO / "var" / "zulip-clients" / "bin" / "zulip-run-bot"


@pytest.fixture(scope="module")
def run_bot() -> Path:
    if not RUN_BOT.is_file():
        pytest.fail(f"{RUN_BOT} missing: `bash deploy/test.sh` installs it", pytrace=False)
    return RUN_BOT


def test_a_zulip_bots_bot_answers_a_direct_message(
    run_bot: Path, server: ServerProcess, database_url: str, tmp_path: Path
):
    domain = Domain(database_url)
    hamlet = Api(server, domain.accounts["hamlet"])
    made = ok(hamlet.request("POST", "bots", full_name="Hello", short_name="hello"))
    email = f"hello-bot@{domain.subdomain}.eventq.invalid"
    bot = accounts.CreatedUser(
        made["user_id"], domain.realm_id, email, "Hello", "member", made["api_key"]
    )
    zuliprc = tmp_path / "zuliprc"
    zuliprc.write_text(f"[api]\nemail={bot.email}\nkey={bot.api_key}\nsite={server.url}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ZULIP_", "EVENTQ_"))}
    log = (tmp_path / "bot.log").open("wb")
    process = subprocess.Popen(
        [str(run_bot), "helloworld", "--config-file", str(zuliprc)],
        env=env,
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        # The bot is listening once its queue exists.
        wait_for(
            lambda: server.user_queues(bot.user_id) or process.poll() is not None,
            60,
            "the bot's queue",
        )
        assert process.poll() is None, (tmp_path / "bot.log").read_text()
        ok(hamlet.request("POST", "messages", type="private", to=[bot.user_id],
                          content="hello, bot"))  # fmt: skip

        def answer() -> list[dict[str, object]]:
            page = ok(hamlet.request("GET", "messages", anchor="newest", num_before=5,
                                     narrow=[["dm", bot.email]]))  # fmt: skip
            return [m for m in page["messages"] if m["sender_id"] == bot.user_id]

        [reply] = wait_for(answer, 60, "the bot's answer")
        assert reply["content"] == "<p>beep boop</p>"
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
        hamlet.close()
