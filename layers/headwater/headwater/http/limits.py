"""The HTTP side of the per-process caps (access/limits.py): which requests are long-lived
streams (bounded by the stream caps, not the in-flight cap), and the middleware that holds
a per-key in-flight slot for each other request."""

from __future__ import annotations

from typing import TYPE_CHECKING

from headwater.errors import HeadwaterError, Unauthorized

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send


def is_stream_request(method: str, path: str, query: bytes = b"") -> bool:
    """Long-lived streams are bounded by the stream caps, not the in-flight cap (§11)."""
    if method == "POST":
        return path in ("/api/v1/watch", "/api/v1/replay")
    return method == "GET" and (
        (path.startswith("/v0/watch/") and path.count("/") == 3)
        or (path.startswith("/v0/topics/") and path.endswith("/work"))
        or (path.startswith("/v1/stream/") and b"live=sse" in query.split(b"&"))
    )


class InflightLimit:
    """ASGI middleware: holds a per-key in-flight slot for the whole request (auth on only).
    A request whose bearer does not authenticate is not attributed (its route rejects it)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or is_stream_request(
            scope["method"], scope["path"], scope.get("query_string", b"")
        ):
            await self.app(scope, receive, send)
            return
        svc = scope["app"].state.services.get()
        if not svc.keys.enabled or not svc.settings.caps.max_inflight_per_key:
            await self.app(scope, receive, send)
            return
        # imported here: Services (every function's) holds ConnectionLimits, and only the
        # HTTP functions run this middleware
        from starlette.requests import Request

        from headwater.http.responses import error_response

        request = Request(scope)
        try:
            principal = svc.keys.authenticate(request.headers.get("authorization"))
        except Unauthorized:
            await self.app(scope, receive, send)
            return
        try:
            slot = svc.limits.acquire_inflight(principal.key_id)
        except HeadwaterError as exc:
            await error_response(request, exc)(scope, receive, send)
            return
        with slot:
            await self.app(scope, receive, send)
