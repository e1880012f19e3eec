"""Notifications on the log engine: one log per event type.

Each notification is one record of the engine topic `~aviso/<event_type>`:
- `data` is the notification's payload JSON exactly as it was sent (`null` when omitted),
  spliced verbatim into CloudEvents on the way out, never decoded by a replay;
- `meta` is `{"t": <topic string>, "i": {<identifier field>: <canonical string>}}`, the only
  part a watch or replay decodes to filter.

The engine gives every record a u64 seq (aviso's sequence number: `<event_type>@<seq>`)
and an append time that never goes back on a topic (what `from_date` seeks by). Sealed
history is read from S3 segments by the same range reads, so a long replay costs one range
GET per block. Deletes (one notification, or a wipe) mark records deleted; seqs are never
reused. No surface other than /api/v1 can name these topics: the `~` prefix is
outside every /v0 topic name and the Durable Streams prefix is `~ds/`."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import orjson

from headwater import jsoncodec
from headwater.engine import AppendRequest, LogEngine, NewRecord, StoredRecord
from headwater.engine.ports import Head
from headwater.errors import TopicNotFound

TOPIC_PREFIX = "~aviso/"
READ_BYTES = 4 << 20  # payload bytes per engine range read
NULL = b"null"


def topic_of(event_type: str) -> str:
    return TOPIC_PREFIX + event_type


def event_type_of(topic: str) -> str:
    return topic[len(TOPIC_PREFIX) :]


@dataclass(frozen=True, slots=True)
class Stored:
    """A notification as stored: its seq, append time (ms), topic string, canonical
    identifier and payload JSON text (b"null" when it had none)."""

    event_type: str
    seq: int
    ts_ms: int
    topic: str
    identifier: dict[str, str]
    payload_raw: bytes


@dataclass(frozen=True, slots=True)
class Batch:
    notifications: list[Stored]
    next_after: int  # the seq the next batch starts after
    head_seq: int  # the last seq stored when this batch was read


def _record(topic: str, identifier: Mapping[str, str], payload_raw: bytes | None) -> NewRecord:
    data = payload_raw if payload_raw is not None else NULL
    meta = {"t": topic, "i": dict(identifier)}
    meta_raw = jsoncodec.exact(orjson.dumps(meta))
    return NewRecord(
        data=None, meta=meta, size=len(data) + len(meta_raw) + 16, data_raw=data, meta_raw=meta_raw
    )


def _decode(event_type: str, rec: StoredRecord) -> Stored:
    meta = orjson.loads(rec.meta_raw) if rec.meta_raw is not None else {}
    return Stored(
        event_type,
        rec.seq,
        rec.ts,
        str(meta.get("t", "")),
        dict(meta.get("i", {})),
        rec.data_raw,
    )


class NotificationStore:
    def __init__(self, engine: LogEngine) -> None:
        self.engine = engine

    async def publish(
        self,
        event_type: str,
        topic: str,
        identifier: Mapping[str, str],
        payload_raw: bytes | None,
    ) -> Stored:
        """Append one notification; its seq and append time."""
        rec = _record(topic, identifier, payload_raw)
        res = await self.engine.append(topic_of(event_type), AppendRequest([rec], create=True))
        data = payload_raw if payload_raw is not None else NULL
        return Stored(event_type, res.last_seq, res.ts, topic, dict(identifier), data)

    async def publish_many(
        self, event_type: str, items: Sequence[tuple[str, Mapping[str, str], bytes | None]]
    ) -> tuple[int, int]:
        """Append validated notifications `(topic, identifier, payload_raw)` of one event
        type in one engine append (all or none, consecutive seqs, one append time): bulk
        loads such as an import or a benchmark's fill. (first seq, last seq)."""
        if not items:
            raise ValueError("publish_many needs at least one notification")
        recs = [_record(t, i, p) for t, i, p in items]
        res = await self.engine.append(topic_of(event_type), AppendRequest(recs, create=True))
        return res.first_seq, res.last_seq

    async def head(self, event_type: str) -> Head | None:
        """The event type's log head (strongly read), None when nothing was ever stored."""
        head = await self.engine.head_of(topic_of(event_type))
        return None if head is None or head.deleted else head

    async def batch(self, event_type: str, after: int, limit: int, head: Head | None) -> Batch:
        """Up to `limit` notifications with seq > `after`, in seq order."""
        if head is None or after >= head.head_seq:
            return Batch([], max(after, head.head_seq if head else 0), head.head_seq if head else 0)
        try:
            rr = await self.engine.read_range(head.topic, after, limit, READ_BYTES, None, head)
        except TopicNotFound:
            return Batch([], after, 0)
        out = [_decode(event_type, r) for r in rr.records]
        return Batch(out, max(rr.next_seq, after), rr.head.head_seq)

    async def seq_before(self, head: Head, ts_ms: int) -> int:
        """The seq just before the first notification stored at or after `ts_ms`."""
        return await self.engine.seek_time(head, ts_ms)

    async def wait(self, head: Head, timeout_s: float) -> Head | None:
        """Wait for the log to move past `head`: the new head, or None at the timeout (or
        when the log was wiped: the caller reads the head again)."""
        if timeout_s <= 0:
            return None
        moved = await self.engine.wait_change(head.topic, head, timeout_s)
        if moved is None or moved.deleted or moved.epoch != head.epoch:
            return None
        return moved

    async def wait_first(self, event_type: str, timeout_s: float) -> Head | None:
        """Wait for the first notification of an event type that has none yet."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        topic = topic_of(event_type)
        while True:
            head = await self.head(event_type)
            if head is not None and head.head_seq > 0:
                return head
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return None
            await self.engine.notifier.wait(topic, min(remaining, 0.25))

    async def wipe(self, event_type: str) -> int:
        """Delete every notification of an event type: how many there were. The log and its
        numbering stay (as a JetStream purge keeps a stream's sequence): the next notification
        continues after the last seq ever given, so a client's saved cursor stays valid."""
        try:
            result = await self.engine.delete_records(topic_of(event_type), None, None)
        except TopicNotFound:
            return 0
        return result.deleted

    async def delete(self, event_type: str, seq: int) -> bool:
        """Delete one notification by its seq: False if there is none (never stored, already
        deleted, or its event type has no log)."""
        try:
            result = await self.engine.delete_seqs(topic_of(event_type), [seq])
        except TopicNotFound:
            return False
        return result.deleted > 0

    async def event_types(self, page_size: int = 1000) -> list[str]:
        """Every event type with a log, sorted."""
        out: list[str] = []
        after: str | None = None
        while True:
            page = await self.engine.list_topics([TOPIC_PREFIX], after, page_size)
            out += [event_type_of(h.topic) for h in page.heads if not h.deleted]
            if page.next_after is None:
                return out
            after = page.next_after
