"""`GET /api/v1/openapi.json`: the API's OpenAPI document (no authentication)."""

from __future__ import annotations

import orjson

from server.handlers.base import BaseHandler
from server.openapi import document


class OpenApiHandler(BaseHandler):
    SUPPORTED_METHODS = ("GET",)

    _body: bytes | None = None

    def get(self) -> None:
        if OpenApiHandler._body is None:
            OpenApiHandler._body = orjson.dumps(document())
        self.write_body(OpenApiHandler._body)
