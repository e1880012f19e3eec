"""Forwarding driven by the log table's stream: StreamBatch, the forwarder Lambda's driver of
RouterEngine.forward_to_head (engine/routers.py), one instance per invocation."""

from __future__ import annotations

import asyncio
import dataclasses
import time

from headwater.engine.ports.routers import RouterItem
from headwater.engine.routers import LEASE_MS, Forwarded, RouterEngine, find_cycle
from headwater.errors import HeadwaterError, TopicNotFound

# The stream forwarder, finding a router leased elsewhere, watches the owner this long (a
# little over one lease) before leaving the frame to it; polled every LEASE_POLL_S.
STREAM_LEASE_WAIT_S = LEASE_MS / 1000 + 0.5
LEASE_POLL_S = 0.1


class ForwardIncomplete(Exception):
    """A stream record's routers did not all reach its frame in time: retry the record."""


class StreamBatch:
    """Forwarding driven by the log table's stream (the forwarder Lambda), one instance per
    invocation. Each stream record is a new frame (source topic, epoch, last seq); every
    router on that source whose durable cursor is behind the frame runs forward_to_head, the
    loop's own step, and releases its lease after. A re-delivered record is a no-op once the
    cursor has passed it; a dest that rejects (e.g. topic_full) or a storage error fails the
    record, so the event source retries it. The router list is read once per batch.

    A router leased by another forwarder is left to it, not failed; but first this waits (at
    most `lease_wait_s`, polling the router) to see the owner at work: its cursor reaches the
    frame, or it renews or advances (alive: it forwards up to the head). A lease that lapses
    instead (its owner died, or is a frozen execution environment) is taken over at once, so
    the frame is not left waiting for the next append."""

    def __init__(
        self,
        routers: RouterEngine,
        deadline: float | None = None,
        lease_wait_s: float | None = None,
    ) -> None:
        self._engine = routers
        self._deadline = deadline  # time.monotonic() by which forwarding must stop
        self._lease_wait_s = STREAM_LEASE_WAIT_S if lease_wait_s is None else lease_wait_s
        self._routers: dict[str, RouterItem] | None = None
        self._epochs: dict[str, int] = {}  # router -> source epoch its cursor is in
        self._failed: dict[str, HeadwaterError] = {}  # routers that failed this batch
        self._owned_elsewhere: set[str] = set()  # routers a live owner is forwarding

    async def frame_appended(self, topic: str, epoch: int, last_seq: int) -> list[Forwarded]:
        if self._routers is None:
            self._routers = {r.name: r for r in await self._engine.list_all()}
        out: list[Forwarded] = []
        errors: list[HeadwaterError] = []
        for router in [r for r in self._routers.values() if r.source == topic]:
            if router.name in self._failed:
                errors.append(self._failed[router.name])  # fail fast: it failed this batch
                continue
            if router.name in self._owned_elsewhere or self._reached(router, epoch, last_seq):
                continue
            try:
                done = await self._forward(router, epoch, last_seq)
            except TopicNotFound:
                continue  # the source is gone: a topic delete is cascading this router away
            except HeadwaterError as exc:
                self._failed[router.name] = exc
                errors.append(exc)
                continue
            out.append(done)
            if done.leased_elsewhere:
                self._owned_elsewhere.add(router.name)
            elif not self._reached(self._routers[router.name], epoch, last_seq):
                raise ForwardIncomplete(f"router {router.name!r} stopped before seq {last_seq}")
        if errors:
            raise errors[0]
        return out

    async def _forward(self, router: RouterItem, epoch: int, last_seq: int) -> Forwarded:
        assert self._routers is not None
        on_cycle = find_cycle(list(self._routers.values()), router) is not None
        done = await self._step(router, on_cycle)
        if not done.leased_elsewhere or self._reached(self._routers[router.name], epoch, last_seq):
            return done
        engine = self._engine
        wait_until = time.monotonic() + self._lease_wait_s
        if self._deadline is not None:
            wait_until = min(wait_until, self._deadline)
        seen: RouterItem | None = None
        while time.monotonic() < wait_until:
            await asyncio.sleep(LEASE_POLL_S)
            item = await engine.log.run_io(engine.store.get, router.name)
            if item is None:
                return done  # deleted meanwhile
            self._routers[router.name] = item
            if self._reached(item, epoch, last_seq):
                return Forwarded(item.cursor, leased_elsewhere=True)  # its owner got there
            if item.lease_owner is None or item.lease_expires_ms <= engine.log.clock():
                done = await self._step(item, on_cycle)  # given back, or lapsed: take over
                if not done.leased_elsewhere:
                    return done
                seen = None  # a third forwarder was quicker: watch that one
                continue
            if _owner_at_work(seen, item):
                return done  # the owner renews or advances: alive, it reaches the head
            seen = item
        return done

    async def _step(self, router: RouterItem, on_cycle: bool) -> Forwarded:
        assert self._routers is not None
        done = await self._engine.forward_to_head(
            router, on_cycle, keep_lease=False, deadline=self._deadline
        )
        if done.epoch:
            self._epochs[router.name] = done.epoch
        self._routers[router.name] = dataclasses.replace(router, cursor=done.cursor)
        return done

    def _reached(self, router: RouterItem, epoch: int, last_seq: int) -> bool:
        known = self._epochs.get(router.name)
        if known is not None and known != epoch:
            return known > epoch  # a frame of an older incarnation of the topic: nothing to do
        return router.cursor >= last_seq


def _owner_at_work(before: RouterItem | None, now: RouterItem) -> bool:
    """The same owner renewed its lease or moved the cursor between two looks."""
    if before is None or before.lease_owner != now.lease_owner:
        return False
    return (before.lease_expires_ms, before.cursor) != (now.lease_expires_ms, now.cursor)
