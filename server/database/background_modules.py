"""The modules named in EVENTQ_MODULES, as background updates see them: each
one's `setup(api)` is given a `ModuleApi`, through which it may replace the
controller's callbacks (server/database/background_controller.py) and add
updates of its own (server/database/background_update.py).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from server.database.background_controller import BatchSizeCallback, Controller, OnUpdate
from server.database.background_update import BackgroundUpdate


class ModuleApi:
    """What a module named in EVENTQ_MODULES is given: its `setup(api)` is
    called once at start (and by each `eventq db background` command). It
    may replace the controller's callbacks and add updates of its own."""

    def __init__(self, controller: Controller, module: str) -> None:
        self._controller = controller
        self._module = module
        self.updates: list[BackgroundUpdate] = []

    def register_background_update(self, update: BackgroundUpdate) -> None:
        """Run `update` when a row of `background_updates` names it."""
        self.updates.append(update)

    def register_background_update_controller_callbacks(
        self,
        on_update: OnUpdate,
        default_batch_size: BatchSizeCallback | None = None,
        min_batch_size: BatchSizeCallback | None = None,
    ) -> bool:
        return self._controller.register(
            on_update, default_batch_size, min_batch_size, module=self._module
        )


class ModuleError(ValueError):
    """A module in EVENTQ_MODULES cannot be loaded; the message says which and why."""


def load_modules(names: Sequence[str], controller: Controller) -> list[BackgroundUpdate]:
    """Import each module and call its `setup(api)`, in order; returns the
    updates they registered."""
    updates: list[BackgroundUpdate] = []
    for name in names:
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            raise ModuleError(f"EVENTQ_MODULES: cannot import {name}: {exc}") from exc
        setup = getattr(module, "setup", None)
        if not callable(setup):
            raise ModuleError(f"EVENTQ_MODULES: {name} has no setup(api) function")
        api = ModuleApi(controller, name)
        try:
            setup(api)
        except Exception as exc:
            raise ModuleError(
                f"EVENTQ_MODULES: {name}.setup(api) failed: {type(exc).__name__}: {exc}"
            ) from exc
        updates += api.updates
    return updates
