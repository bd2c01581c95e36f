"""Client errors as JSON answers, and checks of request bodies that name the bad field."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

ERROR_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    405: "MethodNotAllowed",
    413: "RequestTooLarge",
    503: "ServiceUnavailableError",
}
"""The ``type`` of an error body by status: the names of the OpenAI client's exceptions."""


class BadRequest(Exception):
    """A request the server refuses; answered with ``status``, an OpenAI-style error body and
    ``headers`` (``WWW-Authenticate`` on a 401, ``Retry-After`` on a 503).

    >>> BadRequest("input_ids must be a list").body()
    {'error': {'message': 'input_ids must be a list', 'type': 'BadRequestError', 'code': 400}}
    """

    def __init__(
        self, message: str, status: int = 400, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": ERROR_TYPES.get(self.status, "Error"),
                "code": self.status,
            }
        }


def check_fields(body: Any, allowed: Iterable[str], where: str, required: Iterable[str] = ()):
    """``body`` must be a JSON object holding only ``allowed`` keys and every ``required`` one.

    >>> check_fields({"a": 1, "zz": 2}, ["a"], "/generate")
    Traceback (most recent call last):
    ...
    vlrollout.serve.errors.BadRequest: /generate: unknown field(s) ['zz']; accepted: ['a']
    """
    if not isinstance(body, Mapping):
        raise BadRequest(f"{where}: the body must be a JSON object, got {type(body).__name__}")
    allowed = sorted(allowed)
    unknown = sorted(k for k in body if k not in allowed)
    if unknown:
        raise BadRequest(f"{where}: unknown field(s) {unknown}; accepted: {allowed}")
    missing = [k for k in required if body.get(k) is None]
    if missing:
        raise BadRequest(f"{where}: missing required field(s) {missing} (null counts as missing)")


def token_ids(value: Any, where: str) -> list[int]:
    """A non-empty list of non-negative ints (JSON booleans are refused)."""
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value)
    ):
        raise BadRequest(f"{where} must be a non-empty list of non-negative token ids")
    return value


def typed(body: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    """``body[key]`` if absent/None or of ``kind`` (an int is accepted where a float is, when a
    float can hold it)."""
    value = body.get(key)
    if value is None:
        return None
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if float in kinds:
        kinds = (*kinds, int)
    if isinstance(value, bool) and bool not in kinds:
        ok = False
    else:
        ok = isinstance(value, kinds)
    if not ok:
        names = "/".join(k.__name__ for k in kinds)
        raise BadRequest(f"{where}: {key} must be {names}, got {type(value).__name__} {value!r}")
    if float in kinds and isinstance(value, int) and not isinstance(value, bool):
        try:
            float(value)
        except OverflowError:
            raise BadRequest(
                f"{where}: {key} must be a finite number, got an integer of "
                f"{len(str(abs(value)))} digits"
            ) from None
    return value


def check_flags(body: Mapping[str, Any], keys: tuple[str, ...], where: str) -> None:
    """Each of ``keys`` absent, null or a JSON boolean: a string such as ``"false"`` is truthy
    in Python and would switch the flag on."""
    for key in keys:
        typed(body, key, bool, where)


def flag(body: Mapping[str, Any], key: str, default: bool) -> bool:
    """A boolean field that :func:`check_flags` passed; absent or null is ``default``."""
    value = body.get(key)
    return default if value is None else value


def body_too_large(path: str, limit: int | None) -> BadRequest:
    """The 413 of a body over the server's limit (``--max-body-mb``): never retried, unlike a
    full queue's 503."""
    return BadRequest(
        f"{path}: body larger than the server's limit of {limit} bytes (vlrollout serve "
        "--max-body-mb)",
        status=413,
    )
