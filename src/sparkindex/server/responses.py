"""JSON in and out: orjson responses, and request values checked with errors that name them."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse


class ORJSONResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_NON_STR_KEYS)


class BadRequest(Exception):
    """A request the server refuses; *status* and a message naming what is wrong and where."""

    def __init__(self, message: str, status: int = 400, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers


def error(message: str, status: int, headers: dict[str, str] | None = None) -> ORJSONResponse:
    return ORJSONResponse({"error": message}, status_code=status, headers=headers)


def query_int(request: Request, name: str, default: int, lo: int, hi: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"query parameter {name!r}: expected an integer, got {raw!r}") from None
    if not lo <= value <= hi:
        raise BadRequest(f"query parameter {name!r}: must be between {lo} and {hi}, got {value}")
    return value


def query_choice(request: Request, name: str, allowed: Collection[str]) -> str | None:
    raw = request.query_params.get(name)
    if raw is not None and raw not in allowed:
        raise BadRequest(f"query parameter {name!r}: {raw!r} is not one of {', '.join(sorted(allowed))}")
    return raw


async def json_body(request: Request, fields: dict[str, type | tuple[type, ...]]) -> dict[str, Any]:
    """The request's JSON object (an empty body is ``{}``), each key known and of its type."""
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"request body: not valid JSON ({exc})") from None
    if not isinstance(body, dict):
        raise BadRequest(f"request body: expected a JSON object, got {type(body).__name__}")
    unknown = sorted(set(body) - set(fields))
    if unknown:
        raise BadRequest(f"request body: unknown field(s) {', '.join(map(repr, unknown))} (known: {', '.join(fields)})")
    for key, value in body.items():
        expected = fields[key]
        if value is not None and not isinstance(value, expected):
            names = " or ".join(t.__name__ for t in (expected if isinstance(expected, tuple) else (expected,)))
            raise BadRequest(f"request body: field {key!r} must be {names}, got {type(value).__name__}")
    return body
