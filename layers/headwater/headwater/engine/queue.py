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
  of the call: nothing decays in storage, so nothing has to run to keep them right.

QueueEngine is the façade over the parts, which share one QueueCore (queue_core.py: the lease
values, the counters, the queue's head and its jobs' records):
- queue_claims.py  claim passes, cohorts, the commit of the leases, dead letters
- queue_leases.py  ack, nack, extend, release, reconcile after a record delete, the floor
Push mode (/work), the queue's check and counters and the forgetting of a deleted queue's
leases are the façade's own."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Sequence

from headwater.engine.log import LogEngine
from headwater.engine.ports import Head
from headwater.engine.ports.queue import LeaseStore, queue_key
from headwater.engine.queue_claims import Claims
from headwater.engine.queue_core import (
    ClaimResult,
    Counters,
    Job,
    LeaseOpResult,
    QueueCore,
    claimable,
    counters,
)
from headwater.engine.queue_leases import Leases
from headwater.errors import HeadwaterError

__all__ = ["QueueEngine"]

log = logging.getLogger(__name__)

WORK_TICK_S = 1.0  # a /work stream re-checks its leases and the queue at least this often
WORK_HEARTBEAT_MS = 15_000


class QueueEngine:
    def __init__(self, engine: LogEngine, store: LeaseStore) -> None:
        self.log = engine
        self.store = store
        self.core = QueueCore(engine, store)
        self.leases = Leases(self.core)
        self.claims = Claims(self.core, self.leases)

    @property
    def passes(self) -> int:
        """Claim passes this process has run (what the batching tests count)."""
        return self.claims.passes

    # --- claim, ack, nack, extend: the parts ----------------------------------------------
    async def claim(self, topic: str, node: str, want: int, lease_ms: int | None) -> ClaimResult:
        return await self.claims.claim(topic, node, want, lease_ms)

    async def ack(
        self, topic: str, node: str, seqs: Sequence[int], lease_ids: Sequence[str] | None
    ) -> LeaseOpResult:
        return await self.leases.ack(topic, node, seqs, lease_ids)

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
        return await self.leases.retime(topic, node, seqs, lease_ids, release=release, ms=ms)

    async def reconcile(self, topic: str) -> int:
        """After a §5 record delete on a queue: end the leases whose job was deleted, so the
        counters stay exact and nobody holds a job that no longer exists. Returns how many."""
        return await self.leases.reconcile(topic)

    # --- state --------------------------------------------------------------------------
    async def check(self, topic: str) -> Head:
        """The queue's head: 404 topic_not_found, or 409 not_a_queue for a log topic."""
        return await self.log.run_io(self.core.queue_head, topic)

    async def counters(self, head: Head) -> Counters:
        now = self.log.clock()
        state = await self.log.run_io(self.store.load, queue_key(head.topic, head.epoch), now)
        return counters(head, state, now)

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
                task = self.core.spawn(self.leases.release(topic, node, list(held.values())))
                # If this stream is cancelled meanwhile, the release still runs to the end.
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(task)

    def _still_held(self, topic: str, node: str, held: dict[int, Job]) -> dict[int, Job]:
        head = self.core.queue_head(topic)
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
