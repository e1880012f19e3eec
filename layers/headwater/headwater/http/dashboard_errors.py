"""Errors of the /api/v2 dashboard surface on the wire: `{"detail": message, ...}` (the
contract's shape; extra fields such as `max_connections`, `retry_after` or a bad item's
`errors` come from the error's detail)."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from headwater import jsoncodec
from headwater.errors import HeadwaterError

PREFIX = "/api/v2"


def is_api_v2(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


def error_response(exc: HeadwaterError, headers: dict[str, str]) -> Response:
    body: dict[str, Any] = {"detail": exc.message}
    if exc.detail:
        body.update(exc.detail)
    return Response(
        jsoncodec.dumps(body), exc.status, headers=headers, media_type="application/json"
    )
