"""Claiming jobs (spec §10): one pass per topic per process serves every claimer waiting (a
cohort when the topic has claim_jitter_ms, otherwise whoever queued while the previous pass
ran). A pass reads the queue, takes expired or released leases first (the reclaim freelist,
by seq), then fresh jobs above the cursor, and commits them with conditional writes on
exactly the state it read; a pass that loses a race re-reads and tries again.

A job about to be delivered for the (max_deliveries + 1)-th time is moved to the topic's
dead_letter topic instead, and finished like an ack (queue_leases.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from headwater import jsoncodec
from headwater.engine.ports import CONFLICT, MAX_TXN_ITEMS, Head
from headwater.engine.ports.queue import Guard, Lease, queue_key
from headwater.engine.queue_core import (
    PASS_ATTEMPTS,
    ClaimResult,
    Job,
    QueueCore,
    claimable,
    clamp_lease_ms,
    counters,
)
from headwater.engine.queue_leases import Leases
from headwater.engine.records import NewRecord, StoredRecord, encoded_size
from headwater.engine.values import AppendRequest
from headwater.errors import HeadwaterError, TopicNotFound

log = logging.getLogger(__name__)

DEAD_LETTER_HOLDER = ""  # the reserved lease holder while a job moves to its dead-letter topic
DEAD_LETTER_FENCE_MS = 30_000


def new_lease_id() -> str:
    return "lease_" + secrets.token_hex(8)


@dataclass(slots=True)
class _Claimer:
    node: str
    want: int
    lease_ms: int | None
    future: asyncio.Future[ClaimResult]
    jobs: list[Job] = field(default_factory=list)


@dataclass(slots=True)
class _Coordinator:
    waiting: list[_Claimer] = field(default_factory=list)
    task: asyncio.Task[None] | None = None


@dataclass(slots=True)
class _Plan:
    head: Head
    qkey: str
    cursor: tuple[int, int] | None
    fresh: list[tuple[int, Lease, StoredRecord]]  # (claimer, lease, record)
    reclaimed: list[tuple[int, Lease, Guard, StoredRecord]]
    dead: list[tuple[Lease, StoredRecord]]
    orphans: list[Lease]  # lease items whose record is gone (deleted, expired)
    ready: int
    more: bool  # claimable work was left for a next attempt (dead letters took slots)
    min_lease_ms: int  # the shortest lease this pass hands out


def _share(available: int, wants: list[int], cohort: bool) -> list[int]:
    """How many of `available` jobs each claimer gets: in arrival order (greedy), or, for a
    coalescing-window cohort, in proportion to each claimer's max, remainders round-robin."""
    out = [0] * len(wants)
    if not cohort:
        for i, w in enumerate(wants):
            out[i] = min(w, available)
            available -= out[i]
        return out
    total = sum(wants)
    if available >= total:
        return list(wants)
    for i, w in enumerate(wants):
        out[i] = available * w // total
    left = available - sum(out)
    while left > 0:
        for i, w in enumerate(wants):
            if left and out[i] < w:
                out[i] += 1
                left -= 1
    return out


