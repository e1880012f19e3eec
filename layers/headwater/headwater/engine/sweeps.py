"""Which topics a long-running process's background sweeps read (the upkeep timer in
tiering.py, the local indexer in index/local.py), so that idle topics cost nothing.

A sweep over every live topic reads every head (a strongly consistent BatchGetItem item per
topic) each interval: ~310 idle streams kept the emulator a quarter busy, and on AWS each
read is a read unit whether anyone writes or not (issue 42). Yet a head that needs no work
keeps needing none until something writes it, or until a time rule comes due (a tail frame
old enough to seal, sealed frames past the grace period, records past their TTL). So the
timers sweep, each interval, only

- the topics this process changed since the last sweep (`ChangedTopics`: appends, config and
  ext writes, record deletes, and upkeep that sealed or evicted), and
- the topics whose last visit named a time at which a rule comes due, once it has come;

and every `FULL_SWEEP_S` every live topic, which catches what other processes wrote (and
anything this bookkeeping missed). On AWS the sealer function's schedule still sweeps every
topic (it sees no writes): docs/operations.md "Background sweeps" gives both costs."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable

from headwater.engine.ports import Head, HeadStore

FULL_SWEEP_S = 300.0  # every live topic at least this often (other processes' writes)
log = logging.getLogger(__name__)


class ChangedTopics:
    """Names of topics this process changed, fanned out to each subscribed sweep."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._feeds: list[set[str]] = []

    def note(self, topic: str) -> None:
        with self._lock:
            for feed in self._feeds:
                feed.add(topic)

    def subscribe(self) -> Callable[[], set[str]]:
        """A new feed: call it to take the topics changed since the last call."""
        feed: set[str] = set()
        with self._lock:
            self._feeds.append(feed)

        def drain() -> set[str]:
            with self._lock:
                out = set(feed)
                feed.clear()
            return out

        return drain


class SweepPlan:
    """One timer's schedule: a full sweep every `full_every_s` (the first one at once), else
    the changed topics and those whose due time has come."""

    def __init__(
        self,
        changed: Callable[[], set[str]],
        full_every_s: float = FULL_SWEEP_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.changed = changed
        self.full_every_s = full_every_s
        self.monotonic = monotonic
        self._last_full = -math.inf
        self._due: dict[str, int] = {}  # topic -> wall ms at which it wants a visit

    def next(self, now_ms: int) -> list[str] | None:
        """The topics to visit now, or None for every live topic."""
        changed = self.changed()
        now = self.monotonic()
        if now - self._last_full >= self.full_every_s:
            self._last_full = now
            self._due.clear()  # the full sweep sees every topic and records what is due
            return None
        due = {t for t, at in self._due.items() if at <= now_ms}
        return sorted(changed | due)

    def visited(self, topics: Iterable[str], due: dict[str, int]) -> None:
        """Topics just visited, and when those with time-bound work want the next visit."""
        for t in topics:
            self._due.pop(t, None)
        self._due.update(due)

    def failed(self, topics: list[str] | None) -> None:
        """A sweep failed: its topics are visited again next time (all of them: a full one)."""
        if topics is None:
            self._last_full = -math.inf
        else:
            self._due.update({t: 0 for t in topics})

    @property
    def pending(self) -> int:
        return len(self._due)


def live_heads(heads: HeadStore, topics: Iterable[str]) -> list[Head]:
    """The heads of those of `topics` that are live, each read strongly."""
    out = []
    for topic in topics:
        head = heads.get(topic)
        if head is not None and not head.deleted:
            out.append(head)
    return out


async def run_timer(
    interval_s: float, tick: Callable[[SweepPlan], object], plan: SweepPlan, what: str
) -> None:
    """`tick(plan)` every `interval_s` on a worker thread, for ever (a task to cancel);
    storage trouble is logged and the next tick tries again."""
    import asyncio  # not at the top: see engine/__init__.py

    while True:
        await asyncio.sleep(interval_s)
        try:
            await asyncio.to_thread(tick, plan)
        except Exception:
            log.warning("%s failed", what, exc_info=True)
