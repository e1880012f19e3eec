"""The two /api/v2 event streams, as async generators of SSE frames.

Both start with `retry: 3000`, send `heartbeat` every `heartbeat_ms`, end after
`max_connection_sec` or at shutdown (the browser reconnects with Last-Event-ID), and give
every event an `evt_<uuid>` id that carries the feed position (dashboard/ids.py).

- Metrics stream: `metrics` at once (the current state; also after a resume), then when the
  tally changes (at most every `metrics_min_interval_ms`) and at least every
  `metrics_interval_ms`.
- Configuration stream: a `heartbeat` at once, then a `sentiment_update` per new item whose
  ticker is one of the configuration's. A Last-Event-ID within the resume buffer replays the
  matching updates after it first; an unknown one starts from the current state. Edits of
  the configuration apply without reconnecting (at once when made through this process,
  else within `config_poll_ms`); a deleted configuration ends the stream."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

from headwater import jsoncodec
from headwater.dashboard.ids import Position, event_id
from headwater.dashboard.items import iso_ms
from headwater.dashboard.service import ConfigWatch, DashboardService
from headwater.engine.ports.dashboard import DashboardConfig

log = logging.getLogger(__name__)
RETRY_MS = 3000
RETRY_FRAME = f"retry: {RETRY_MS}\n\n".encode()


def frame(event: str, event_id_: str, data: bytes) -> bytes:
    return b"".join(
        (b"event: ", event.encode(), b"\nid: ", event_id_.encode(), b"\ndata: ", data, b"\n\n")
    )


class _Stream:
    def __init__(self, svc: DashboardService, wake: asyncio.Event) -> None:
        self.svc = svc
        self.feed = svc.feed
        self.wake = wake
        cfg = svc.settings
        self.heartbeat_s = cfg.heartbeat_ms / 1000
        now = time.monotonic()
        self.end_at = now + cfg.max_connection_sec
        self.next_heartbeat = now + self.heartbeat_s

    def _id(self, seq: int) -> str:
        return event_id(self.feed.check, self.feed.epoch, seq)

    def heartbeat(self, seq: int) -> bytes:
        """A heartbeat whose id carries `seq`: the last position this stream delivered."""
        self.next_heartbeat = time.monotonic() + self.heartbeat_s
        data = {
            "timestamp": iso_ms(self.svc.clock()),
            "connections": self.svc.connections.count,
            "uptime_seconds": self.svc.uptime_seconds(),
        }
        return frame("heartbeat", self._id(seq), jsoncodec.dumps(data))

    def over(self) -> bool:
        return self.svc.shutdown.is_set() or time.monotonic() >= self.end_at

    async def sleep_until(self, deadline: float) -> None:
        timeout = min(deadline, self.end_at) - time.monotonic()
        if timeout > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self.wake.wait()


async def metrics_stream(svc: DashboardService, wake: asyncio.Event) -> AsyncIterator[bytes]:
    s = _Stream(svc, wake)
    cfg = svc.settings
    min_s, every_s = cfg.metrics_min_interval_ms / 1000, cfg.metrics_interval_ms / 1000
    yield RETRY_FRAME
    sent_version = -1
    last_metrics = float("-inf")
    while not s.over():
        wake.clear()
        now = time.monotonic()
        changed = s.feed.version != sent_version
        if (changed and now - last_metrics >= min_s) or now - last_metrics >= every_s:
            sent_version, last_metrics = s.feed.version, now
            yield frame("metrics", s._id(s.feed.cursor), s.feed.metrics())
            continue
        if now >= s.next_heartbeat:
            yield s.heartbeat(s.feed.cursor)
            continue
        due = last_metrics + (min_s if changed else every_s)
        await s.sleep_until(min(due, s.next_heartbeat))


async def config_stream(
    svc: DashboardService,
    wake: asyncio.Event,
    config: DashboardConfig,
    resume: Position | None,
) -> AsyncIterator[bytes]:
    s = _Stream(svc, wake)
    feed = s.feed
    watch = ConfigWatch(wake, config.version)
    svc.watch_config(config.user_id, config.config_id, watch)
    try:
        yield RETRY_FRAME
        tickers = frozenset(config.tickers)
        epoch = feed.epoch
        pos = resume.seq if feed.resumes(resume) and resume is not None else feed.cursor
        yield s.heartbeat(pos)
        while not s.over():
            wake.clear()
            # Configuration changes first: an edit applies to every item appended after it.
            cur: DashboardConfig | None = None
            if watch.dirty:  # changed through this process: read it now
                watch.dirty = False
                try:
                    found = await svc.engine.run_io(
                        svc.configs.get, config.user_id, config.config_id
                    )
                except Exception:  # storage trouble: the shared poller reads it later
                    log.warning("configuration re-read failed", exc_info=True)
                else:
                    if found is None:
                        return  # deleted: the reconnect gets 404
                    cur = found
            if watch.polled is not None:
                cur, watch.polled = cur or watch.polled, None
            if watch.gone:
                return
            if cur is not None and cur.version > watch.version:
                watch.version, tickers = cur.version, frozenset(cur.tickers)
            if feed.epoch != epoch:
                # The topic was created or recreated: everything in it is new.
                epoch, pos = feed.epoch, 0
            if pos < feed.cursor:
                cursor, fresh = feed.cursor, feed.updates_after(pos)  # one consistent view
                for u in fresh:
                    if u.ticker in tickers:
                        yield frame("sentiment_update", s._id(u.seq), u.data)
                pos = cursor
                continue
            if time.monotonic() >= s.next_heartbeat:
                yield s.heartbeat(pos)
                continue
            await s.sleep_until(s.next_heartbeat)
    finally:
        svc.unwatch_config(config.user_id, config.config_id, watch)