class Claims:
    def __init__(self, core: QueueCore, leases: Leases) -> None:
        self.core = core
        self.log = core.log
        self.store = core.store
        self.leases = leases
        self._coordinators: dict[str, _Coordinator] = {}
        self._jitter: dict[str, int] = {}  # claim_jitter_ms per topic, as of its last pass
        self.passes = 0

    @staticmethod
    async def _backoff(attempt: int) -> None:
        await asyncio.sleep(random.uniform(0, min(0.05, 0.002 * 2**attempt)))

    # --- claim --------------------------------------------------------------------------
    async def claim(self, topic: str, node: str, want: int, lease_ms: int | None) -> ClaimResult:
        loop = asyncio.get_running_loop()
        claimer = _Claimer(node, want, lease_ms, loop.create_future())
        coord = self._coordinators.setdefault(topic, _Coordinator())
        coord.waiting.append(claimer)
        if coord.task is None or coord.task.done():
            coord.task = loop.create_task(self._coordinate(topic, coord))
        try:
            return await claimer.future
        except asyncio.CancelledError:
            # Cancelled just as the result arrived: nobody will see these jobs; give them back.
            fut = claimer.future
            if fut.done() and not fut.cancelled() and fut.exception() is None and fut.result().jobs:
                self.core.spawn(self.leases.release(topic, node, fut.result().jobs))
            raise

    async def _coordinate(self, topic: str, coord: _Coordinator) -> None:
        try:
            while coord.waiting:
                # The window width as of this topic's last pass (a config change applies
                # from the next one); read once when this process has not served it yet.
                jitter = self._jitter.get(topic)
                if jitter is None:
                    try:
                        head = await self.log.run_io(self.core.queue_head, topic)
                    except Exception as exc:
                        self._fail(coord.waiting, exc)
                        coord.waiting = []
                        continue
                    jitter = self._jitter[topic] = head.cfg.claim_jitter_ms
                jitter_ms = jitter
                if jitter_ms > 0:
                    # The coalescing window: everyone arriving in it joins this cohort.
                    await asyncio.sleep(jitter_ms / 1000)
                cohort, coord.waiting = coord.waiting, []
                cohort = [c for c in cohort if not c.future.done()]
                if not cohort:
                    continue
                try:
                    ready = await self._serve(topic, cohort, jitter_ms > 0)
                except Exception as exc:
                    self._fail(cohort, exc)
                    continue
                for c in cohort:
                    if c.future.done():
                        # The claimer went away after its jobs were leased: give them back.
                        if c.jobs:
                            self.core.spawn(self.leases.release(topic, c.node, c.jobs))
                        continue
                    c.jobs.sort(key=lambda j: j.seq)
                    c.future.set_result(ClaimResult(c.jobs, ready))
        finally:
            if self._coordinators.get(topic) is coord and not coord.waiting:
                self._coordinators.pop(topic, None)

    @staticmethod
    def _fail(claimers: list[_Claimer], exc: BaseException) -> None:
        for c in claimers:
            if not c.future.done():
                c.future.set_exception(exc)

    async def _serve(self, topic: str, cohort: list[_Claimer], share: bool) -> int:
        """Claim for a cohort until each has its max, the queue has nothing claimable, or
        the attempts run out. Returns the ready counter after the pass."""
        ready = 0
        no_dead_letter: set[int] = set()  # the dead-letter topic refused: deliver instead
        # Jobs not to take in this pass: those whose dead-lettering failed (neither moved nor
        # delivered now), and those already granted to the cohort (a pass that runs past a
        # lease would otherwise see its own grant as expired and hand it out again).
        excluded: set[int] = set()
        started = time.monotonic()
        for attempt in range(PASS_ATTEMPTS):
            wants = [c.want - len(c.jobs) for c in cohort]
            if sum(wants) <= 0 and attempt > 0:
                break  # (a first pass runs even for max 0: it reports `ready`)
            self.passes += 1
            excluded.update(j.seq for c in cohort for j in c.jobs)
            plan = await self.log.run_io(
                self._plan, topic, cohort, wants, share, no_dead_letter, excluded
            )
            ready = plan.ready
            self._jitter[topic] = plan.head.cfg.claim_jitter_ms
            for lease, rec in plan.dead:
                try:
                    if not await self._dead_letter(plan, lease, rec):
                        no_dead_letter.add(lease.seq)
                except HeadwaterError as exc:
                    # The dead-letter topic is full, throttled or unreachable: the job stays
                    # where it is, and the next claim tries to move it again.
                    log.warning("dead-lettering %s/%d failed: %s", topic, lease.seq, exc.message)
                    excluded.add(lease.seq)
            if plan.orphans:
                await self.log.run_io(
                    self.leases.finish,
                    plan.head,
                    plan.qkey,
                    [
                        (lease, Guard(lease_id=lease.lease_id, due=lease.due))
                        for lease in plan.orphans
                    ],
                    False,
                )
            conflicted = await self.log.run_io(self._commit, plan, cohort)
            if not conflicted and not plan.more:
                break
            # Jobs granted early in a long pass lose lease time until the response goes out:
            # answer with what there is once a quarter of the shortest lease has passed.
            spent_ms = (time.monotonic() - started) * 1000
            if any(c.jobs for c in cohort) and spent_ms > plan.min_lease_ms / 4:
                break
            if conflicted:
                await self._backoff(attempt)
        return ready

    def _plan(
        self,
        topic: str,
        cohort: list[_Claimer],
        wants: list[int],
        share: bool,
        no_dead_letter: set[int],
        excluded: set[int],
    ) -> _Plan:
        head = self.core.queue_head(topic)
        qkey = queue_key(topic, head.epoch)
        now = self.log.clock()
        state = self.store.load(qkey, now)  # the queue item and the claimable leases
        cfg = head.cfg
        max_deliveries = cfg.max_deliveries
        dead_letter = cfg.dead_letter if max_deliveries > 0 else None
        total = sum(wants)

        # The reclaim freelist first: expired and released leases, by seq.
        picked: list[tuple[Lease, StoredRecord]] = []
        dead: list[tuple[Lease, StoredRecord]] = []
        orphans: list[Lease] = []
        freelist = [
            lease for lease in state.leases if claimable(lease, now) and lease.seq not in excluded
        ]
        # One read for the frames of the likely candidates (most reclaims are live jobs).
        self.core.prefetch(head, {lease.frame for lease in freelist[: total + 8]})
        more = False
        for lease in freelist:
            if len(picked) >= total:
                more = True
                break
            rec = self.core.live(head, self.core.frame(head, lease.frame), lease.seq, now)
            if rec is None:
                orphans.append(lease)
            elif (
                dead_letter
                and lease.deliveries >= max_deliveries
                and (lease.seq not in no_dead_letter)
            ):
                dead.append((lease, rec))
            else:
                picked.append((lease, rec))
        more = more or bool(dead) or bool(orphans)

        # Then fresh jobs above the claim cursor.
        fresh_recs: list[tuple[StoredRecord, int]] = []  # (record, its frame's key: first seq)
        cursor: tuple[int, int] | None = None
        need = total - len(picked)
        examined = 0
        if need > 0 and state.cursor < head.head_seq:
            start = max(state.cursor, head.earliest_seq - 1)
            frames = self.log.frames_after(head, start, need)
            last = state.cursor
            for frame in frames:
                for rec in frame.records:
                    if rec.seq <= start or rec.seq > head.head_seq:
                        continue
                    if len(fresh_recs) >= need:
                        break
                    last = rec.seq
                    examined += 1
                    if self.core.live(head, frame, rec.seq, now) is not None:
                        fresh_recs.append((rec, frame.first_seq))
                else:
                    continue
                break
            if last > state.cursor:
                cursor = (state.cursor, last)
            # Dead or expired records used up the read: look further on the next attempt.
            more = more or (len(fresh_recs) < need and last < head.head_seq)

        # Share what was found across the cohort, then make the leases.
        shares = _share(len(picked) + len(fresh_recs), wants, share)
        pool: list[tuple[Lease | None, StoredRecord, int]] = [
            (lease, r, lease.frame) for lease, r in picked
        ]
        pool += [(None, r, frame_key) for r, frame_key in fresh_recs]
        fresh: list[tuple[int, Lease, StoredRecord]] = []
        reclaimed: list[tuple[int, Lease, Guard, StoredRecord]] = []
        pos = 0
        for i, n in enumerate(shares):
            c = cohort[i]
            lease_ms = clamp_lease_ms(c.lease_ms if c.lease_ms is not None else cfg.lease_ms)
            for old, rec, frame_key in pool[pos : pos + n]:
                lease = Lease(
                    seq=rec.seq,
                    node=c.node,
                    lease_id=new_lease_id(),
                    due=now + lease_ms,
                    deliveries=(old.deliveries if old is not None else 0) + 1,
                    frame=frame_key,
                    size=rec.size,
                )
                if old is None:
                    fresh.append((i, lease, rec))
                else:
                    reclaimed.append((i, lease, Guard(lease_id=old.lease_id, due=old.due), rec))
            pos += n

        before = counters(head, state, now)
        taken = len(picked) + len(dead) + len(orphans)
        fresh_left = max(0, min(head.count - state.outstanding, head.head_seq - state.cursor))
        ready = max(0, before.ready - taken - min(fresh_left, examined))
        default_ms = cfg.lease_ms
        min_lease = min(
            clamp_lease_ms(c.lease_ms if c.lease_ms is not None else default_ms) for c in cohort
        )
        return _Plan(head, qkey, cursor, fresh, reclaimed, dead, orphans, ready, more, min_lease)

    def _commit(self, plan: _Plan, cohort: list[_Claimer]) -> bool:
        """Write the plan, in transactions of at most 100 items: the cursor step with the
        fresh leases, then the reclaims. Grants the committed jobs; True if any part lost a
        race (the caller re-plans)."""
        conflicted = False
        fresh = plan.fresh
        if plan.cursor is not None:
            old, new = plan.cursor
            chunk_n = MAX_TXN_ITEMS - 1
            for i in range(0, max(len(fresh), 1), chunk_n):
                fchunk = fresh[i : i + chunk_n]
                last = i + chunk_n >= len(fresh)
                step_to = new if last else fchunk[-1][1].seq
                failed = self.store.claim(plan.qkey, (old, step_to), [f[1] for f in fchunk], [])
                if failed:
                    conflicted = True  # the cursor moved: another pass handed those out
                    break
                self._grant(cohort, fchunk)
                old = step_to
        pending = list(plan.reclaimed)
        while pending:
            chunk = pending[:MAX_TXN_ITEMS]
            failed = self.store.claim(
                plan.qkey, None, [], [(lease, guard) for _, lease, guard, _ in chunk]
            )
            if CONFLICT in failed:
                conflicted = True
                break
            if failed:
                # Leases someone else re-leased first: drop those, commit the rest.
                conflicted = True
                keep = [r for k, r in enumerate(chunk, start=1) if k not in failed]
                pending = keep + pending[len(chunk) :]
                continue
            self._grant(cohort, [(c, lease, rec) for c, lease, _, rec in chunk])
            pending = pending[len(chunk) :]
        return conflicted

    @staticmethod
    def _grant(cohort: list[_Claimer], granted: Sequence[tuple[int, Lease, StoredRecord]]) -> None:
        for i, lease, rec in granted:
            cohort[i].jobs.append(Job(lease.seq, lease.lease_id, lease.due, lease.deliveries, rec))

    async def _dead_letter(self, plan: _Plan, lease: Lease, rec: StoredRecord) -> bool:
        """Move one job to the dead-letter topic, then finish it. False when the dead-letter
        topic cannot take it (absent with auto_create off): the job is then delivered.

        First the lease is taken over by the reserved holder "" (no client can use an empty
        node), on exactly the lease seen: from then on the lapsed holder's late ack, nack or
        extend is skipped, so a job is never both acked and dead-lettered. If this pass dies
        after the take-over, the fence lapses after DEAD_LETTER_FENCE_MS and a later claim
        moves the job (the append is idempotent)."""
        head = plan.head
        fence = dataclasses.replace(
            lease,
            node=DEAD_LETTER_HOLDER,
            lease_id=new_lease_id(),
            due=self.log.clock() + DEAD_LETTER_FENCE_MS,
        )
        seen = Guard(lease_id=lease.lease_id, due=lease.due)
        if await self.log.run_io(self.store.claim, plan.qkey, None, [], [(fence, seen)]):
            return True  # the lease changed under us: whoever changed it owns the job now
        dest = str(head.cfg.dead_letter)
        meta = jsoncodec.loads(rec.meta_raw) if rec.meta_raw is not None else {}
        if not isinstance(meta, dict):
            meta = {}
        meta.update(
            {
                "$dead_letter_from": head.topic,
                "$dead_letter_deliveries": lease.deliveries,
                "$dead_letter_src_seq": lease.seq,
            }
        )
        meta_raw = jsoncodec.dumps(meta)
        record = NewRecord(
            data=None,
            node=rec.node,
            tag=rec.tag,
            meta=meta,
            size=encoded_size(rec.data_raw, meta_raw, rec.tag, rec.node),
            data_raw=rec.data_raw,
            meta_raw=meta_raw,
        )
        # Keyed by queue instance and seq: a pass that dies after the append and before the
        # finish, or two passes racing, leave one copy (within the idempotency window).
        key = f"hw-dead-letter:{head.topic}#{head.epoch}:{lease.seq}"
        try:
            await self.log.append(dest, AppendRequest([record], idempotency_key=key))
        except TopicNotFound:
            log.warning("dead_letter topic %r absent and not auto-creatable", dest)
            # Give the job back as it was (claimable), for this pass to deliver instead.
            back = [(lease.seq, Guard(lease_id=fence.lease_id, node=DEAD_LETTER_HOLDER), 0, None)]
            await self.log.run_io(self.store.update, plan.qkey, back)
            return False
        await self.log.run_io(
            self.leases.finish,
            head,
            plan.qkey,
            [(fence, Guard(lease_id=fence.lease_id, due=fence.due))],
            True,
        )
        return True
