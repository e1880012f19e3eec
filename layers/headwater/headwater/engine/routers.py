"""Routers (spec §6): definitions with cycle and fan-in checks, and forwarding.

Forwarding is asynchronous and derived: each router has a durable cursor (the last source
seq it has handled). The forwarder diffs the source from the cursor, appends the copies to
the dest, and only then advances the cursor (at least once). `exactly_once` routers stamp a
stable key into meta._topics_router, skip source seqs already present in the dest's tail on
every catch-up, and use an idempotency key per forwarded range.

One step, RouterEngine.forward_to_head, does that under a per-router lease (one forwarder
at a time); two drivers run it: the in-process loop (RouterEngine.ensure_running, in every
uvicorn process) and StreamBatch (engine/router_stream.py: the forwarder Lambda on the log
table's stream)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass
from typing import Any

from headwater import jsoncodec
from headwater.engine.log import LogEngine
from headwater.engine.ports import Head
from headwater.engine.ports.routers import RouterItem, RouterStore
from headwater.engine.quotas import ROUTERS
from headwater.engine.records import NewRecord, encoded_size
from headwater.engine.values import AppendRequest, DiffRequest
from headwater.errors import (
    Conflict,
    HeadwaterError,
    NotFound,
    TopicExistsIncompatible,
    TopicNotFound,
)

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
PASS_BATCHES = 4  # the loop's batches per router per pass (fairness between routers)
# The forwarding lease: one forwarder (loop or stream Lambda) per router at a time. A crashed
# owner's lease lapses after this long and another forwarder resumes from the durable cursor.
# Renewed between batches once less than half is left, so a batch (diff + dest append +
# cursor write) should finish well inside LEASE_MS / 2. Lease times are wall clocks compared
# across hosts: clock skew shortens or lengthens a lease by the skew.
LEASE_MS = 5_000


@dataclass(frozen=True, slots=True)
class Forwarded:
    """What one forward_to_head call did: the cursor it left, the source seqs handled, the
    copies appended, the source's epoch (0: not read), and whether it stood aside because
    another forwarder holds the router's lease."""

    cursor: int
    handled: int = 0
    copied: int = 0
    epoch: int = 0
    leased_elsewhere: bool = False


@dataclass(frozen=True, slots=True)
class _SourceBatch:
    from_cursor: int
    next_from_seq: int
    head: Head
    records: list[bytes]


