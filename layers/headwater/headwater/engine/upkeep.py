"""When an append starts its topic's upkeep (sealing, trimming, eviction: tiering.py) in the
background: once the topic is past a threshold or a cap, at most once per interval per
topic, one run at a time, and a request held back is deferred rather than dropped."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from headwater.engine.core import LogCore
from headwater.engine.retention import upkeep_due
from headwater.engine.sweeps import ChangedTopics

if TYPE_CHECKING:
    import asyncio

UPKEEP_INTERVAL_S = 1.0  # an append starts upkeep of its topic at most this often
log = logging.getLogger(__name__)


class UpkeepTrigger:
    def __init__(self, core: LogCore) -> None:
        self.core = core
        # Set by the service container: seals, trims and evicts (engine/tiering.py).
        self.run: Callable[[str], object] | None = None
        self.interval_s = UPKEEP_INTERVAL_S
        self._at: dict[str, float] = {}
        self._running: set[str] = set()
        self._deferred: set[str] = set()  # topics whose upkeep waits to run once
        # Every topic an append committed to, for the background sweeps (engine/sweeps.py).
        self.changes = ChangedTopics()

    def after_commit(self, topic: str) -> None:
        """An append to `topic` committed (on the event loop). A cap is enforced within
        about an interval of the append that passed it rather than at the next sweep.

        The commit left its head in the head cache, but an upkeep run on another thread may
        have forgotten it since (it evicted or sealed: reads must take the head from
        storage). Not knowing the head is no reason to skip: the request is made anyway, and
        the run reads the head itself (at most one extra run per interval)."""
        self.changes.note(topic)
        tiering = self.core.settings.tiering
        if self.run is None or not tiering.inline:
            return
        head = self.core.head_cache.get(topic)
        if head is not None and not upkeep_due(head, tiering):
            return
        import asyncio  # not at the top: see engine/__init__.py

        self._request(topic, asyncio.get_running_loop())

    def _request(self, topic: str, loop: asyncio.AbstractEventLoop) -> None:
        """Run upkeep of `topic` now if allowed, else once later (on the event loop)."""
        if topic in self._deferred:
            return  # a later run is already arranged; it sees this append too
        if topic in self._running:
            self._deferred.add(topic)  # _ready asks again
            return
        wait = self._at.get(topic, -math.inf) + self.interval_s - time.monotonic()
        if wait > 0:
            self._deferred.add(topic)
            loop.call_later(wait, self._ready, topic, loop, False)
            return
        upkeep = self.run
        if upkeep is None:
            return
        self._at[topic] = time.monotonic()
        self._running.add(topic)

        def run() -> None:
            try:
                upkeep(topic)
            except Exception:  # upkeep is retried by the next append and the sweep
                log.warning("upkeep of %s failed", topic, exc_info=True)
            finally:
                try:
                    loop.call_soon_threadsafe(self._ready, topic, loop, True)
                except RuntimeError:  # the loop closed: nothing more to arrange
                    self._running.discard(topic)

        try:
            self.core.bg_pool.submit(run)
        except RuntimeError:  # the engine closed
            self._running.discard(topic)

    def _ready(self, topic: str, loop: asyncio.AbstractEventLoop, ran: bool) -> None:
        """A run finished (`ran`) or a deferral's wait is over: start a deferred request."""
        if ran:
            self._running.discard(topic)
            if topic not in self._deferred:
                return
        self._deferred.discard(topic)
        self._request(topic, loop)
