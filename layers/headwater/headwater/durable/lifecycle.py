"""A stream's life: list, create (with its first entries, atomically), fork (a reference
on the source, so its entries outlive the source's delete), and delete (soft while forks
read from it; the last fork's delete reclaims it, and so on up the chain)."""

from __future__ import annotations

import logging
from dataclasses import replace

from headwater.durable.core import (
    FORK_ATTEMPTS,
    HOT_ATTEMPTS,
    RETRY,
    STATE_ATTEMPTS,
    StreamsCore,
    backoff,
)
from headwater.durable.errors import (
    ContentTypeMismatch,
    ForkSourceGone,
    StreamExists,
    StreamGone,
    StreamHeld,
    StreamNotFound,
)
from headwater.durable.offsets import START, Offset, StartOfStream, encode_offset
from headwater.durable.reads import StreamReads
from headwater.durable.state import Fork, StreamState, name_of, state_of, topic_of
from headwater.durable.values import Entry, ForkRequest, StreamConfig, Written, key_of, new_records
from headwater.durable.wire import is_json_type, media_type
from headwater.engine import Admit, AppendRequest, Settle
from headwater.engine.ports import Head
from headwater.errors import InvalidRequest, StorageUnavailable

log = logging.getLogger(__name__)


class StreamLifecycle:
    def __init__(self, core: StreamsCore, reads: StreamReads) -> None:
        self._core = core
        self._engine = core.engine
        self._reads = reads

    async def list_streams(
        self, after: str | None, limit: int, prefixes: list[str] | None = None
    ) -> tuple[list[tuple[Head, StreamState]], str | None]:
        """Live streams named after `after`, up to `limit`; only names starting with one of
        `prefixes` (non-overlapping) when given: an empty list lists nothing."""
        if prefixes is not None and not prefixes:
            return [], None
        now = self._core.clock()
        page = await self._engine.list_topics(
            [topic_of(p) for p in (prefixes if prefixes is not None else [""])],
            topic_of(after) if after is not None else None,
            limit,
        )
        out = []
        for head in page.heads:
            state = state_of(head)
            if state is not None and not state.gone and not state.expired(head, now):
                out.append((head, state))
        return out, name_of(page.next_after) if page.next_after else None

    async def create(
        self,
        name: str,
        cfg: StreamConfig,
        entries: list[Entry],
        *,
        close: bool = False,
        ts_hint: int | None = None,
        fork: ForkRequest | None = None,
    ) -> Written:
        topic = topic_of(name)
        for _ in range(STATE_ATTEMPTS):
            head = await self._engine.head_of(topic)
            state = state_of(head)
            now = self._core.clock()
            if head is not None and state is not None:
                if state.held(head, now):
                    raise StreamHeld(
                        f"stream {name!r} was deleted but forks still read from it; the name"
                        " is free once they are deleted"
                    )
                if state.expired(head, now):
                    await self._drop(head, state)
                    continue
                if not _same_config(state, cfg, fork):
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
            made = (
                await self._create_fork(topic, head, fresh, fork, entries, ts_hint)
                if fork is not None
                else await self._create_topic(topic, head, fresh, entries, ts_hint)
            )
            if made is not None:
                return made
        raise StorageUnavailable(
            "stream create kept conflicting; retry", headers={"Retry-After": "1"}
        )

    async def _create_topic(
        self,
        topic: str,
        head: Head | None,
        fresh: StreamState,
        entries: list[Entry],
        ts_hint: int | None,
        base_seq: int = 0,
    ) -> Written | None:
        """Create the stream's topic (its log starting after `base_seq`) with its first
        entries, atomically; None if another request created it first."""
        if not entries:
            replacing = head if head is not None and head.deleted else None
            made = await self._engine.create_with_ext(topic, fresh.dump(), replacing, base_seq)
            return None if made is None else Written(made.epoch, base_seq, fresh, created=True)

        def guard(base: Head, ext: str, tail: int) -> Admit | Settle:
            if ext:
                return Settle()  # created meanwhile: the caller compares configurations
            return Admit(fresh.dump(), note=base.epoch)

        req = AppendRequest(
            new_records(entries), create=True, guard=guard, ts_hint=ts_hint, base_seq=base_seq
        )
        res = await self._engine.append(topic, req)
        if res.deduped:
            return None
        return Written(int(res.note), res.last_seq, fresh, created=True, appended=True)

    async def _create_fork(
        self,
        topic: str,
        head: Head | None,
        fresh: StreamState,
        req: ForkRequest,
        entries: list[Entry],
        ts_hint: int | None,
    ) -> Written | None:
        """A fork: takes a reference on its source (so the source's entries outlive its
        delete), then creates its own topic whose log continues the source's offsets."""
        src_topic = topic_of(req.src)
        for attempt in range(FORK_ATTEMPTS):
            src = await self._engine.head_of(src_topic)
            src_state = state_of(src)
            now = self._core.clock()
            if src is None or src_state is None:
                raise StreamNotFound(req.src)
            if src_state.held(src, now):
                raise ForkSourceGone(f"stream {req.src!r} was deleted; it cannot be forked")
            if src_state.expired(src, now):
                raise StreamNotFound(req.src)
            if req.content_type_given and media_type(fresh.content_type) != media_type(
                src_state.content_type
            ):
                raise ContentTypeMismatch(
                    f"a fork keeps its source's content type ({src_state.content_type!r})"
                )
            off = _fork_point(req, src, src_state)
            at, prefix = await self._sub_offset(req, src, src_state, off)
            lineage: tuple[tuple[int, int], ...] = ((src.epoch, at),)
            if src_state.fork is not None:
                lineage += tuple((e, min(last, at)) for e, last in src_state.fork.lineage)
            fork = Fork(req.src, src.epoch, at, off, req.sub, lineage)
            state = replace(fresh, content_type=src_state.content_type, fork=fork)
            if not req.expiry_given:
                state = replace(
                    state,
                    ttl_ms=src_state.ttl_ms,
                    expires_ms=src_state.expires_ms,
                    expires_text=src_state.expires_text,
                )
            taken = replace(src_state, refs=src_state.refs + 1)
            if await self._engine.put_ext(src, taken.dump()) is None:
                # The source moved (an append): judge again, backing off so a fork is not
                # starved by a busy source.
                await backoff(attempt)
                continue
            made: Written | None = None
            try:
                made = await self._create_topic(
                    topic,
                    head,
                    state,
                    prefix + entries,
                    ts_hint,
                    base_seq=at,
                )
            finally:
                if made is None:
                    await self._release(fork)
            return made
        raise StorageUnavailable("fork kept conflicting with its source; retry", headers=RETRY)

    async def _sub_offset(
        self, req: ForkRequest, src: Head, src_state: StreamState, off: int
    ) -> tuple[int, list[Entry]]:
        """(fork point, entries the fork starts with) for Stream-Fork-Sub-Offset: the first
        `sub` bytes of the entry after the fork offset (byte streams: written as the fork's
        first entry), or its first `sub` messages (JSON: each message is an entry here)."""
        if not req.sub:
            return off, []
        if req.offset is None:
            raise InvalidRequest("Stream-Fork-Sub-Offset needs Stream-Fork-Offset")
        if off >= src.head_seq:
            raise InvalidRequest("Stream-Fork-Sub-Offset: no entry starts at Stream-Fork-Offset")
        if is_json_type(src_state.content_type):
            if req.sub > src.head_seq - off:
                raise InvalidRequest(
                    f"Stream-Fork-Sub-Offset {req.sub} is past the end of the source stream"
                )
            rr = await self._reads.read(src, off, req.sub, 1 << 40)
            if len(rr.records) < req.sub:
                raise InvalidRequest(
                    f"Stream-Fork-Sub-Offset {req.sub} is past the {len(rr.records)} messages"
                    " after Stream-Fork-Offset"
                )
            return off + req.sub, []
        rr = await self._reads.read(src, off, 1, 1)
        rec = rr.records[0]
        if req.sub > len(rec.data_raw):
            raise InvalidRequest(
                f"Stream-Fork-Sub-Offset {req.sub} is past the end of the entry"
                f" ({len(rec.data_raw)} bytes)"
            )
        return off, [Entry(rec.data_raw[: req.sub], key_of(rec))]

    async def delete(self, name: str) -> None:
        """Delete a stream. One that forks still read from is soft-deleted: it answers 410
        (and its name stays taken) until its last fork is deleted, which deletes it."""
        topic = topic_of(name)
        for attempt in range(HOT_ATTEMPTS):
            head = await self._engine.head_of(topic)
            state = state_of(head)
            if head is None or state is None:
                raise StreamNotFound(name)
            if state.gone:
                raise StreamGone(name)
            expired = state.expired(head, self._core.clock())
            if state.refs:
                if await self._engine.put_ext(head, replace(state, gone=True).dump()) is None:
                    await backoff(attempt)
                    continue
                if expired:
                    raise StreamGone(name)
                return
            if not await self._drop(head, state):
                await backoff(attempt)
                continue
            if expired:
                raise StreamNotFound(name)  # an expired stream is gone already; this reclaims it
            return
        raise StorageUnavailable("stream delete kept conflicting; retry", headers=RETRY)

    async def _drop(self, head: Head, state: StreamState) -> bool:
        """Delete an unreferenced stream's topic iff its state is still `head`'s (False:
        it moved, decide again), then give back its reference on its fork source."""
        if await self._engine.delete_topic(head.topic, if_empty=False, if_ext=head.ext) is None:
            return False
        if state.fork is not None:
            await self._release(state.fork)
        return True

    async def _release(self, fork: Fork) -> None:
        """Give back a fork's reference on its source; a deleted (or expired) source whose
        last reference this was is deleted now, and so on up the chain."""
        topic = topic_of(fork.src)
        for attempt in range(HOT_ATTEMPTS * 2):
            head = await self._engine.head_of(topic)
            state = state_of(head)
            if head is None or state is None or head.epoch != fork.src_epoch:
                return  # nothing holds a reference for it any more
            left = replace(state, refs=max(0, state.refs - 1))
            if not left.refs and (state.gone or state.expired(head, self._core.clock())):
                if await self._drop(head, left):
                    return
            elif await self._engine.put_ext(head, left.dump()) is not None:
                return
            await backoff(min(attempt, 5))
        # The source keeps one reference too many: it is never reclaimed (410 until then).
        log.warning("fork reference on %r not released: it kept conflicting", fork.src)


