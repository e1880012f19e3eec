"""The event kernel: generator processes on a heap of timed events, and token buckets.

Events run in (time, insertion) order in one thread, so a run driven by a seeded random
source is deterministic.
"""

from __future__ import annotations

import heapq
from collections.abc import Generator
from typing import Any

Proc = Generator[Any, Any, Any]


class Signal:
    """Something a process can wait for (yield it); fire() wakes every waiter with a value."""

    __slots__ = ("done", "value", "waiters")

    def __init__(self) -> None:
        self.done = False
        self.value: Any = None
        self.waiters: list[Proc] = []


class Sim:
    """Processes are generators: `yield 0.01` sleeps 10 ms, `v = yield signal` waits."""

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, Proc, Any]] = []
        self._seq = 0
        self.events = 0

    def spawn(self, proc: Proc) -> None:
        self._push(0.0, proc, None)

    def _push(self, delay: float, proc: Proc, value: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (self.now + delay, self._seq, proc, value))

    def fire(self, sig: Signal, value: Any = None) -> None:
        sig.done = True
        sig.value = value
        for proc in sig.waiters:
            self._push(0.0, proc, value)
        sig.waiters.clear()

    def run(self, until: float) -> None:
        heap = self._heap
        pop = heapq.heappop
        while heap and heap[0][0] <= until:
            t, _, proc, value = pop(heap)
            self.now = t
            self.events += 1
            try:
                cmd = proc.send(value)
            except StopIteration:
                continue
            if isinstance(cmd, Signal):
                if cmd.done:
                    self._push(0.0, proc, cmd.value)
                else:
                    cmd.waiters.append(proc)
            else:
                self._push(cmd, proc, None)
        self.now = max(self.now, until)


class Bucket:
    """A token bucket (units per second, depth in units). A request larger than the depth
    passes when the bucket is full and leaves it in debt."""

    __slots__ = ("cap", "last", "name", "rate", "tokens", "used")

    def __init__(self, name: str, rate: float, depth_s: float) -> None:
        self.name = name
        self.rate = rate
        self.cap = rate * depth_s
        self.tokens = self.cap
        self.last = 0.0
        self.used = 0.0

    def level(self, now: float) -> float:
        self.tokens = min(self.cap, self.tokens + (now - self.last) * self.rate)
        self.last = now
        return self.tokens
