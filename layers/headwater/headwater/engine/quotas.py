"""Deployment-wide resource caps (spec §11): topics, routers, watch sessions, total bytes.

Creations reserve a slot in a DynamoDB counter before they happen and give it back when
they do not; deletions release. A refused reservation triggers a recount of the real
resources (rate-limited per process) that corrects a counter left high by a crashed process
or by DynamoDB's own TTL removals, then one retry. Counting is always on for topics,
routers and sessions (a creation costs one extra small write), so a cap switched on later
is exact at once. The byte counter is maintained only while TOPICS_MAX_TOTAL_BYTES is set,
so the default append path makes no extra call; it is initialised from a recount the first
time it is used."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from headwater.engine.ports import SessionStore, WatchSessionItem
from headwater.engine.ports.quota import QuotaStore
from headwater.errors import HeadwaterError, Throttled
from headwater.settings import Caps

log = logging.getLogger(__name__)

RECOUNT_INTERVAL_S = 2.0  # per process and resource: a saturated cap scans at most this often
RETRY_AFTER_S = "1"

TOPICS = "topics"
ROUTERS = "routers"
WATCH_SESSIONS = "watch_sessions"
TOTAL_BYTES = "total_bytes"
# API Gateway WebSocket connections: deployment-wide, they count against the stream cap.
WS_CONNECTIONS = "ws_connections"


@dataclass(frozen=True, slots=True)
class _Resource:
    """A capped resource: the limit named in errors, its cap, and what it counts."""

    limit: str  # error.detail.limit
    cap: int  # 0 = no cap
    what: str


def _resources(caps: Caps) -> dict[str, _Resource]:
    return {
        TOPICS: _Resource("max_topics", caps.max_topics, "topics"),
        ROUTERS: _Resource("max_routers", caps.max_routers, "routers"),
        WATCH_SESSIONS: _Resource("max_watch_sessions", caps.max_watch_sessions, "watch sessions"),
        TOTAL_BYTES: _Resource("max_total_bytes", caps.max_total_bytes, "retained bytes"),
        WS_CONNECTIONS: _Resource(
            "max_sse_connections", caps.max_sse_connections, "concurrent streams"
        ),
    }


def cap_hit(limit: str, cap: int, what: str) -> Throttled:
    return Throttled(
        f"resource cap reached: at most {cap} {what} ({limit}); retry later",
        detail={"limit": limit, "max": cap},
        headers={"Retry-After": RETRY_AFTER_S},
    )


class Quotas:
    """`recount` maps a resource to a function returning its true current amount."""

    def __init__(
        self,
        store: QuotaStore,
        caps: Caps,
        recount: Mapping[str, Callable[[], int]],
    ) -> None:
        self.store = store
        self.caps = caps
        self._res = _resources(caps)
        self._recount = dict(recount)
        self._last_recount: dict[str, float] = {}
        self.recount_interval_s = RECOUNT_INTERVAL_S
        self._lock = threading.Lock()

    @property
    def bytes_enabled(self) -> bool:
        return self.caps.max_total_bytes > 0

    def reserve(self, name: str, amount: int = 1) -> None:
        """Take `amount` of the resource or raise 429 throttled (error.detail.limit/max)."""
        res = self._res[name]
        if name == TOTAL_BYTES and not self.bytes_enabled:
            return
        cap = res.cap if res.cap > 0 else None
        if name == TOTAL_BYTES and self.store.get(name) is None:
            self._recount_now(name, force=True)
        if self.store.reserve(name, amount, cap):
            return
        if self._recount_now(name) and self.store.reserve(name, amount, cap):
            return
        assert cap is not None
        raise cap_hit(res.limit, cap, res.what)

    def release(self, name: str, amount: int = 1) -> None:
        """Give back; never fails the caller (a lost release is corrected by the recount)."""
        if amount <= 0 or (name == TOTAL_BYTES and not self.bytes_enabled):
            return
        try:
            self.store.release(name, amount)
        except HeadwaterError:
            log.warning("quota release for %s failed; the next recount corrects it", name)

    def current(self, name: str) -> int:
        return max(self.store.get(name) or 0, 0)

    def _recount_now(self, name: str, *, force: bool = False) -> bool:
        """Correct the counter from the real resources. True if it changed."""
        fn = self._recount.get(name)
        if fn is None:
            return False
        now = time.monotonic()
        with self._lock:
            last = self._last_recount.get(name, -1e9)
            if not force and now - last < self.recount_interval_s:
                return False
            self._last_recount[name] = now
        observed = self.store.get(name)
        actual = fn()
        if observed == actual:
            return False
        changed = self.store.set_if(name, observed, actual)
        if changed:
            log.info("quota counter %s corrected from %s to %d", name, observed, actual)
        return changed


class CountedSessions:
    """A SessionStore that holds a max_watch_sessions slot per stored session: `put` reserves
    first (429 when full), a `delete` that removed the session releases it. Sessions that
    DynamoDB's TTL removes are found by the recount (the GC sweep) when the cap is hit."""

    def __init__(self, inner: SessionStore, quotas: Quotas) -> None:
        self.inner = inner
        self.quotas = quotas

    def put(self, item: WatchSessionItem) -> None:
        self.quotas.reserve(WATCH_SESSIONS)
        stored = False
        try:
            self.inner.put(item)
            stored = True
        finally:
            if not stored:
                self.quotas.release(WATCH_SESSIONS)

    def get(self, wid: str) -> WatchSessionItem | None:
        return self.inner.get(wid)

    def save_cursors(self, wid: str, cursors: str | None, now_ms: int, ttl_ms: int) -> bool:
        return self.inner.save_cursors(wid, cursors, now_ms, ttl_ms)

    def delete(self, wid: str) -> bool:
        removed = self.inner.delete(wid)
        if removed:
            self.quotas.release(WATCH_SESSIONS)
        return removed

    def sweep(self, now_ms: int) -> int:
        return self.inner.sweep(now_ms)
