"""A second module for EVENTQ_MODULES that also registers controller
callbacks: refused when named after tests.server.background_module."""

from __future__ import annotations

from server.database.background import ModuleApi
from tests.server.background_module import batch_size, on_update


def setup(api: ModuleApi) -> None:
    api.register_background_update_controller_callbacks(on_update, batch_size, batch_size)
