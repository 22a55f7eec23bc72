"""Errors a route answers with, rendered in the shape of the API that was called (`app` picks the shape by path),
and the small checks request parsers share. Every check names the field, so a 400 says what to fix."""
from __future__ import annotations

from typing import Any

#: kind -> (HTTP status, OpenAI error type, OpenAI code, Anthropic error type)
KINDS = {
    "invalid_request": (400, "invalid_request_error", None, "invalid_request_error"),
    "not_found": (404, "invalid_request_error", "model_not_found", "not_found_error"),
    "route_not_found": (404, "invalid_request_error", "not_found", "not_found_error"),
    "method_not_allowed": (405, "invalid_request_error", "method_not_allowed", "invalid_request_error"),
    "authentication": (401, "invalid_request_error", "invalid_api_key", "authentication_error"),
    "permission": (403, "permission_error", "insufficient_scope", "permission_error"),
    "conflict": (409, "invalid_request_error", "conflict", "invalid_request_error"),
    "too_large": (413, "invalid_request_error", "request_too_large", "request_too_large"),
    "unsupported_media": (415, "invalid_request_error", "unsupported_media_type", "invalid_request_error"),
    "rate_limit": (429, "rate_limit_error", "rate_limit_exceeded", "rate_limit_error"),
    "unavailable": (503, "server_error", "unavailable", "overloaded_error"),
    "server": (500, "server_error", None, "api_error"),
}


class ApiError(Exception):
    def __init__(self, kind: str, message: str, *, param: str | None = None, status: int | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.kind, self.message, self.param = kind, message, param
        self.status = status or KINDS[kind][0]
        self.headers = headers or {}

    def chat_body(self) -> dict[str, Any]:
        _, kind, code, _ = KINDS[self.kind]
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": code}}

    def messages_body(self) -> dict[str, Any]:
        return {"type": "error", "error": {"type": KINDS[self.kind][3], "message": self.message}}


def bad(message: str, param: str | None = None) -> ApiError:
    return ApiError("invalid_request", message + (f" (field '{param}')" if param else ""), param=param)


_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "object": dict, "array": list}


def field(body: dict[str, Any], name: str, kind: str, *, required: bool = False, where: str = "",
          default: Any = None) -> Any:
    """body[name] checked against a JSON type (a boolean is not a number), or `default` when absent/null."""
    path = f"{where}{name}"
    if name not in body or body[name] is None:
        if required:
            raise bad(f"'{path}' is required", path)
        return default
    value = body[name]
    ok = isinstance(value, _TYPES[kind]) and not (kind in ("integer", "number") and isinstance(value, bool))
    if not ok:
        raise bad(f"'{path}' must be {'an' if kind[0] in 'aeio' else 'a'} {kind}", path)
    return value


def number_in(body: dict[str, Any], name: str, low: float, high: float, default: float, *, low_open: bool = False
              ) -> float:
    value = field(body, name, "number", default=default)
    if value != value or value > high or value < low or (low_open and value == low):
        bracket = "(" if low_open else "["
        raise bad(f"'{name}' must be in {bracket}{low}, {high}], got {value}", name)
    return float(value)


def positive(body: dict[str, Any], name: str, default: int | None = None, most: int | None = None) -> int | None:
    value = field(body, name, "integer", default=default)
    if value is None:
        return None
    if value < 1:
        raise bad(f"'{name}' must be a positive integer, got {value}", name)
    if most is not None and value > most:
        raise bad(f"'{name}' is {value}; this server's limit is {most}", name)
    return int(value)


def stops(value: Any, name: str, most: int = 4) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(s, str) and s for s in value):
        raise bad(f"'{name}' must be a non-empty string or a list of them", name)
    if len(value) > most:
        raise bad(f"'{name}' holds {len(value)} sequences; the limit is {most}", name)
    return list(value)
