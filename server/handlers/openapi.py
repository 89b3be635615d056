"""`GET /api/v1/openapi.json`: the API's OpenAPI document (no authentication).

The document is built from the handlers (server/openapi.py, in the assembly
room above them): the routes hand this handler the function that builds it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from server.handlers.base import BaseHandler
from server.interface import HandlerApi


class OpenApiHandler(BaseHandler):
    SUPPORTED_METHODS = ("GET",)

    _body: bytes | None = None

    def initialize(  # type: ignore[override]
        self, server: HandlerApi, document: Callable[[], dict[str, Any]]
    ) -> None:
        super().initialize(server)
        self.document = document

    def get(self) -> None:
        if OpenApiHandler._body is None:
            OpenApiHandler._body = orjson.dumps(self.document())
        self.write_body(OpenApiHandler._body)