def _same_config(state: StreamState, cfg: StreamConfig, fork: ForkRequest | None) -> bool:
    """Whether a PUT repeats the existing stream's creation (200) rather than conflicting."""
    if fork is None:
        return cfg.matches(state)
    f = state.fork
    if f is None or f.src != fork.src or f.sub != fork.sub:
        return False
    if fork.offset is not None and _offset_seq(fork.offset) != f.off:
        return False
    if fork.content_type_given and media_type(cfg.content_type) != media_type(state.content_type):
        return False
    return not fork.expiry_given or (cfg.ttl_ms, cfg.expires_ms) == (
        state.ttl_ms,
        state.expires_ms,
    )


def _offset_seq(off: Offset | StartOfStream) -> int:
    return 0 if off is START or not isinstance(off, Offset) else off.seq


def _fork_point(req: ForkRequest, src: Head, state: StreamState) -> int:
    """The source seq a fork starts after: its tail by default, else Stream-Fork-Offset,
    which must be one of the source's own offsets (or an offset its lineage shares)."""
    off = req.offset
    if off is None:
        return src.head_seq
    if off is START or not isinstance(off, Offset) or (off.epoch, off.seq) == (0, 0):
        return 0
    ours = off.epoch == src.epoch and off.seq <= src.head_seq
    inherited = state.fork is not None and state.fork.inherits(off.epoch, off.seq)
    if off.in_block or not (ours or inherited):
        raise InvalidRequest(
            "Stream-Fork-Offset is not an offset of the source stream, or is past its end"
        )
    return off.seq