class RouterEngine:
    def __init__(
        self,
        engine: LogEngine,
        store: RouterStore,
        poll_s: float = 0.2,
        *,
        lease_ms: int = LEASE_MS,
        owner: str | None = None,
    ) -> None:
        self.log = engine
        self.store = store
        self.poll_s = poll_s
        self.lease_ms = lease_ms
        # Who holds a lease: unique per engine (host, pid and a random part).
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._leases: dict[str, int] = {}  # routers whose lease we hold -> expiry (epoch ms)
        self._task: asyncio.Task[None] | None = None
        self._changed: asyncio.Event | None = None  # set when a router is created here
        self._backoff: dict[str, tuple[float, float]] = {}  # name -> (retry at, delay)
        self._sources: list[str] = []  # sources seen by the last pass: what to wait on

    # --- definitions --------------------------------------------------------------------
    async def put(self, item: RouterItem) -> tuple[RouterItem, bool]:
        result = await self.log.run_io(self._put_sync, item)
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
        if old is not None:
            return self._store_router(item, old, src, dst)
        # A new router takes a max_routers slot (spec §11) before anything is created, so a
        # refused router leaves no auto-created dest behind.
        self.log.quota_reserve(ROUTERS, 1)
        stored = False
        try:
            result = self._store_router(item, old, src, dst)
            stored = True
            return result
        finally:
            if not stored:
                self.log.quota_release(ROUTERS, 1)

    def _store_router(
        self, item: RouterItem, old: RouterItem | None, src: Head, dst: Head | None
    ) -> tuple[RouterItem, bool]:
        if dst is None or dst.deleted:
            self.log.put_topic_sync(item.dest, {})
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
        item = await self.log.run_io(self.store.get, name)
        if item is None:
            raise RouterNotFound(f"router {name!r} does not exist", detail={"router": name})
        return item

    async def list_all(self) -> list[RouterItem]:
        return await self.log.run_io(self.store.list_all)

    async def delete(self, name: str) -> bool:
        def run() -> bool:
            deleted = self.store.delete(name)
            if deleted:
                self.log.quota_release(ROUTERS, 1)
            return deleted

        return await self.log.run_io(run)

    async def remove_for_topic(self, topic: str) -> list[str]:
        def run() -> list[str]:
            names = [r.name for r in self.store.list_all() if topic in (r.source, r.dest)]
            removed = [n for n in names if self.store.delete(n)]
            self.log.quota_release(ROUTERS, len(removed))
            return removed

        return await self.log.run_io(run)

    # --- forwarding ---------------------------------------------------------------------
    async def forward_to_head(
        self,
        router: RouterItem,
        on_cycle: bool = False,
        *,
        keep_lease: bool = False,
        max_batches: int | None = None,
        deadline: float | None = None,
    ) -> Forwarded:
        """Forward `router` from its durable cursor up to the source's head: the one step both
        the in-process loop and the stream forwarder Lambda run.

        Takes the router's lease first (a conditional write, only once there is something to
        forward) and skips the router if another forwarder holds it; renews it between
        batches while less than half of it is left. `keep_lease` keeps it afterwards (the
        loop: the next pass needs no write) instead of releasing it. Stops early after
        `max_batches` batches or at `deadline` (time.monotonic()). Raises what the dest
        append raised (e.g. topic_full): the cursor stays put."""
        if self._held_elsewhere(router):
            return Forwarded(router.cursor, leased_elsewhere=True)
        res = await self._read_source(router)
        if res.next_from_seq <= router.cursor:
            # Caught up: an idle router costs no write; a lease we kept is given back.
            await self._release(router.name)
            return Forwarded(router.cursor, epoch=res.head.epoch)
        item = await self._hold(router)
        if item is None:
            return Forwarded(router.cursor, leased_elsewhere=True)
        handled = copied = batches = 0
        try:
            while True:
                if res.next_from_seq <= item.cursor or res.from_cursor != item.cursor:
                    res = await self._read_source(item)
                    if res.next_from_seq <= item.cursor:
                        break
                step = await self._forward_batch(item, res, on_cycle)
                if step is None:
                    # Someone else moved the cursor: a lease race. Leave it to them.
                    self._leases.pop(item.name, None)
                    return Forwarded(item.cursor, handled, copied, res.head.epoch, True)
                n, cursor = step
                handled += cursor - item.cursor
                copied += n
                batches += 1
                item = dataclasses.replace(
                    item, cursor=cursor, forwarded_total=item.forwarded_total + n
                )
                if (max_batches is not None and batches >= max_batches) or (
                    deadline is not None and time.monotonic() >= deadline
                ):
                    break
                renewed = await self._hold(item)
                if renewed is None:  # lost the lease (it expired and was taken)
                    return Forwarded(item.cursor, handled, copied, res.head.epoch, True)
                item = renewed
        finally:
            if not keep_lease:
                await self._release(item.name)
        return Forwarded(item.cursor, handled, copied, res.head.epoch)

    async def _read_source(self, router: RouterItem) -> _SourceBatch:
        res = await self.log.diff(
            router.source,
            DiffRequest(from_seq=router.cursor, limit=BATCH, include_tags=True, include_meta=True),
        )
        return _SourceBatch(router.cursor, res.next_from_seq, res.head, res.records)

    async def _forward_batch(
        self, router: RouterItem, res: _SourceBatch, on_cycle: bool
    ) -> tuple[int, int] | None:
        """Append one batch's copies to the dest, then advance the cursor conditionally.
        Returns (copies, the cursor now), or None if the cursor had moved under us."""
        skip_upto = 0
        if router.guarantee == "exactly_once" and res.records:
            skip_upto = await self._already_forwarded(router)
        out: list[NewRecord] = []
        srcs: list[int] = []  # the source seq of each copy
        for raw in res.records:
            rec = jsoncodec.loads(raw)  # records nest up to 1024 levels: no recursion
            seq = int(rec["$seq"])
            if seq <= skip_upto:
                continue
            new = self._copy(router, rec, seq, on_cycle)
            if new is None:
                continue
            out.append(new)
            srcs.append(seq)
        upto = res.next_from_seq
        if out:
            key = None
            if router.guarantee == "exactly_once":
                # Keyed by the first source seq only: two forwarders that started from the
                # same cursor (a lease that lapsed mid-batch) may have read batches of
                # different lengths, and must still meet on one key.
                key = f"{ROUTER_META}:{router.name}:{res.head.epoch}:{srcs[0]}"
            done = await self.log.append(router.dest, AppendRequest(out, idempotency_key=key))
            # One line per forward (tests/e2e/test_faults.py turns them on to explain a copy
            # that differs: HEADWATER_DEBUG_LOGGERS=headwater.engine.routers).
            log.debug(
                "forward %s by %s: cursor %d skip %d src %d..%d -> dest %d..%d key %s deduped %s",
                router.name,
                self.owner,
                router.cursor,
                skip_upto,
                srcs[0],
                srcs[-1],
                done.first_seq,
                done.last_seq,
                key,
                done.deduped,
            )
            taken = done.last_seq - done.first_seq + 1
            if done.deduped and taken < len(out):
                # An earlier forward from this cursor copied a shorter batch: its copies are
                # a prefix of ours (same records, same filter). Advance past those only;
                # the rest goes in the next batch.
                upto = srcs[taken - 1]
                out = out[:taken]
        advanced = await self.log.run_io(
            self.store.advance, router.name, router.cursor, upto, len(out)
        )
        log.debug(
            "advance %s by %s: %d -> %d %s",
            router.name,
            self.owner,
            router.cursor,
            upto,
            "ok" if advanced else "moved under us",
        )
        return (len(out), upto) if advanced else None

    # --- the lease ----------------------------------------------------------------------
    def _held_elsewhere(self, router: RouterItem) -> bool:
        if router.lease_owner in (None, self.owner):
            return False
        if router.lease_expires_ms > self.log.clock():
            self._leases.pop(router.name, None)
            return True
        return False

    async def _hold(self, router: RouterItem) -> RouterItem | None:
        """The router under our lease: no write while more than half of it is left, else
        take or renew it (the stored item comes back with a strongly consistent cursor).
        None: another forwarder holds it."""
        now = self.log.clock()
        if self._leases.get(router.name, 0) - now > self.lease_ms // 2:
            return router
        item = await self.log.run_io(
            self.store.acquire, router.name, self.owner, now, self.lease_ms
        )
        if item is None:
            self._leases.pop(router.name, None)
            return None
        self._leases[router.name] = now + self.lease_ms
        return item

    async def _release(self, name: str) -> None:
        if self._leases.pop(name, None) is not None:
            await self.log.run_io(self.store.release, name, self.owner)

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
            head = await self.log.run_io(self.log.heads.get, router.dest)
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
            meta = jsoncodec.loads(raw).get("meta")
            stamp = meta.get(ROUTER_META) if isinstance(meta, dict) else None
            if isinstance(stamp, dict) and stamp.get("router") == router.name:
                best = max(best, int(stamp.get("src_seq", 0)))
        return best

    async def run_pass(self) -> bool:
        """One pass over every router (a few batches each, so one backlog cannot starve the
        others). True if any made progress."""
        progressed = False
        now = time.monotonic()
        routers = await self.list_all()
        self._sources = sorted({r.source for r in routers})
        for name in set(self._leases) - {r.name for r in routers}:
            self._leases.pop(name, None)  # deleted routers take their lease with them
        for router in routers:
            retry_at, delay = self._backoff.get(router.name, (0.0, 0.0))
            if retry_at > now:
                continue
            try:
                on_cycle = find_cycle(routers, router) is not None
                done = await self.forward_to_head(
                    router, on_cycle, keep_lease=True, max_batches=PASS_BATCHES
                )
            except TopicNotFound:
                continue  # a topic delete is cascading this router away
            except HeadwaterError as exc:
                # e.g. discard:"reject" on the dest (topic_full): back off, keep the cursor.
                delay = min(max(delay * 2, BACKOFF_MIN_S), BACKOFF_MAX_S)
                self._backoff[router.name] = (time.monotonic() + delay, delay)
                log.info("router %s: dest rejected (%s); retry in %.2fs", router.name, exc, delay)
                continue
            self._backoff.pop(router.name, None)
            progressed = progressed or done.handled > 0
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
                async with asyncio.timeout(IDLE_POLL_S):
                    await changed.wait()
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
        """Stop the loop and give back the leases it holds, so another forwarder takes over
        at once instead of after LEASE_MS."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for name in list(self._leases):
            with contextlib.suppress(HeadwaterError):
                await self._release(name)


def _definition_equal(a: RouterItem, b: RouterItem) -> bool:
    def definition(r: RouterItem) -> RouterItem:
        return dataclasses.replace(
            r, cursor=0, forwarded_total=0, lease_owner=None, lease_expires_ms=0
        )

    return definition(a) == definition(b)
