"""Durable Streams on the log engine: each stream is a topic (`~ds/<name>`) whose head carries
the stream's state (durable/state.py) in its ext attribute.

Every write decision is made by a guard inside the engine's group commit, against the head the
commit is conditional on: closed streams, Stream-Seq order and idempotent-producer epochs and
seqs are enforced atomically across processes, with no lock and no extra round trip beyond
the head read a guarded group makes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from headwater.durable.errors import (
    ContentTypeMismatch,
    ProducerFenced,
    ProducerSeqGap,
    SeqConflict,
    StreamClosed,
    StreamExists,
    StreamNotFound,
)
from headwater.durable.offsets import encode_offset
from headwater.durable.state import StreamState, name_of, state_of, topic_of
from headwater.durable.wire import Producer, media_type
from headwater.engine.log import LogEngine, wall_ms
from headwater.engine.records import RECORD_OVERHEAD_BYTES, NewRecord, json_literal
from headwater.engine.values import Admit, AppendRequest, Guard, RangeRead, Settle
from headwater.errors import InvalidRequest, StorageUnavailable, TopicNotFound
from headwater.storage.ports import Head

STATE_ATTEMPTS = 8
RETRY = {"Retry-After": "1"}


@dataclass(frozen=True, slots=True)
class Entry:
    data: bytes
    key: str | None = None


@dataclass(frozen=True, slots=True)
class StreamConfig:
    content_type: str
    ttl_ms: int = 0
    expires_ms: int = 0
    expires_text: str = ""

    def matches(self, state: StreamState) -> bool:
        return (
            media_type(self.content_type) == media_type(state.content_type)
            and self.ttl_ms == state.ttl_ms
            and self.expires_ms == state.expires_ms
        )


@dataclass(frozen=True, slots=True)
class Written:
    """What a create or append did. `tail` is the seq of the stream's last entry as the
    request left it (or found it, when nothing was written)."""

    epoch: int
    tail: int
    state: StreamState
    created: bool = False
    appended: bool = False
    duplicate: bool = False
    producer: tuple[int, int] | None = None  # (epoch, seq) to echo

    @property
    def next_offset(self) -> str:
        return encode_offset(self.epoch, self.tail)


def _records(entries: list[Entry]) -> list[NewRecord]:
    out = []
    for e in entries:
        tag = e.key
        size = len(e.data) + RECORD_OVERHEAD_BYTES + (len(tag.encode()) if tag else 0)
        out.append(NewRecord(data=None, tag=tag, size=size, data_raw=e.data))
    return out


class DurableStreams:
    def __init__(self, engine: LogEngine, clock: Callable[[], int] = wall_ms) -> None:
        self.engine = engine
        self.clock = clock

    # --- lookups ------------------------------------------------------------------------
    async def lookup(self, name: str, *, consistent: bool = True) -> tuple[Head, StreamState]:
        """The live stream, strongly read; StreamNotFound when missing or expired."""
        head = await self.engine.head_of(topic_of(name), consistent=consistent)
        state = state_of(head)
        if head is None or state is None or state.expired(head, self.clock()):
            raise StreamNotFound(name)
        return head, state

    async def touch(self, head: Head, state: StreamState) -> None:
        """A read renews a TTL stream's idle window (HEAD does not: protocol §3.2)."""
        if not state.ttl_ms:
            return
        now = self.clock()
        if now - state.last_access(head) >= min(1000, state.ttl_ms // 4):
            await self.engine.touch_read(head, now)

    async def list_streams(
        self, after: str | None, limit: int
    ) -> tuple[list[tuple[Head, StreamState]], str | None]:
        now = self.clock()
        page = await self.engine.list_topics(
            [topic_of("")], topic_of(after) if after is not None else None, limit
        )
        out = []
        for head in page.heads:
            state = state_of(head)
            if state is not None and not state.expired(head, now):
                out.append((head, state))
        return out, name_of(page.next_after) if page.next_after else None

    # --- create -------------------------------------------------------------------------
    async def create(
        self,
        name: str,
        cfg: StreamConfig,
        entries: list[Entry],
        *,
        close: bool = False,
        ts_hint: int | None = None,
    ) -> Written:
        topic = topic_of(name)
        for _ in range(STATE_ATTEMPTS):
            head = await self.engine.head_of(topic)
            state = state_of(head)
            now = self.clock()
            if head is not None and state is not None:
                if state.expired(head, now):
                    await self.engine.delete_topic(topic, if_empty=False)
                    continue
                if not cfg.matches(state):
                    raise StreamExists(
                        f"stream {name!r} exists with a different configuration",
                        headers={"Stream-Next-Offset": encode_offset(head.epoch, head.head_seq)},
                    )
                return Written(head.epoch, head.head_seq, state)
            fresh = StreamState(
                content_type=cfg.content_type,
                created_ms=now,
                ttl_ms=cfg.ttl_ms,
                expires_ms=cfg.expires_ms,
                expires_text=cfg.expires_text,
                access_ms=now,
                closed=close,
            )
            if not entries:
                replacing = head if head is not None and head.deleted else None
                made = await self.engine.create_with_ext(topic, fresh.dump(), replacing)
                if made is not None:
                    return Written(made.epoch, 0, fresh, created=True)
                continue

            def guard(
                base: Head, ext: str, tail: int, fresh: StreamState = fresh
            ) -> Admit | Settle:
                if ext:
                    return Settle()  # created meanwhile: compare configurations above
                return Admit(fresh.dump(), note=base.epoch)

            res = await self.engine.append(
                topic,
                AppendRequest(_records(entries), create=True, guard=guard, ts_hint=ts_hint),
            )
            if res.deduped:
                continue
            return Written(int(res.note), res.last_seq, fresh, created=True, appended=True)
        raise StorageUnavailable(
            "stream create kept conflicting; retry", headers={"Retry-After": "1"}
        )

    # --- append / close -----------------------------------------------------------------
    def _guard(
        self,
        name: str,
        *,
        content_type: str | None,
        stream_seq: str | None,
        producer: Producer | None,
        close: bool,
        close_only: bool,
    ) -> Guard:
        now = self.clock()

        def guard(head: Head, ext: str, tail: int) -> Admit | Settle:
            state = StreamState.load(ext) if ext else None
            if state is None or state.expired(head, now):
                raise StreamNotFound(name)
            at_tail = encode_offset(head.epoch, tail)
            known = state.producers.get(producer.id) if producer is not None else None
            if (
                producer is not None
                and known is not None
                and producer.epoch == known[0]
                and producer.seq <= known[1]
            ):
                # A retry of an accepted write: nothing is appended again (checked before
                # closure and Stream-Seq, so a retried append-and-close still succeeds).
                return Settle(Written(head.epoch, tail, state, duplicate=True, producer=known))
            closed_headers = {"Stream-Closed": "true", "Stream-Next-Offset": at_tail}
            if state.closed and close_only and producer is None:
                return Settle(Written(head.epoch, tail, state))  # closing again: idempotent
            if state.closed:
                raise StreamClosed(f"stream {name!r} is closed", headers=closed_headers)
            if content_type is not None and media_type(content_type) != media_type(
                state.content_type
            ):
                raise ContentTypeMismatch(
                    f"content type {media_type(content_type)!r} does not match the stream's"
                    f" {state.content_type!r}"
                )
            if producer is not None:
                _check_producer(producer, known)
            if (
                stream_seq is not None
                and state.stream_seq is not None
                and stream_seq <= state.stream_seq
            ):
                raise SeqConflict(
                    f"Stream-Seq {stream_seq!r} is not greater than the last one"
                    f" ({state.stream_seq!r})",
                    headers={"Stream-Next-Offset": at_tail},
                )
            new = replace(state, access_ms=max(now, state.access_ms), closed=close or state.closed)
            if stream_seq is not None:
                new = replace(new, stream_seq=stream_seq)
            echo = None
            if producer is not None:
                new = new.with_producer(producer.id, producer.epoch, producer.seq)
                echo = (producer.epoch, producer.seq)
            return Admit(new.dump(), note=Written(head.epoch, tail, new, producer=echo))

        return guard

    async def append(
        self,
        name: str,
        entries: list[Entry],
        *,
        content_type: str | None,
        stream_seq: str | None = None,
        producer: Producer | None = None,
        close: bool = False,
        ts_hint: int | None = None,
    ) -> Written:
        guard = self._guard(
            name,
            content_type=content_type,
            stream_seq=stream_seq,
            producer=producer,
            close=close,
            close_only=not entries,
        )
        if not entries:
            return await self._state_only(name, guard)
        try:
            res = await self.engine.append(
                topic_of(name),
                AppendRequest(_records(entries), create=False, guard=guard, ts_hint=ts_hint),
            )
        except TopicNotFound:
            raise StreamNotFound(name) from None
        note: Written = res.note
        if res.deduped:
            return note
        return replace(note, tail=res.last_seq, appended=True)

    async def _state_only(self, name: str, guard: Guard) -> Written:
        """A write with no entries (close-only): the same guard, then a conditional ext put."""
        topic = topic_of(name)
        for _ in range(STATE_ATTEMPTS):
            head = await self.engine.head_of(topic)
            if head is None or head.deleted:
                raise StreamNotFound(name)
            verdict = guard(head, head.ext, head.head_seq)
            if isinstance(verdict, Settle):
                return verdict.note  # type: ignore[no-any-return]
            if await self.engine.put_ext(head, verdict.ext) is not None:
                return verdict.note  # type: ignore[no-any-return]
        raise StorageUnavailable(
            "stream update kept conflicting; retry", headers={"Retry-After": "1"}
        )

    # --- delete -------------------------------------------------------------------------
    async def delete(self, name: str) -> None:
        topic = topic_of(name)
        head = await self.engine.head_of(topic)
        state = state_of(head)
        if head is None or state is None:
            raise StreamNotFound(name)
        deleted = await self.engine.delete_topic(topic, if_empty=False)
        if deleted is None or state.expired(head, self.clock()):
            raise StreamNotFound(name)  # an expired stream is gone already; this reclaims it

    # --- read ---------------------------------------------------------------------------
    async def read(
        self, head: Head, after: int, limit: int, max_bytes: int, key: str | None = None
    ) -> RangeRead:
        tag = json_literal(key) if key is not None else None
        try:
            return await self.engine.read_range(head.topic, after, limit, max_bytes, tag, head)
        except TopicNotFound:
            raise StreamNotFound(name_of(head.topic)) from None

    async def wait(self, head: Head, timeout_s: float) -> tuple[Head, StreamState] | None:
        """Wait for the stream to move past `head` (an append, closure): the stream as it
        is then, None at the timeout; StreamNotFound if it was deleted or expired."""
        if timeout_s <= 0:
            return None
        moved = await self.engine.wait_change(head.topic, head, timeout_s)
        if moved is None:
            return None
        state = state_of(moved)
        if state is None or moved.epoch != head.epoch or state.expired(moved, self.clock()):
            raise StreamNotFound(name_of(head.topic))
        return moved, state


def _check_producer(p: Producer, known: tuple[int, int] | None) -> None:
    """Idempotent-producer rules for a write that is not a duplicate (protocol: producers)."""
    if known is None:
        if p.seq != 0:
            raise ProducerSeqGap(
                f"producer {p.id!r} is new: its first Producer-Seq must be 0",
                headers={"Producer-Expected-Seq": "0", "Producer-Received-Seq": str(p.seq)},
            )
        return
    epoch, seq = known
    if p.epoch < epoch:
        raise ProducerFenced(
            f"producer epoch {p.epoch} is stale (current {epoch})",
            headers={"Producer-Epoch": str(epoch)},
        )
    if p.epoch > epoch:
        if p.seq != 0:
            raise InvalidRequest(f"a new producer epoch must start at Producer-Seq 0, not {p.seq}")
        return
    if p.seq > seq + 1:
        raise ProducerSeqGap(
            f"Producer-Seq {p.seq} skips ahead (expected {seq + 1})",
            headers={"Producer-Expected-Seq": str(seq + 1), "Producer-Received-Seq": str(p.seq)},
        )


def descriptor(head: Head, state: StreamState) -> dict[str, Any]:
    """One entry of GET /v1/streams."""
    return {
        "name": name_of(head.topic),
        "content_type": state.content_type,
        "profile": (state.profile or {"kind": "generic"}).get("kind", "generic"),
        "created_at": state.created_ms,
        "ttl_seconds": state.ttl_ms // 1000 if state.ttl_ms else None,
        "expires_at": state.expires_text or None,
        "closed": state.closed,
        "epoch": head.epoch,
        "next_offset": encode_offset(head.epoch, head.head_seq),
    }
