"""`server.database.background_runner.make_runner`: the runner a server or the
command line sets up."""

from __future__ import annotations

from server.config import Settings
from server.database.background import DefaultController
from server.database.background_runner import make_runner
from server.database.updates import standard_updates

URL = "postgresql://eventq@127.0.0.1:5432/eventq_make_runner"


def test_a_runner_of_the_standard_updates_and_the_modules_paced_as_configured():
    settings = Settings.from_env(
        {
            "EVENTQ_DATABASE_URL": URL,
            "EVENTQ_MODULES": "tests.server.background_module",
            "EVENTQ_BACKGROUND_TARGET_MS": "250",
            "EVENTQ_BACKGROUND_SLEEP_MS": "7",
            "EVENTQ_BACKGROUND_IDLE_SECS": "3",
        }
    )
    runner = make_runner(settings, b"secret", application_name="eventq-background test")
    standard = [update.name for update in standard_updates(settings, b"secret")]
    names = list(runner.updates)
    assert names[: len(standard)] == standard
    assert "copy_items" in names[len(standard) :]  # the module's, after
    assert runner.conninfo == URL
    assert runner.idle_secs == 3
    assert runner.application_name == "eventq-background test"
    assert runner.watch_status
    assert runner.lock_wait_secs is None
    default = runner.controller.default
    assert isinstance(default, DefaultController)
    assert (default.target_ms, default.sleep_ms) == (250, 7)
    assert runner.controller.registered_by == "tests.server.background_module"


def test_the_command_line_runner_watches_no_status_and_may_wait_for_the_lock():
    settings = Settings.from_env({"EVENTQ_DATABASE_URL": URL})
    runner = make_runner(
        settings, b"secret", application_name="cli", watch_status=False, lock_wait_secs=2.5
    )
    assert not runner.watch_status
    assert runner.lock_wait_secs == 2.5
    assert runner.controller.registered_by is None
