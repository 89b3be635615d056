"""The background updates' runner as a server or `eventq db background run`
sets it up: the standard updates and those of EVENTQ_MODULES, paced by the
configured controller (server/database/background.py,
server/database/background_controller.py, server/database/updates.py).

Its own module because the background update modules
(server/database/background*.py) may not import server.database.updates
(which imports them), and both server.app and server.admin.cli need it.
"""

from __future__ import annotations

from server.config import Settings
from server.database.background import Runner
from server.database.background_controller import Controller, DefaultController
from server.database.background_modules import load_modules
from server.database.updates import standard_updates


def make_runner(
    settings: Settings,
    secret: bytes,
    *,
    application_name: str,
    watch_status: bool = True,
    lock_wait_secs: float | None = None,
) -> Runner:
    """A runner of every update this version and the configured modules know,
    `secret` being the API key secret (the key-hash update needs it). Raises
    `server.database.background_modules.ModuleError` for a module that cannot be loaded."""
    controller = Controller(
        DefaultController(settings.background_target_ms, settings.background_sleep_ms)
    )
    extra = load_modules(settings.modules, controller)
    return Runner(
        settings.database_url,
        [*standard_updates(settings, secret), *extra],
        controller,
        idle_secs=settings.background_idle_secs,
        application_name=application_name,
        watch_status=watch_status,
        lock_wait_secs=lock_wait_secs,
    )
