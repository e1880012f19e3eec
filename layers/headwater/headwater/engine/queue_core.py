"""What the queue engine's parts share: the lease values (a claimed job, the counters, a
claim's and a lease operation's results), the clock rule of a lease (`claimable`), the
counters' evaluation, and one QueueCore: the log engine and lease store the parts work on,
the queue's head, its jobs' frames and records, and the background tasks they start.

The parts (queue_claims.py, queue_leases.py) each hold this one object; QueueEngine
(queue.py) is their façade, and the only one of them that code outside them uses."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from headwater.engine.ports import Head
from headwater.engine.ports.queue import Lease, LeaseStore, QueueState
from headwater.engine.records import Frame, StoredRecord
from headwater.errors import NotAQueue, TopicNotFound

if TYPE_CHECKING:
    from headwater.engine.log import LogEngine

LEASE_MIN_MS, LEASE_MAX_MS = 100, 86_400_000
PASS_ATTEMPTS = 12  # a claim pass's attempts (4x as many retries of a finish or a re-time)


def clamp_lease_ms(value: int) -> int:
    return min(max(value, LEASE_MIN_MS), LEASE_MAX_MS)


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


class QueueCore:
    def __init__(self, engine: LogEngine, store: LeaseStore) -> None:
        self.log = engine
        self.store = store
        self._background: set[asyncio.Task[None]] = set()

    def queue_head(self, topic: str) -> Head:
        head = self.log.heads.get(topic)
        if head is None or head.deleted:
            raise TopicNotFound(topic)
        if not head.cfg.is_queue:
            raise NotAQueue(
                f"topic {topic!r} is not a queue (create it with type: queue)",
                detail={"topic": topic},
            )
        return head

    def frame(self, head: Head, key: int) -> Frame | None:
        """The tail frame keyed `key` (its first seq), from the cache or the table."""
        frame = self.log.cache.frame_from(head.log_key, key, head.del_ver)
        if frame is None:
            frame = self.log.tail.get_frames(head, [key]).get(key)
            if frame is not None:
                self.log.cache.put(head.log_key, frame, head.del_ver)
        return frame

    def prefetch(self, head: Head, frames: set[int]) -> None:
        missing = [
            f
            for f in sorted(frames)
            if self.log.cache.frame_from(head.log_key, f, head.del_ver) is None
        ]
        if missing:
            for frame in self.log.tail.get_frames(head, missing).values():
                self.log.cache.put(head.log_key, frame, head.del_ver)

    def live(self, head: Head, frame: Frame | None, seq: int, now: int) -> StoredRecord | None:
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

    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task
