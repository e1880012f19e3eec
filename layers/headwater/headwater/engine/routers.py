"""Routers (spec §6): definitions with cycle and fan-in checks, and the in-process forwarder.

Forwarding is asynchronous and derived: each router has a durable cursor (the last source
seq it has handled). The forwarder diffs the source from the cursor, appends the copies to
the dest, and only then advances the cursor (at least once). `exactly_once` routers stamp a
stable key into meta._topics_router, skip source seqs already present in the dest's tail on
every catch-up, and use an idempotency key per forwarded range."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
from typing import Any

from headwater import jsoncodec
from headwater.engine.log import LogEngine
from headwater.engine.records import NewRecord, encoded_size
from headwater.engine.values import AppendRequest, DiffRequest
from headwater.errors import (
    Conflict,
    HeadwaterError,
    NotFound,
    TopicExistsIncompatible,
    TopicNotFound,
)
from headwater.storage.ports import RouterItem, RouterStore

log = logging.getLogger(__name__)

ROUTER_META = "_topics_router"
MAX_HOPS = 8  # runtime loop-breaker for allow_cycle routers
BATCH = 256
DEST_SCAN = 256  # exactly_once: how much of the dest tail is checked for already-forwarded keys
BACKOFF_MIN_S = 0.05
BACKOFF_MAX_S = 2.0


class RouterNotFound(NotFound):
    code = "router_not_found"


def find_cycle(routers: list[RouterItem], new: RouterItem) -> list[str] | None:
    """A directed path dest → … → source in the graph (excluding the router being replaced)
    closes a cycle with `new`; return it as [source, dest, …, source]."""
    edges: dict[str, list[str]] = {}
    for r in routers:
        if r.name != new.name:
            edges.setdefault(r.source, []).append(r.dest)
    stack: list[tuple[str, list[str]]] = [(new.dest, [new.source, new.dest])]
    seen: set[str] = set()
    while stack:
        node, path = stack.pop()
        if node == new.source:
            return path
        if node in seen:
            continue
        seen.add(node)
        for nxt in sorted(edges.get(node, []), reverse=True):
            stack.append((nxt, [*path, nxt]))
    return None


def tag_matches(flt: tuple[str, ...] | None, tag: str | None) -> bool:
    if flt is None:
        return True
    _, op, value = flt
    if tag is None:
        return False
    if op == "Glob":
        return tag.startswith(value[:-1])
    return tag == value


IDLE_POLL_S = 5.0  # how often a process with no routers looks for new ones
ERROR_BACKOFF_S = 2.0


class RouterEngine:
    def __init__(self, engine: LogEngine, store: RouterStore, poll_s: float = 0.2) -> None:
        self.log = engine
        self.store = store
        self.poll_s = poll_s
        self._task: asyncio.Task[None] | None = None
        self._changed: asyncio.Event | None = None  # set when a router is created here
        self._backoff: dict[str, tuple[float, float]] = {}  # name -> (retry at, delay)
        self._sources: list[str] = []  # sources seen by the last pass: what to wait on

    # --- definitions --------------------------------------------------------------------
    async def put(self, item: RouterItem) -> tuple[RouterItem, bool]:
        result = await self.log._io(self._put_sync, item)
        if self._changed is not None:
            self._changed.set()  # an idle forwarder picks the new router up at once
        return result

    def _put_sync(self, item: RouterItem) -> tuple[RouterItem, bool]:
        heads = self.log.heads.get_many([item.source, item.dest])
        src = heads.get(item.source)
        if src is None or src.deleted:
            raise TopicNotFound(item.source)
        dst = heads.get(item.dest)
        if (dst is None or dst.deleted) and not item.create_dest:
            raise TopicNotFound(item.dest)
        routers = self.store.list_all()
        old = next((r for r in routers if r.name == item.name), None)
        for r in routers:
            if r.name != item.name and r.dest == item.dest and r.source != item.source:
                raise TopicExistsIncompatible(
                    f"topic {item.dest!r} is already the derived destination of router "
                    f"{r.name!r} (source {r.source!r}); a dest has a single source",
                    detail={"reason": "router_dest_fan_in", "router": r.name},
                )
        if not item.allow_cycle:
            cycle = find_cycle(routers, item)
            if cycle is not None:
                raise Conflict(
                    f"router would create a cycle: {' -> '.join(cycle)}",
                    code="router_cycle",
                    detail={"cycle": cycle},
                )
        if dst is None or dst.deleted:
            self.log._put_topic_sync(item.dest, {})
        if old is not None and old.source == item.source:
            keep = dataclasses.replace(item, cursor=old.cursor, forwarded_total=old.forwarded_total)
            if _definition_equal(old, item):
                return keep, False
            self.store.put(keep)
            return keep, False
        # A new router forwards what is appended from now on.
        fresh = dataclasses.replace(item, cursor=src.head_seq, forwarded_total=0)
        if old is not None:
            self.store.delete(old.name)  # the source changed: a new cursor
        self.store.put(fresh)
        return fresh, old is None

    async def get(self, name: str) -> RouterItem:
        item = await self.log._io(self.store.get, name)
        if item is None:
            raise RouterNotFound(f"router {name!r} does not exist", detail={"router": name})
        return item

    async def list_all(self) -> list[RouterItem]:
        return await self.log._io(self.store.list_all)

    async def delete(self, name: str) -> bool:
        return await self.log._io(self.store.delete, name)

    async def remove_for_topic(self, topic: str) -> list[str]:
        def run() -> list[str]:
            names = [r.name for r in self.store.list_all() if topic in (r.source, r.dest)]
            return [n for n in names if self.store.delete(n)]

        return await self.log._io(run)

    # --- forwarding ---------------------------------------------------------------------
    async def forward_once(self, router: RouterItem, on_cycle: bool = False) -> int:
        """Forward one batch from the router's cursor. Returns the number of source seqs
        handled (0: caught up). Raises when the dest rejects (the cursor stays put)."""
        res = await self.log.diff(
            router.source,
            DiffRequest(from_seq=router.cursor, limit=BATCH, include_tags=True, include_meta=True),
        )
        if res.next_from_seq <= router.cursor:
            return 0
        skip_upto = 0
        if router.guarantee == "exactly_once" and res.records:
            skip_upto = await self._already_forwarded(router)
        out: list[NewRecord] = []
        first = last = 0
        for raw in res.records:
            rec = json.loads(raw)
            seq = int(rec["$seq"])
            if seq <= skip_upto:
                continue
            new = self._copy(router, rec, seq, on_cycle)
            if new is None:
                continue
            out.append(new)
            first = first or seq
            last = seq
        if out:
            key = None
            if router.guarantee == "exactly_once":
                key = f"{ROUTER_META}:{router.name}:{res.head.epoch}:{first}-{last}"
            await self.log.append(router.dest, AppendRequest(out, idempotency_key=key))
        await self.log._io(
            self.store.advance, router.name, router.cursor, res.next_from_seq, len(out)
        )
        return res.next_from_seq - router.cursor

    def _copy(
        self, router: RouterItem, rec: dict[str, Any], seq: int, on_cycle: bool
    ) -> NewRecord | None:
        tag = rec.get("$tag") if router.preserve_tag else None
        if not tag_matches(router.filter, rec.get("$tag")):
            return None
        node = rec.get("$node") if router.preserve_node else None
        meta = rec.get("meta")
        prev = meta.get(ROUTER_META) if isinstance(meta, dict) else None
        # A record that already came through a router keeps its trail, whatever this
        # router's own settings, so a cycle closed by any allow_cycle router is broken here.
        # Every router on a cycle starts the trail, so the one closing it can break the loop.
        stamp = on_cycle or router.guarantee == "exactly_once" or prev is not None
        if stamp:
            path = [str(p) for p in prev.get("path", [])] if isinstance(prev, dict) else []
            if router.dest in path or len(path) >= MAX_HOPS:
                return None  # loop-breaker: it came from dest, or has hopped too often
            if not path:
                path = [router.source]
            meta = dict(meta or {})
            meta[ROUTER_META] = {
                "router": router.name,
                "src_seq": seq,
                "key": f"{router.name}:{seq}",
                "path": [*path, router.dest],
            }
        data_raw = jsoncodec.dumps(rec["data"])
        meta_raw = jsoncodec.dumps(meta) if meta is not None else None
        size = encoded_size(data_raw, meta_raw, tag, node)
        return NewRecord(None, node, tag, meta, size, data_raw, meta_raw)

    async def _already_forwarded(self, router: RouterItem) -> int:
        """The highest source seq of this router already present in the dest's tail."""
        try:
            head = await self.log._io(self.log.heads.get, router.dest)
            if head is None or head.deleted:
                return 0
            res = await self.log.diff(
                router.dest,
                DiffRequest(from_seq=max(0, head.head_seq - DEST_SCAN), limit=DEST_SCAN),
            )
        except TopicNotFound:
            return 0
        best = 0
        for raw in res.records:
            meta = json.loads(raw).get("meta")
            stamp = meta.get(ROUTER_META) if isinstance(meta, dict) else None
            if isinstance(stamp, dict) and stamp.get("router") == router.name:
                best = max(best, int(stamp.get("src_seq", 0)))
        return best

    async def run_pass(self) -> bool:
        """One pass over every router. True if any made progress."""
        progressed = False
        now = time.monotonic()
        routers = await self.list_all()
        self._sources = sorted({r.source for r in routers})
        for router in routers:
            retry_at, delay = self._backoff.get(router.name, (0.0, 0.0))
            if retry_at > now:
                continue
            try:
                on_cycle = find_cycle(routers, router) is not None
                moved = await self.forward_once(router, on_cycle)
            except TopicNotFound:
                continue  # a topic delete is cascading this router away
            except HeadwaterError as exc:
                # e.g. discard:"reject" on the dest (topic_full): back off, keep the cursor.
                delay = min(max(delay * 2, BACKOFF_MIN_S), BACKOFF_MAX_S)
                self._backoff[router.name] = (time.monotonic() + delay, delay)
                log.info("router %s: dest rejected (%s); retry in %.2fs", router.name, exc, delay)
                continue
            self._backoff.pop(router.name, None)
            progressed = progressed or moved > 0
        return progressed

    async def _run(self) -> None:
        while True:
            try:
                progressed = await self.run_pass()
            except asyncio.CancelledError:
                raise
            except Exception:  # storage trouble: keep the worker alive, but back off
                log.exception("router forwarder pass failed")
                await asyncio.sleep(ERROR_BACKOFF_S)
                continue
            if not progressed:
                await self._wait_any()

    async def _wait_any(self) -> None:
        sources = self._sources
        if not sources:
            # No routers: look again rarely (another process may create one), or at once
            # when one is created in this process.
            changed = self._changed
            if changed is None:
                await asyncio.sleep(IDLE_POLL_S)
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), IDLE_POLL_S)
            changed.clear()
            return
        waits = [asyncio.ensure_future(self.log.notifier.wait(s, self.poll_s)) for s in sources]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
            await asyncio.gather(*waits, return_exceptions=True)

    def ensure_running(self) -> None:
        if self._changed is None:
            self._changed = asyncio.Event()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _definition_equal(a: RouterItem, b: RouterItem) -> bool:
    return dataclasses.replace(a, cursor=0, forwarded_total=0) == dataclasses.replace(
        b, cursor=0, forwarded_total=0
    )
