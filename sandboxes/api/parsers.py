"""Request parsers of the REST API (a module of its own: DRF imports parsers from settings
while rest_framework.views is still loading, so this must not import any view)."""

from __future__ import annotations

import io
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


class LimitedJSONParser(JSONParser):
    """JSON bodies up to DATA_UPLOAD_MAX_MEMORY_SIZE.

    DRF reads the request stream itself, bypassing the limit Django applies to request.body,
    so without this a JSON body of any size would be read into memory. Over the limit the
    API answers 413 (sandboxes.api.base.exception_handler). A body nested deeper than the
    JSON decoder's recursion limit (e.g. 100k brackets) is a 400 like any malformed body.
    """

    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        data = stream.read(limit + 1) if stream is not None else b""
        if len(data) > limit:
            raise RequestDataTooBig(f"JSON bodies are limited to {limit} bytes")
        try:
            return super().parse(io.BytesIO(data), media_type, parser_context)
        except RecursionError as exc:
            raise ParseError("JSON parse error - the body is nested too deeply") from exc
