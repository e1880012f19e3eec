"""JSON responses with the `performance` object, and each surface's error envelope (/v0's,
Durable Streams' on /v1, aviso's on /api/v1)."""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import HTTPConnection, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from headwater import jsoncodec
from headwater.errors import HeadwaterError, error_body
from headwater.http import aviso, dashboard_errors, flag_errors

T0_KEY = "headwater.t0"


class TimingMiddleware:
    """Stamps the request start so every response can report server_total_ms."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            scope[T0_KEY] = time.perf_counter()
        await self.app(scope, receive, send)


class BrowserSafety:
    """Durable Streams responses are read by browsers straight off the function URL: every
    /v1 response (errors and preflights included) says nosniff and may be read cross-origin."""

    HEADERS = (
        (b"x-content-type-options", b"nosniff"),
        (b"cross-origin-resource-policy", b"cross-origin"),
    )

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return

        async def send_safe(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = dict(message)
                message["headers"] = [*message.get("headers", []), *self.HEADERS]
            await send(message)

        await self.app(scope, receive, send_safe)


def elapsed_ms(request: HTTPConnection) -> float:
    t0 = request.scope.get(T0_KEY)
    return round((time.perf_counter() - t0) * 1000, 3) if t0 is not None else 0.0


def dumps(body: Any) -> bytes:
    return jsoncodec.dumps(body)


def json_response(
    request: Request,
    body: dict[str, Any],
    status: int = 200,
    *,
    perf: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    raw: dict[str, bytes] | None = None,
) -> Response:
    """`raw` fields are already-encoded JSON values spliced in verbatim (record payloads are
    stored as JSON text and never re-encoded)."""
    performance = {"server_total_ms": elapsed_ms(request)}
    if perf:
        performance.update(perf)
    body["performance"] = performance
    encoded = dumps(body)
    if raw:
        spliced = b",".join(dumps(k) + b":" + v for k, v in raw.items())
        encoded = b"{" + spliced + b"," + encoded[1:]
    return Response(encoded, status, headers=headers, media_type="application/json")


def error_response(request: Request, exc: HeadwaterError) -> Response:
    headers = dict(exc.headers)
    if exc.status in (429, 503) and "Retry-After" not in headers:
        headers["Retry-After"] = "1"
    if flag_errors.is_flag_path(request.url.path):
        return flag_errors.flag_error_response(exc, headers)
    if aviso.is_api_v1(request.url.path):
        # aviso's bodies, with the request id also in the header: a 500 from the catch-all
        # handler is answered outside the middleware that normally sets it.
        headers[aviso.HEADER] = aviso.request_id(request)
        return aviso.error_response(request, exc, headers)
    if dashboard_errors.is_api_v2(request.url.path):
        return dashboard_errors.error_response(exc, headers)
    if request.url.path.startswith("/v1/"):
        # Durable Streams (protocol §11): exactly {"error": {"code", "message"}}.
        body = dumps({"error": {"code": exc.code, "message": exc.message}})
        return Response(body, exc.status, headers=headers, media_type="application/json")
    return json_response(request, error_body(exc), exc.status, headers=headers)


class NoCorsForEvents:
    """The spec: /api/v1/events accepts requests with an Origin header but emits no
    Access-Control-Allow-Origin (browsers are not a target). Installed outside the CORS
    middleware, it hides the Origin header from it on that path."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == flag_errors.EVENTS_PATH:
            headers = [(k, v) for k, v in scope["headers"] if k != b"origin"]
            scope = {**scope, "headers": headers}
        await self.app(scope, receive, send)
