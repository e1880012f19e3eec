"""A queue's leases after the claim: ack (the job's record and its lease deleted in one
transaction, on the lease being held by the acking node), nack and extend (the lease re-timed
on the same guard), releasing a stream's or a vanished claimer's leases at once, ending the
leases of jobs a §5 delete removed, and moving the floor past the acked prefix.

`finish` is also how a claim pass ends a job it dead-lettered and the leases whose record is
gone (queue_claims.py)."""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import Sequence

from headwater.engine.ports import CONFLICT, MAX_TXN_ITEMS, Head
from headwater.engine.ports.queue import Guard, Lease, LeaseCommit, queue_key
from headwater.engine.queue_core import (
    PASS_ATTEMPTS,
    Counters,
    Job,
    LeaseOpResult,
    QueueCore,
    counters,
)
from headwater.engine.quotas import TOTAL_BYTES
from headwater.errors import HeadwaterError, StorageUnavailable, TopicNotFound

log = logging.getLogger(__name__)

FLOOR_INTERVAL_S = 1.0


def _log_failure(fut: asyncio.Future[None]) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.warning("queue upkeep failed: %r", fut.exception())


class Leases:
    def __init__(self, core: QueueCore) -> None:
        self.core = core
        self.log = core.log
        self.store = core.store
        self._floor_moved: dict[str, float] = {}
        self._floor_deferred: set[str] = set()

    def finish(
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
        head = self.core.queue_head(topic)
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
        done, after = self.finish(head, qkey, held, False) if held else ([], head)
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

    async def release(self, topic: str, node: str, jobs: Sequence[Job]) -> None:
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

    async def reconcile(self, topic: str) -> int:
        """After a §5 record delete on a queue: end the leases whose job was deleted, so the
        counters stay exact and nobody holds a job that no longer exists. Returns how many."""
        return await self.log.run_io(self._reconcile_sync, topic)

    def _reconcile_sync(self, topic: str) -> int:
        head = self.core.queue_head(topic)
        qkey = queue_key(topic, head.epoch)
        state = self.store.load(qkey)
        now = self.log.clock()
        self.core.prefetch(head, {lease.frame for lease in state.leases})
        gone = [
            lease
            for lease in state.leases
            if self.core.live(head, self.core.frame(head, lease.frame), lease.seq, now) is None
        ]
        if not gone:
            return 0
        done, _ = self.finish(
            head, qkey, [(g, Guard(lease_id=g.lease_id, due=g.due)) for g in gone], False
        )
        return len(done)
