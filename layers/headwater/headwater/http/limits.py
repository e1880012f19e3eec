"""Per-process concurrency caps (spec §11): long-lived streams (SSE + WebSocket), instance-wide
and per key, and in-flight requests per key. A slot is a guard released exactly once, on
every exit path: the SSE response and the WebSocket endpoint release it in `finally`, and
the in-flight middleware around the whole request. Per-key caps apply only with auth on
(there is a key to attribute use to)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

from headwater.engine.quotas import cap_hit
from headwater.errors import HeadwaterError, Unauthorized
from headwater.settings import Caps

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send


class Slot:
    """One held unit of a cap. `release` is idempotent; `with slot:` releases on exit."""

    __slots__ = ("_free",)

    def __init__(self, free: Callable[[], None]) -> None:
        self._free: Callable[[], None] | None = free

    def release(self) -> None:
        free, self._free = self._free, None
        if free is not None:
            free()

    @property
    def held(self) -> bool:
        return self._free is not None

    def __enter__(self) -> Slot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class ConnectionLimits:
    def __init__(self, caps: Caps) -> None:
        self.caps = caps
        self._lock = threading.Lock()
        self.streams = 0
        self.streams_by_key: Counter[str] = Counter()
        self.inflight_by_key: Counter[str] = Counter()

    def acquire_stream(self, key_id: str | None) -> Slot:
        """A long-lived connection (SSE stream or WebSocket). `key_id` None: dev mode."""
        caps = self.caps
        with self._lock:
            if caps.max_sse_connections and self.streams >= caps.max_sse_connections:
                raise cap_hit("max_sse_connections", caps.max_sse_connections, "concurrent streams")
            per_key = caps.max_sse_connections_per_key
            if key_id is not None and per_key and self.streams_by_key[key_id] >= per_key:
                raise cap_hit(
                    "max_sse_connections_per_key", per_key, "concurrent streams for this key"
                )
            self.streams += 1
            if key_id is not None:
                self.streams_by_key[key_id] += 1

        def free() -> None:
            with self._lock:
                self.streams -= 1
                if key_id is not None:
                    self.streams_by_key[key_id] -= 1
                    if self.streams_by_key[key_id] <= 0:
                        del self.streams_by_key[key_id]

        return Slot(free)

    def acquire_inflight(self, key_id: str) -> Slot:
        cap = self.caps.max_inflight_per_key
        with self._lock:
            if cap and self.inflight_by_key[key_id] >= cap:
                raise cap_hit("max_inflight_per_key", cap, "in-flight requests for this key")
            self.inflight_by_key[key_id] += 1

        def free() -> None:
            with self._lock:
                self.inflight_by_key[key_id] -= 1
                if self.inflight_by_key[key_id] <= 0:
                    del self.inflight_by_key[key_id]

        return Slot(free)


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
