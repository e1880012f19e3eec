"""Errors of the flag surface on the wire: `{"error": {"code", "message", "details"?}}`
for every error on its paths (FlagErrors carry their own details; 414 has no body)."""

from __future__ import annotations

from starlette.responses import Response

from headwater import jsoncodec
from headwater.errors import HeadwaterError
from headwater.flags.errors import FlagError

EVENTS_PATH = "/api/v1/events"
TENANTS_PREFIX = "/api/v1/tenants/"


def is_flag_path(path: str) -> bool:
    return path == EVENTS_PATH or path.startswith(TENANTS_PREFIX)


def flag_error_response(exc: HeadwaterError, headers: dict[str, str]) -> Response:
    """The flag surface's envelope for any error (FlagErrors carry their own details)."""
    if isinstance(exc, FlagError):
        body = exc.envelope()
    else:
        code = "internal_error" if exc.status >= 500 and exc.code == "internal" else exc.code
        body = {"error": {"code": code, "message": exc.message}}
    if body is None:
        return Response(b"", exc.status, headers=headers)
    return Response(
        jsoncodec.dumps(body), exc.status, headers=headers, media_type="application/json"
    )
