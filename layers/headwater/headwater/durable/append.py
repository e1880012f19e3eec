"""Appending to a stream, and closing it: the guard every write runs inside the engine's
group commit (closed streams, content type, Stream-Seq order, the schema/profile the entries
were shaped for), idempotent producers' duplicates and rules, and the close-only write.

Every write decision is made by the guard against the head the commit is conditional on, so
it is enforced atomically across processes, with no lock and no extra round trip beyond the
head read a guarded group makes."""

from __future__ import annotations

from dataclasses import replace

from headwater.durable.config import StreamConfigs
from headwater.durable.core import (
    HOT_ATTEMPTS,
    RETRY,
    STATE_ATTEMPTS,
    StreamsCore,
    backoff,
    check_live,
)
from headwater.durable.errors import (
    ConfMoved,
    ContentTypeMismatch,
    ProducerFenced,
    ProducerSeqGap,
    SeqConflict,
    StreamClosed,
    StreamNotFound,
)
from headwater.durable.offsets import encode_offset
from headwater.durable.state import StreamState, state_of, topic_of
from headwater.durable.values import Entry, Written, new_records
from headwater.durable.wire import Producer, media_type
from headwater.engine import (
    Admit,
    AppendRequest,
    ClaimRefused,
    Guard,
    ProducerClaim,
    Settle,
)
from headwater.engine.ports import Head
from headwater.errors import InvalidRequest, StorageUnavailable, TopicNotFound


class StreamAppends:
    def __init__(self, core: StreamsCore, configs: StreamConfigs) -> None:
        self._core = core
        self._engine = core.engine
        self._configs = configs

    def _guard(
        self,
        name: str,
        *,
        content_type: str | None,
        stream_seq: str | None,
        producer: Producer | None,
        close: bool,
        close_only: bool,
        conf: tuple[str, str] | None = None,
    ) -> Guard:
        now = self._core.clock()

        def guard(head: Head, ext: str, tail: int) -> Admit | Settle:
            state = StreamState.load(ext) if ext else None
            if state is None:
                raise StreamNotFound(name)
            check_live(name, head, state, now)
            at_tail = encode_offset(head.epoch, tail)
            # An idempotent producer's rules are its claim's (ProducerClaim: its state is an
            # item of its own, committed with the entries); a retry of an accepted write that
            # a rule below refuses is told apart by that state (StreamService._producer_dup).
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
            if conf is not None and state.conf != conf:
                raise ConfMoved(state.conf)
            # An append leaves the state as it is (its time is the head's last_write_ts):
            # only a close, a Stream-Seq or a producer's seq changes it, and only a change is
            # a write of the head with the entries (docs/durable-streams.md).
            new = state
            if close and not state.closed:
                new = replace(new, access_ms=max(now, state.access_ms), closed=True)
            if stream_seq is not None:
                new = replace(new, stream_seq=stream_seq)
            echo = (producer.epoch, producer.seq) if producer is not None else None
            text = ext if new == state else new.dump()
            return Admit(text, note=Written(head.epoch, tail, new, producer=echo))

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
        if not entries:
            guard = self._guard(
                name,
                content_type=content_type,
                stream_seq=stream_seq,
                producer=producer,
                close=close,
                close_only=True,
            )
            return await self._state_only(name, guard, producer)
        # Entries are shaped by the stream's schema registry and profile (validated, keyed,
        # normalized) for the conf this process last saw; the guard refuses them under any
        # other conf, and they are prepared again (no extra read in the common case).
        conf = self._configs.seen_conf(name)
        for _ in range(STATE_ATTEMPTS):
            shaped = await self._configs.shape(name, conf, entries, content_type)
            guard = self._guard(
                name,
                content_type=content_type,
                stream_seq=stream_seq,
                producer=producer,
                close=close,
                close_only=False,
                conf=conf,
            )
            claim = (
                ProducerClaim(producer.id, producer.epoch, producer.seq)
                if producer is not None
                else None
            )
            request = AppendRequest(
                new_records(shaped),
                create=False,
                guard=guard,
                ts_hint=ts_hint,
                claim=claim,
                backpressure=True,  # protocol: 429 with Retry-After under backpressure
            )
            try:
                res = await self._engine.append(topic_of(name), request)
            except TopicNotFound:
                raise StreamNotFound(name) from None
            except ClaimRefused as refused:
                assert producer is not None
                return await self._refused(name, producer, refused.stored)
            except (StreamClosed, SeqConflict):
                if producer is None:
                    raise
                dup = await self._producer_dup(name, producer)
                if dup is None:
                    raise
                return dup
            except ConfMoved as moved:
                conf = self._configs.note_conf(name, moved.conf)
                continue
            note: Written = res.note
            if res.deduped:
                return note
            return replace(note, tail=res.last_seq, appended=True)
        raise StorageUnavailable("the stream's schema kept changing; retry", headers=RETRY)

    async def _refused(
        self,
        name: str,
        producer: Producer,
        stored: tuple[int, int] | None,
        head: Head | None = None,
    ) -> Written:
        """The answer to a write its producer did not take: a retry of a write it accepted
        (204, nothing appended again), or the producer rule it breaks (protocol: producers)."""
        if stored is not None and producer.epoch == stored[0] and producer.seq <= stored[1]:
            return await self._written_dup(name, stored, head)
        check_producer(producer, stored)
        # The rules take it (it raced a write of its own from another process): let the
        # client send it again.
        raise StorageUnavailable("producer write raced; retry", headers=RETRY)

    async def _producer_dup(
        self, name: str, producer: Producer, head: Head | None = None
    ) -> Written | None:
        """A retry of a write the producer's state shows accepted, or None."""
        head = head or await self._engine.head_of(topic_of(name))
        if head is None or head.deleted:
            return None
        stored = await self._engine.producer_state(head, producer.id)
        if stored is not None and producer.epoch == stored[0] and producer.seq <= stored[1]:
            return await self._written_dup(name, stored, head)
        return None

    async def _written_dup(self, name: str, stored: tuple[int, int], head: Head | None) -> Written:
        head = head or await self._engine.head_of(topic_of(name))
        state = state_of(head)
        if head is None or state is None:
            raise StreamNotFound(name)
        return Written(head.epoch, head.head_seq, state, duplicate=True, producer=stored)

    async def _state_only(
        self, name: str, guard: Guard, producer: Producer | None = None
    ) -> Written:
        """A write with no entries (close-only): the same guard, then a conditional ext put
        (with an idempotent producer's claim, the two at once)."""
        topic = topic_of(name)
        claim = (
            ProducerClaim(producer.id, producer.epoch, producer.seq)
            if producer is not None
            else None
        )
        for attempt in range(HOT_ATTEMPTS):
            head = await self._engine.head_of(topic)
            if head is None or head.deleted:
                raise StreamNotFound(name)
            try:
                verdict = guard(head, head.ext, head.head_seq)
            except (StreamClosed, SeqConflict):
                if producer is None:
                    raise
                dup = await self._producer_dup(name, producer, head)
                if dup is None:
                    raise
                return dup
            if isinstance(verdict, Settle):
                return verdict.note  # type: ignore[no-any-return]
            try:
                if await self._engine.put_ext(head, verdict.ext, claim) is not None:
                    return verdict.note  # type: ignore[no-any-return]
            except ClaimRefused as refused:
                assert producer is not None
                return await self._refused(name, producer, refused.stored, head)
            await backoff(attempt)
        raise StorageUnavailable(
            "stream update kept conflicting; retry", headers={"Retry-After": "1"}
        )


def check_producer(p: Producer, known: tuple[int, int] | None) -> None:
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
