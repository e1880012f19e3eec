"""Names live in one path segment. Routing runs on the percent-decoded path, so an encoded '/'
inside a name would silently re-route the request: POST /v0/topics/a%2Fdiff (an append to the
invalid name "a/diff") would become a diff of topic "a". No /v0 name may contain '/' (spec
§1.1), so such a request is answered 400 invalid_request before routing."""

from __future__ import annotations

from urllib.parse import unquote

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from headwater.errors import InvalidRequest
from headwater.http.responses import error_response
from headwater.names import validate_topic_name


def encoded_slash_error(raw_path: bytes) -> InvalidRequest | None:
    if not raw_path.startswith(b"/v0/") or b"%2f" not in raw_path.lower():
        return None
    segment = next(s for s in raw_path.split(b"/") if b"%2f" in s.lower())
    try:
        validate_topic_name(unquote(segment.decode("latin-1")))
    except InvalidRequest as exc:
        return exc
    return None  # unreachable: a name with '/' never validates


class EncodedSlashGuard:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # raw_path is absent under Mangum (the decoded path is all it gets from the event).
        raw = scope.get("raw_path") if scope["type"] == "http" else None
        exc = encoded_slash_error(raw) if raw else None
        if exc is not None:
            await error_response(Request(scope), exc)(scope, receive, send)
            return
        await self.app(scope, receive, send)
