"""Work queues (spec §10): lease-based, at-least-once job delivery on a queue topic's log.

The jobs are the topic's records; the lease state lives in the LEASES table (see
storage/leases.py): a claim cursor, and one lease item per job handed out and not finished.

- Claim: one pass per topic per process serves every claimer waiting (a cohort when the
  topic has claim_jitter_ms, otherwise whoever queued while the previous pass ran). A pass
  reads the queue, takes expired or released leases first (the reclaim freelist, by seq),
  then fresh jobs above the cursor, and commits them with conditional writes on exactly the
  state it read; a pass that loses a race re-reads and tries again.
- Visibility timeout: by clock, lazily. A lease whose deadline has passed is claimable; no
  timer or background process is involved, so this holds on Lambda as it does locally.
- Ack deletes the record (the §5 permanent delete) and the lease in one transaction, on the
  lease being held by the acking node; nack and extend re-time the lease on the same guard.
- Dead letter: a job about to be delivered for the (max_deliveries + 1)-th time is appended
  to the dead_letter topic (idempotently, keyed by queue instance and seq) and then finished
  like an ack.
- Counters (ready / in_flight) are evaluated from the lease items and the head at the moment
  of the call: nothing decays in storage, so nothing has to run to keep them right."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import random
import secrets
import time
from collections.abc import AsyncGenerator, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from headwater import jsoncodec
from headwater.engine.log import LogEngine
from headwater.engine.ports import CONFLICT, MAX_TXN_ITEMS, Head
from headwater.engine.ports.queue import (
    Guard,
    Lease,
    LeaseCommit,
    LeaseStore,
    QueueState,
    queue_key,
)
from headwater.engine.quotas import TOTAL_BYTES
from headwater.engine.records import Frame, NewRecord, StoredRecord, encoded_size
from headwater.engine.values import AppendRequest
from headwater.errors import (
    HeadwaterError,
    NotAQueue,
    StorageUnavailable,
    TopicNotFound,
)

log = logging.getLogger(__name__)

LEASE_MIN_MS, LEASE_MAX_MS = 100, 86_400_000
PASS_ATTEMPTS = 12
WORK_TICK_S = 1.0  # a /work stream re-checks its leases and the queue at least this often
WORK_HEARTBEAT_MS = 15_000
FLOOR_INTERVAL_S = 1.0
DEAD_LETTER_HOLDER = ""  # the reserved lease holder while a job moves to its dead-letter topic
DEAD_LETTER_FENCE_MS = 30_000


def _log_failure(fut: asyncio.Future[None]) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.warning("queue upkeep failed: %r", fut.exception())


def clamp_lease_ms(value: int) -> int:
    return min(max(value, LEASE_MIN_MS), LEASE_MAX_MS)


def new_lease_id() -> str:
    return "lease_" + secrets.token_hex(8)


@dataclass(frozen=True, slots=True)
class Job:
    seq: int
    lease_id: str
    deadline: int
    deliveries: int
    record: StoredRecord

    def render(self, topic_json: bytes | None = None) -> bytes:
        """The claimed[] entry: the record ($-metadata, data, meta) plus the lease fields."""
        body = self.record.render(include_tags=True, include_meta=True)
        lease = b',"lease_id":"%s","deadline":%d,"deliveries":%d}' % (
            self.lease_id.encode(),
            self.deadline,
            self.deliveries,
        )
        if topic_json is not None:
            body = b'{"topic":' + topic_json + b"," + body[1:]
        return body[:-1] + lease


@dataclass(frozen=True, slots=True)
class Counters:
    ready: int
    in_flight: int
    dead_lettered: int


@dataclass(frozen=True, slots=True)
class ClaimResult:
    jobs: list[Job]
    ready: int


@dataclass(frozen=True, slots=True)
class LeaseOpResult:
    done: list[int]
    skipped: list[int]
    counters: Counters
    deadlines: dict[int, int] = field(default_factory=dict)


def claimable(lease: Lease, now: int) -> bool:
    """A held lease expires once now > deadline (§10.3); a released one is claimable from its
    visible-at time on (a nack with delay 0 is claimable at once)."""
    return lease.due < now if lease.node is not None else lease.due <= now


def counters(head: Head, state: QueueState, now: int) -> Counters:
    """ready = claimable leases + live records above the cursor; in_flight = held leases
    not yet expired. `state` may list only the released and expired leases (the rest are
    held): the held count is what the outstanding total leaves."""
    ready = delayed = listed_held = 0
    for lease in state.leases:
        if claimable(lease, now):
            ready += 1
        elif lease.node is None:
            delayed += 1  # a nack's delay_ms not yet elapsed: counted in neither
        else:
            listed_held += 1
    in_flight = state.outstanding - ready - delayed
    fresh = max(0, min(head.count - state.outstanding, head.head_seq - state.cursor))
    return Counters(ready + fresh, max(0, in_flight), state.dead_lettered)


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


class QueueEngine:
    def __init__(self, engine: LogEngine, store: LeaseStore) -> None:
        self.log = engine
        self.store = store
        self._coordinators: dict[str, _Coordinator] = {}
        self._background: set[asyncio.Task[None]] = set()
        self._floor_moved: dict[str, float] = {}
        self._floor_deferred: set[str] = set()
        self._jitter: dict[str, int] = {}  # claim_jitter_ms per topic, as of its last pass
        self.passes = 0

    # --- helpers ------------------------------------------------------------------------
    def _queue_head(self, topic: str) -> Head:
        head = self.log.heads.get(topic)
        if head is None or head.deleted:
            raise TopicNotFound(topic)
        if not head.cfg.is_queue:
            raise NotAQueue(
                f"topic {topic!r} is not a queue (create it with type: queue)",
                detail={"topic": topic},
            )
        return head

    def _frame(self, head: Head, key: int) -> Frame | None:
        """The tail frame keyed `key` (its first seq), from the cache or the table."""
        frame = self.log.cache.frame_from(head.log_key, key, head.del_ver)
        if frame is None:
            frame = self.log.tail.get_frames(head, [key]).get(key)
            if frame is not None:
                self.log.cache.put(head.log_key, frame, head.del_ver)
        return frame

    def _prefetch(self, head: Head, frames: set[int]) -> None:
        missing = [
            f
            for f in sorted(frames)
            if self.log.cache.frame_from(head.log_key, f, head.del_ver) is None
        ]
        if missing:
            for frame in self.log.tail.get_frames(head, missing).values():
                self.log.cache.put(head.log_key, frame, head.del_ver)

    def _live(self, head: Head, frame: Frame | None, seq: int, now: int) -> StoredRecord | None:
        """The job's record if it is still live: not deleted, not below the floor, not past
        the topic's ttl (an expired job is never delivered)."""
        if frame is None or seq in frame.deleted or seq < head.earliest_seq:
            return None
        if not frame.first_seq <= seq <= frame.last_seq:
            return None
        rec = frame.records[seq - frame.first_seq]
        ttl = head.cfg.ttl_ms
        if ttl > 0 and rec.ts < now - ttl:
            return None
        return rec

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
                self._spawn(self._release(topic, node, fut.result().jobs))
            raise

    async def _coordinate(self, topic: str, coord: _Coordinator) -> None:
        try:
            while coord.waiting:
                # The window width as of this topic's last pass (a config change applies
                # from the next one); read once when this process has not served it yet.
                jitter = self._jitter.get(topic)
                if jitter is None:
                    try:
                        head = await self.log.run_io(self._queue_head, topic)
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
                            self._spawn(self._release(topic, c.node, c.jobs))
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

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

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
                    self._finish,
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
        head = self._queue_head(topic)
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
        self._prefetch(head, {lease.frame for lease in freelist[: total + 8]})
        more = False
        for lease in freelist:
            if len(picked) >= total:
                more = True
                break
            rec = self._live(head, self._frame(head, lease.frame), lease.seq, now)
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
                    if self._live(head, frame, rec.seq, now) is not None:
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
            self._finish,
            head,
            plan.qkey,
            [(fence, Guard(lease_id=fence.lease_id, due=fence.due))],
            True,
        )
        return True

    # --- finishing: ack, dead letter, orphans ---------------------------------------------
    def _finish(
        self,
        head: Head,
        qkey: str,
        targets: list[tuple[Lease, Guard]],
        dead_letter: bool,
    ) -> tuple[list[int], Head]:
        """Delete each target's lease (on its guard) and its record, in transactions of at
        most 100 items. Returns the seqs finished by this call and the head after."""
        done: list[int] = []
        gone: set[int] = set()  # records already deleted (a §5 delete got there first)
        pending = list(targets)
        attempts = 0
        while pending:
            attempts += 1
            if attempts > 4 * PASS_ATTEMPTS:
                raise StorageUnavailable("queue update kept conflicting; retry")
            chunk: list[tuple[Lease, Guard]] = []
            frames: set[int] = set()
            for lease, guard in pending:
                extra = 1 + (lease.frame not in frames)
                if 1 + len(frames) + len(chunk) + extra + int(dead_letter) > MAX_TXN_ITEMS:
                    break
                chunk.append((lease, guard))
                frames.add(lease.frame)
            records = [
                (lease.frame, lease.seq, lease.size)
                for lease, _ in chunk
                if lease.seq not in gone and lease.seq >= head.earliest_seq
            ]
            commit = LeaseCommit(
                qkey,
                head,
                [(lease.seq, guard) for lease, guard in chunk],
                records,
                len(chunk) if dead_letter else 0,
                held_until={lease.seq: lease.due for lease, _ in chunk if lease.node},
                now_ms=self.log.clock(),
            )
            failed = self.store.complete(commit)
            if not failed:
                done.extend(lease.seq for lease, _ in chunk)
                if records:
                    head = self._after(head, records)
                pending = pending[len(chunk) :]
                continue
            if CONFLICT in failed:
                time.sleep(random.uniform(0, 0.01))
                continue
            record_frames = sorted({f for f, _, _ in records})
            if 0 in failed:
                fresh = self.log.heads.get(head.topic)
                if fresh is None or fresh.deleted or fresh.epoch != head.epoch:
                    raise TopicNotFound(head.topic)
                head = fresh
            for k, frame_key in enumerate(record_frames, start=1):
                if k in failed:
                    frame = self.log.tail.get_frames(head, [frame_key]).get(frame_key)
                    if frame is not None:
                        gone.update(frame.deleted)
                    else:  # the frame itself is gone: so are its records
                        gone.update(seq for f, seq, _ in records if f == frame_key)
            base = 1 + len(record_frames)
            lost = {chunk[k - base][0].seq for k in failed if k >= base}
            pending = [t for t in pending if t[0].seq not in lost]
        if done:
            self.log.forget_head(head.topic)
        return done, head

    def _after(self, head: Head, records: list[tuple[int, int, int]]) -> Head:
        freed = sum(size for _, _, size in records)
        self.log.quota_release(TOTAL_BYTES, freed)
        return self.log.after_delete(head, len(records), freed, None)

    def _held(
        self,
        topic: str,
        node: str,
        seqs: Sequence[int],
        lease_ids: Sequence[str] | None,
    ) -> tuple[Head, str, list[tuple[Lease, Guard]], list[int]]:
        """The queue's head and lease partition, the requested leases `node` holds (and
        whose id matches, when fenced) with the guard to write them on, and the skipped."""
        head = self._queue_head(topic)
        qkey = queue_key(topic, head.epoch)
        by_seq = self.store.get(qkey, seqs)
        held: list[tuple[Lease, Guard]] = []
        skipped: list[int] = []
        seen: set[int] = set()
        for i, seq in enumerate(seqs):
            if seq in seen:
                continue
            seen.add(seq)
            lease = by_seq.get(seq)
            fence = lease_ids[i] if lease_ids is not None else None
            if (
                lease is None
                or lease.node != node
                or (fence is not None and lease.lease_id != fence)
            ):
                skipped.append(seq)
            else:
                held.append((lease, Guard(lease_id=fence, node=node)))
        return head, qkey, held, skipped

    async def ack(
        self, topic: str, node: str, seqs: Sequence[int], lease_ids: Sequence[str] | None
    ) -> LeaseOpResult:
        result, floor = await self.log.run_io(self._ack_sync, topic, node, seqs, lease_ids)
        self.log.notifier.notify(topic)
        if floor:
            self._advance_floor(topic)
        return result

    def _advance_floor(self, topic: str) -> None:
        """Move the floor past the finished prefix (and the holes in it, which the topic's
        count holds until then), in the background and at most once a second per topic; a
        request within the second runs at its end, so the last acks of a queue that drains
        are not left behind (on the event loop)."""
        if topic in self._floor_deferred:
            return  # a later move is arranged; it sees this ack too
        now = time.monotonic()
        wait = self._floor_moved.get(topic, -math.inf) + FLOOR_INTERVAL_S - now
        if wait > 0:
            self._floor_deferred.add(topic)

            def later() -> None:
                self._floor_deferred.discard(topic)
                self._advance_floor(topic)

            asyncio.get_running_loop().call_later(wait, later)
            return
        self._floor_moved[topic] = now
        self.log.submit_io(self.log.advance_floor, topic).add_done_callback(_log_failure)

    def _ack_sync(
        self, topic: str, node: str, seqs: Sequence[int], lease_ids: Sequence[str] | None
    ) -> tuple[LeaseOpResult, bool]:
        head, qkey, held, skipped = self._held(topic, node, seqs, lease_ids)
        done, after = self._finish(head, qkey, held, False) if held else ([], head)
        finished = set(done)
        skipped += [lease.seq for lease, _ in held if lease.seq not in finished]
        now = self.log.clock()
        state = self.store.load(qkey, now)  # the counters after the ack
        # The job at the floor is gone, or no job is left out (the floor may stand on a hole
        # no job will ever ack: a producer's reservation that never committed)
        floor = bool(done) and (min(done) <= head.earliest_seq or state.outstanding == 0)
        return LeaseOpResult(done, skipped, counters(after, state, now)), floor

    async def retime(
        self,
        topic: str,
        node: str,
        seqs: Sequence[int],
        lease_ids: Sequence[str] | None,
        *,
        release: bool,
        ms: int,
    ) -> LeaseOpResult:
        """nack (release=True: claimable again after `ms`) or extend (deadline now + `ms`)."""
        result = await self.log.run_io(self._retime_sync, topic, node, seqs, lease_ids, release, ms)
        if release:
            self.log.notifier.notify(topic)
        return result

    def _retime_sync(
        self,
        topic: str,
        node: str,
        seqs: Sequence[int],
        lease_ids: Sequence[str] | None,
        release: bool,
        ms: int,
    ) -> LeaseOpResult:
        head, qkey, held, skipped = self._held(topic, node, seqs, lease_ids)
        now = self.log.clock()
        due = now + ms
        done: list[int] = []
        pending = held
        attempts = 0
        while pending:
            attempts += 1
            if attempts > 4 * PASS_ATTEMPTS:
                raise StorageUnavailable("queue update kept conflicting; retry")
            chunk = pending[:MAX_TXN_ITEMS]
            failed = self.store.update(
                qkey, [(lease.seq, guard, due, None if release else node) for lease, guard in chunk]
            )
            if CONFLICT in failed:
                time.sleep(random.uniform(0, 0.01))
                continue
            lost = {chunk[k][0].seq for k in failed}
            skipped += sorted(lost)
            done += [lease.seq for lease, _ in chunk if lease.seq not in lost]
            pending = pending[len(chunk) :]
        if not release:  # extend answers with deadlines, not counters
            return LeaseOpResult(done, skipped, Counters(0, 0, 0), {seq: due for seq in done})
        state = self.store.load(qkey, now)
        return LeaseOpResult(done, skipped, counters(head, state, now))

    async def _release(self, topic: str, node: str, jobs: Sequence[Job]) -> None:
        """Give leases back at once (a /work connection ended, a claimer went away)."""
        try:
            await self.retime(
                topic,
                node,
                [j.seq for j in jobs],
                [j.lease_id for j in jobs],
                release=True,
                ms=0,
            )
        except HeadwaterError as exc:
            log.warning("releasing %d leases on %s failed: %s", len(jobs), topic, exc.message)

    # --- state --------------------------------------------------------------------------
    async def check(self, topic: str) -> Head:
        """The queue's head: 404 topic_not_found, or 409 not_a_queue for a log topic."""
        return await self.log.run_io(self._queue_head, topic)

    async def counters(self, head: Head) -> Counters:
        now = self.log.clock()
        state = await self.log.run_io(self.store.load, queue_key(head.topic, head.epoch), now)
        return counters(head, state, now)

    async def reconcile(self, topic: str) -> int:
        """After a §5 record delete on a queue: end the leases whose job was deleted, so the
        counters stay exact and nobody holds a job that no longer exists. Returns how many."""
        return await self.log.run_io(self._reconcile_sync, topic)

    def _reconcile_sync(self, topic: str) -> int:
        head = self._queue_head(topic)
        qkey = queue_key(topic, head.epoch)
        state = self.store.load(qkey)
        now = self.log.clock()
        self._prefetch(head, {lease.frame for lease in state.leases})
        gone = [
            lease
            for lease in state.leases
            if self._live(head, self._frame(head, lease.frame), lease.seq, now) is None
        ]
        if not gone:
            return 0
        done, _ = self._finish(
            head, qkey, [(g, Guard(lease_id=g.lease_id, due=g.due)) for g in gone], False
        )
        return len(done)

    async def forget(self, head: Head) -> None:
        """Drop a deleted queue instance's lease items (best effort)."""
        try:
            await self.log.run_io(self.store.clear, queue_key(head.topic, head.epoch))
        except HeadwaterError:
            log.warning("leases of deleted queue %s left behind", head.topic, exc_info=True)

    # --- push mode (/work) --------------------------------------------------------------
    async def work(
        self, topic: str, node: str, depth: int, lease_ms: int | None
    ) -> AsyncGenerator[Job | None, None]:
        """Keep up to `depth` jobs leased to this stream: yields each job as it is leased, and
        None when a heartbeat is due. When the consumer stops (closes the generator, or is
        cancelled), the leases delivered here and still held are released at once."""
        held: dict[int, Job] = {}
        hub = self.log.hub
        hub.watch(topic)  # appends in other processes wake this stream too
        last_frame = time.monotonic()
        try:
            while True:
                if len(held) < depth:
                    got = await self.claim(topic, node, depth - len(held), lease_ms)
                    # All of them count as this stream's before the first goes out: if the
                    # client drops while a write blocks, the unsent ones are released too.
                    held.update((job.seq, job) for job in got.jobs)
                    for job in got.jobs:
                        yield job
                    if got.jobs:
                        last_frame = time.monotonic()
                        continue
                idle = time.monotonic() - last_frame
                wait = min(WORK_TICK_S, max(0.0, WORK_HEARTBEAT_MS / 1000 - idle))
                await self.log.notifier.wait(topic, wait)
                if time.monotonic() - last_frame >= WORK_HEARTBEAT_MS / 1000:
                    last_frame = time.monotonic()
                    yield None
                if held:
                    held = await self.log.run_io(self._still_held, topic, node, held)
        finally:
            hub.unwatch(topic)
            if held:
                task = self._spawn(self._release(topic, node, list(held.values())))
                # If this stream is cancelled meanwhile, the release still runs to the end.
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(task)

    def _still_held(self, topic: str, node: str, held: dict[int, Job]) -> dict[int, Job]:
        head = self._queue_head(topic)
        current = self.store.get(queue_key(topic, head.epoch), list(held))
        now = self.log.clock()
        return {
            seq: job
            for seq, job in held.items()
            if (lease := current.get(seq)) is not None
            and lease.node == node
            and lease.lease_id == job.lease_id
            and not claimable(lease, now)  # an expired lease frees its slot on the stream
        }
