"""Tool arguments as an agent sends them, and what it is told when they are wrong.

FastMCP validates a tools/call's arguments against the tool's signature with pydantic,
strictly (server.py: `strict_input_validation`), and on failure hands the agent pydantic's
own report: a header, the input echoed whole, and a documentation URL per error. Agents also
often send numbers and booleans as JSON strings ("5", "true"), which strict validation
refuses. This middleware, on tools/call only, turns such strings into the number or boolean
the tool's schema asks for (nothing else is coerced: `true` stays no number, 5 no string),
and rewrites a validation failure as one short line per field, without URLs:
`timeout: expected a number, got 'abc'`.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from fastmcp import FastMCP
from fastmcp.exceptions import ValidationError
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from pydantic import ValidationError as PydanticValidationError

_INTEGER = re.compile(r"^\s*[-+]?\d{1,18}\s*$")
_BOOLEANS = {"true": True, "false": False}
_MAX_DEPTH = 6  # the tools' arguments nest two levels (upload_files' files[i].executable)

# What each kind of type error expected, by pydantic's error type.
_EXPECTED = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "finite_number": "a finite number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "a string",
    "list_type": "a list",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
}


class ArgumentCheck(Middleware):
    def __init__(self, server: FastMCP) -> None:
        self._server = server
        self._schemas: dict[str, dict[str, Any]] = {}  # tools are fixed once registered

    async def on_call_tool(self, context: MiddlewareContext, call_next: CallNext) -> Any:
        message = context.message
        schema = await self._schema(message.name)
        if schema is not None and message.arguments:
            arguments = coerce_arguments(message.arguments, schema)
            if arguments != message.arguments:
                context = context.copy(message=message.model_copy(update={"arguments": arguments}))
        try:
            return await call_next(context)
        except ValidationError as exc:
            if isinstance(exc.__cause__, PydanticValidationError):
                raise ValidationError(describe(exc.__cause__)) from None
            raise

    async def _schema(self, name: str) -> dict[str, Any] | None:
        if name not in self._schemas:
            tool = await self._server.get_tool(name)
            if tool is None:
                return None
            self._schemas[name] = tool.parameters
        return self._schemas[name]


def coerce_arguments(arguments: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """`arguments` with numeric and boolean strings made numbers and booleans where the
    schema expects them (and no string is allowed)."""
    definitions = schema.get("$defs", {})
    return _coerce(arguments, schema, definitions, 0)


def _coerce(value: Any, schema: dict[str, Any], definitions: dict[str, Any], depth: int) -> Any:
    if depth > _MAX_DEPTH:
        return value
    schema = _resolved(schema, definitions)
    branches = [_resolved(branch, definitions) for branch in schema.get("anyOf", [schema])]
    types = {branch.get("type") for branch in branches}
    if isinstance(value, str) and "string" not in types:
        return _scalar(value, types)
    if isinstance(value, dict):
        for branch in branches:
            properties = branch.get("properties")
            if properties:
                return {
                    key: _coerce(item, properties[key], definitions, depth + 1)
                    if key in properties
                    else item
                    for key, item in value.items()
                }
    if isinstance(value, list):
        for branch in branches:
            if isinstance(branch.get("items"), dict):
                return [_coerce(item, branch["items"], definitions, depth + 1) for item in value]
    return value


def _resolved(schema: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    reference = schema.get("$ref", "")
    if reference.startswith("#/$defs/"):
        return definitions.get(reference.removeprefix("#/$defs/"), schema)
    return schema


def _scalar(text: str, types: set[Any]) -> Any:
    if "integer" in types and _INTEGER.match(text):
        return int(text)
    if "number" in types:
        try:
            number = float(text)
        except ValueError:
            return text
        return number if math.isfinite(number) else text
    if "boolean" in types and text.strip().lower() in _BOOLEANS:
        return _BOOLEANS[text.strip().lower()]
    return text


def describe(error: PydanticValidationError) -> str:
    """One line per field: where, what was expected, what came."""
    lines: dict[str, str] = {}
    for item in error.errors(include_url=False):
        where = _where(item["loc"])
        if where not in lines:  # a union's branches each report the same field
            lines[where] = f"{where}: {_what(item)}"
    return "\n".join(lines.values())


def _where(loc: tuple[Any, ...]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part in ("function-after", "function-before", "function-plain", "nullable"):
            continue
        else:
            text += f".{part}" if text else str(part)
    return text or "arguments"


def _what(item: Any) -> str:
    kind, message = item["type"], item["msg"]
    if kind in ("missing", "missing_argument"):
        return "required"
    if kind in ("unexpected_keyword_argument", "extra_forbidden"):
        return "unexpected keyword argument (not one of this tool's arguments)"
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}, got {_shown(item.get('input'))}"
    said = re.sub(r"^Input should be ", "must be ", message)
    said = said[:1].lower() + said[1:]
    if kind in ("too_long", "string_too_long", "too_short", "string_too_short"):
        return said  # the input may be huge; the limit is what matters
    return f"{said}, got {_shown(item.get('input'))}"


def _shown(value: Any) -> str:
    """A string quoted, anything else as JSON (`true`, `[1]`), cut short."""
    text = repr(value) if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."
