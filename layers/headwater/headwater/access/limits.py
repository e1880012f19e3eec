"""Per-process concurrency caps (spec §11): long-lived streams (SSE + WebSocket), instance-wide
and per key, and in-flight requests per key. A slot is a guard released exactly once, on
every exit path: the SSE response and the WebSocket endpoint release it in `finally`, and
the in-flight middleware (http/limits.py) around the whole request. Per-key caps apply only
with auth on (there is a key to attribute use to)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

from headwater.engine import cap_hit
from headwater.settings import Caps


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
