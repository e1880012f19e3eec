"""Durable Streams on the log engine: each stream is a topic (`~ds/<name>`) whose head carries
the stream's state (durable/state.py) in its ext attribute.

Every write decision is made by a guard inside the engine's group commit, against the head the
commit is conditional on: closed streams, Stream-Seq order and idempotent-producer epochs and
seqs are enforced atomically across processes, with no lock and no extra round trip beyond
the head read a guarded group makes."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, Protocol

from headwater import jsoncodec
from headwater.durable import profiles, schema
from headwater.durable.errors import (
    ConfMoved,
    ContentTypeMismatch,
    ForkSourceGone,
    InvalidSchema,
    ProducerFenced,
    ProducerSeqGap,
    PromotionFailed,
    SchemaVersionConflict,
    SeqConflict,
    StreamClosed,
    StreamExists,
    StreamGone,
    StreamHeld,
    StreamNotFound,
)
from headwater.durable.filter import Predicate
from headwater.durable.offsets import (
    START,
    Offset,
    StartOfStream,
    boundary_seq,
    encode_offset,
)
from headwater.durable.state import Fork, StreamState, name_of, state_of, topic_of
from headwater.durable.wire import Producer, is_json_type, media_type
from headwater.engine.log import LogEngine, wall_ms
from headwater.engine.ports import REGISTRY_PREFIX, Head, SegmentItem
from headwater.engine.records import RECORD_OVERHEAD_BYTES, NewRecord, StoredRecord, json_literal
from headwater.engine.values import (
    Admit,
    AppendRequest,
    ClaimRefused,
    Guard,
    ProducerClaim,
    RangeRead,
    Settle,
)
from headwater.errors import InvalidRequest, StorageUnavailable, TopicNotFound
from headwater.names import object_key_component

STATE_ATTEMPTS = 8
# A state change on the head (a fork's reference, a delete, a close, a schema) is
# conditional on the tail it read, so it races every append to the stream: these loops
# try more often and back off (jittered, capped) so a busy writer cannot starve them.
HOT_ATTEMPTS = 32
FORK_ATTEMPTS = HOT_ATTEMPTS


async def _backoff(attempt: int) -> None:
    """Sleep a jittered, capped interval before trying a raced state change again."""
    await asyncio.sleep(random.uniform(0, min(0.05, 0.002 * 2**attempt)))


REGISTRY_CACHE = 256  # schema registry revisions kept per process
CONF_CACHE = 100_000  # streams whose last-seen schema/profile a process remembers
FILTER_SCAN_CAP = 100 * 1024 * 1024  # payload bytes one filtered read examines (§8.5)
PAGE_SCAN_RECORDS = 2_000
PAGE_SCAN_BYTES = 4 << 20
RETRY = {"Retry-After": "1"}
MAX_KEY_BYTES = 256  # a routing key derived from an entry, as http.v1 caps Stream-Key
log = logging.getLogger(__name__)


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
class ForkRequest:
    """PUT with Stream-Forked-From: the source, the fork point (None: the source's tail), the
    sub-offset, and which settings the request gave (the rest are inherited)."""

    src: str
    offset: Offset | StartOfStream | None = None
    sub: int = 0
    content_type_given: bool = False
    expiry_given: bool = False


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


def _check_derived_key(key: str) -> None:
    """A routing key taken from an entry is held to a Stream-Key header's rules: it is
    stored as the record's tag (a DynamoDB key), so a lone surrogate or an oversized key
    would only fail in storage."""
    if not jsoncodec.is_scalar_text(key):
        raise InvalidRequest("the entry's routing key is not valid Unicode text (lone surrogate)")
    if len(key.encode()) > MAX_KEY_BYTES:
        raise InvalidRequest(f"the entry's routing key is over {MAX_KEY_BYTES} bytes")


def _records(entries: list[Entry]) -> list[NewRecord]:
    """The engine records of `entries`. Each is charged its message bytes plus the engine's
    fixed per-record framing, not its routing key (at most MAX_KEY_BYTES, and when derived a
    copy of a field already in the message): so a stream's live bytes less the framing of
    its live records are exactly its messages' bytes (payload_bytes)."""
    return [
        NewRecord(data=None, tag=e.key, size=len(e.data) + RECORD_OVERHEAD_BYTES, data_raw=e.data)
        for e in entries
    ]


def payload_bytes(head: Head) -> int:
    """The logical payload bytes of the stream's own live records (§7B total_size_bytes):
    the sum of the messages' bytes as stored and read back, from the head's counters alone
    (every record is charged its bytes plus RECORD_OVERHEAD_BYTES: _records). Seqs reserved
    by an append that never committed count until a seal passes them, as in `count`."""
    return max(0, head.bytes - RECORD_OVERHEAD_BYTES * head.count)


SEGMENT_LISTS: Final = 4096  # streams whose segment lists a process keeps


class SegmentPruner(Protocol):
    """What a stream's index families say of one of its sealed segments: the seqs in it that
    may be selected (a superset), or None when no usable companion answers it."""

    async def __call__(self, seg: SegmentItem) -> frozenset[int] | None: ...


class DurableStreams:
    def __init__(self, engine: LogEngine, clock: Callable[[], int] = wall_ms) -> None:
        self.engine = engine
        self.clock = clock
        self._registries: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._conf: dict[str, tuple[str, str]] = {}  # per stream, as this process last saw
        # per log: ((del_ver, earliest_seq) it was read under, its segments oldest first)
        self._segments: dict[str, tuple[tuple[int, int], list[SegmentItem]]] = {}

    # --- lookups ------------------------------------------------------------------------
    async def lookup(self, name: str, *, consistent: bool = True) -> tuple[Head, StreamState]:
        """The live stream, strongly read; StreamNotFound when missing or expired."""
        head = await self.engine.head_of(topic_of(name), consistent=consistent)
        state = state_of(head)
        if head is None or state is None:
            raise StreamNotFound(name)
        _check_live(name, head, state, self.clock())
        return head, state

    async def touch(self, head: Head, state: StreamState) -> None:
        """A read renews a TTL stream's idle window (HEAD does not: protocol §3.2)."""
        if not state.ttl_ms:
            return
        now = self.clock()
        if now - state.last_access(head) >= min(1000, state.ttl_ms // 4):
            await self.engine.touch_read(head, now)

    async def list_streams(
        self, after: str | None, limit: int, prefixes: list[str] | None = None
    ) -> tuple[list[tuple[Head, StreamState]], str | None]:
        """Live streams named after `after`, up to `limit`; only names starting with one of
        `prefixes` (non-overlapping) when given: an empty list lists nothing."""
        if prefixes is not None and not prefixes:
            return [], None
        now = self.clock()
        page = await self.engine.list_topics(
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

    # --- create -------------------------------------------------------------------------
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
            head = await self.engine.head_of(topic)
            state = state_of(head)
            now = self.clock()
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
            made = await self.engine.create_with_ext(topic, fresh.dump(), replacing, base_seq)
            return None if made is None else Written(made.epoch, base_seq, fresh, created=True)

        def guard(base: Head, ext: str, tail: int) -> Admit | Settle:
            if ext:
                return Settle()  # created meanwhile: the caller compares configurations
            return Admit(fresh.dump(), note=base.epoch)

        req = AppendRequest(
            _records(entries), create=True, guard=guard, ts_hint=ts_hint, base_seq=base_seq
        )
        res = await self.engine.append(topic, req)
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
            src = await self.engine.head_of(src_topic)
            src_state = state_of(src)
            now = self.clock()
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
            if await self.engine.put_ext(src, taken.dump()) is None:
                # The source moved (an append): judge again, backing off so a fork is not
                # starved by a busy source.
                await _backoff(attempt)
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
            rr = await self.read(src, off, req.sub, 1 << 40)
            if len(rr.records) < req.sub:
                raise InvalidRequest(
                    f"Stream-Fork-Sub-Offset {req.sub} is past the {len(rr.records)} messages"
                    " after Stream-Fork-Offset"
                )
            return off + req.sub, []
        rr = await self.read(src, off, 1, 1)
        rec = rr.records[0]
        if req.sub > len(rec.data_raw):
            raise InvalidRequest(
                f"Stream-Fork-Sub-Offset {req.sub} is past the end of the entry"
                f" ({len(rec.data_raw)} bytes)"
            )
        return off, [Entry(rec.data_raw[: req.sub], _key_of(rec))]

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
        conf: tuple[str, str] | None = None,
    ) -> Guard:
        now = self.clock()

        def guard(head: Head, ext: str, tail: int) -> Admit | Settle:
            state = StreamState.load(ext) if ext else None
            if state is None:
                raise StreamNotFound(name)
            _check_live(name, head, state, now)
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
        conf = self._conf.get(name, ("", ""))
        for _ in range(STATE_ATTEMPTS):
            shaped = await self._shape(name, conf, entries, content_type)
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
                _records(shaped),
                create=False,
                guard=guard,
                ts_hint=ts_hint,
                claim=claim,
                backpressure=True,  # protocol: 429 with Retry-After under backpressure
            )
            try:
                res = await self.engine.append(topic_of(name), request)
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
                if len(self._conf) >= CONF_CACHE:
                    self._conf.clear()
                conf = self._conf[name] = moved.conf
                continue
            note: Written = res.note
            if res.deduped:
                return note
            return replace(note, tail=res.last_seq, appended=True)
        raise StorageUnavailable("the stream's schema kept changing; retry", headers=RETRY)

    async def _shape(
        self, name: str, conf: tuple[str, str], entries: list[Entry], content_type: str | None
    ) -> list[Entry]:
        registry_key, profile_text = conf
        if not registry_key and not profile_text:
            return entries
        if content_type is None or not is_json_type(content_type):
            return entries  # the guard refuses the content type
        reg = await self.registry(name, registry_key)
        profile = json.loads(profile_text) if profile_text else None
        keyed_by_schema = bool(reg.get("routingKey"))
        out = []
        for e in entries:
            value = jsoncodec.loads(e.data)
            data = e.data
            try:
                if profile is not None:
                    value = profiles.normalize(profile, value)
                    data = jsoncodec.dumps(value)
                schema.validate(reg, value)
                key = e.key
                if keyed_by_schema:
                    if e.key is not None:
                        raise InvalidRequest(
                            "Stream-Key is not allowed: this stream's schema derives routing keys"
                        )
                    key = schema.routing_key(reg, value)
                elif profile is not None and key is None:
                    key = profiles.derived_routing_key(profile, value)
            except (schema.SchemaError, profiles.ProfileError) as exc:
                raise InvalidSchema(str(exc)) from None
            if key and key is not e.key:
                _check_derived_key(key)
            out.append(Entry(data, key))
        return out

    # --- schema registry ----------------------------------------------------------------
    async def registry(self, name: str, key: str) -> dict[str, Any]:
        """The stream's schema registry revision `key` ("" : none yet), cached (immutable)."""
        if not key:
            return schema.empty_registry(name)
        reg = self._registries.get(key)
        if reg is None:
            reg = json.loads(await self.engine.get_blob(key))
            self._registries[key] = reg
            while len(self._registries) > REGISTRY_CACHE:
                self._registries.popitem(last=False)
        else:
            self._registries.move_to_end(key)
        return reg

    async def update_schema(self, name: str, body: object) -> dict[str, Any]:
        """POST /_schema: the update applied to the registry as the stream is now, stored
        as a new revision, and made current by a conditional head write (so the boundary
        it records is the tail no append can have moved meanwhile)."""
        for attempt in range(HOT_ATTEMPTS):
            head, state = await self.lookup(name)
            if not is_json_type(state.content_type):
                raise InvalidSchema("schemas apply to application/json streams only")
            reg = await self.registry(name, state.registry_key)
            try:
                new = schema.apply_update(
                    reg,
                    body,
                    stream_is_empty=head.head_seq == 0,
                    end_offset=encode_offset(head.epoch, head.head_seq),
                )
            except schema.SchemaVersionConflict as exc:
                raise SchemaVersionConflict(str(exc)) from None
            except schema.SchemaError as exc:
                raise InvalidSchema(str(exc)) from None
            if await self._commit_conf(name, head, state, new):
                return new
            await _backoff(attempt)
        raise StorageUnavailable("schema update kept conflicting; retry", headers=RETRY)

    async def update_profile(self, name: str, body: object) -> dict[str, Any]:
        """POST /_profile: store the profile; evlog and metrics also install their canonical
        schema registry (replacing the registry, reference behaviour), in the same
        conditional head write."""
        for attempt in range(HOT_ATTEMPTS):
            head, state = await self.lookup(name)
            try:
                profile = profiles.parse_profile_update(body, state.content_type)
                current = (state.profile or profiles.DEFAULT_PROFILE).get("kind", "generic")
                replace_registry = profiles.check_install(
                    profile, current_kind=str(current), stream_is_empty=head.head_seq == 0
                )
                install = profiles.install(profile, name) if replace_registry else None
                reg = (
                    schema.apply_update(
                        schema.empty_registry(name),
                        install,
                        stream_is_empty=True,
                        end_offset=encode_offset(head.epoch, head.head_seq),
                    )
                    if install is not None
                    else None
                )
            except (profiles.ProfileError, schema.SchemaError) as exc:
                raise InvalidRequest(str(exc)) from None
            if await self._commit_conf(name, head, replace(state, profile=profile), reg):
                return profiles.resource(profile)
            await _backoff(attempt)
        raise StorageUnavailable("profile update kept conflicting; retry", headers=RETRY)

    async def _commit_conf(
        self, name: str, head: Head, state: StreamState, reg: dict[str, Any] | None
    ) -> bool:
        """Make `state` (with registry `reg` as a new revision, if given) the stream's, iff
        its head is still `head` (False: it moved; decide again)."""
        key = ""
        if reg is not None:
            key = (
                f"{REGISTRY_PREFIX}{object_key_component(head.topic)}/{head.epoch}/"
                f"{reg['currentVersion']}-{uuid.uuid4().hex}.json"
            )
            await self.engine.put_blob(key, json.dumps(reg, separators=(",", ":")).encode())
            state = replace(state, registry_key=key, schema_version=reg["currentVersion"])
        if await self.engine.put_ext(head, state.dump()) is None:
            if key:
                await self.engine.delete_blobs([key])  # lost a race: nothing refers to it
            return False
        if reg is not None:
            self._registries[key] = reg
        self._conf[name] = state.conf
        return True

    async def commit_conf_blob(
        self, name: str, head: Head, state: StreamState, key: str, body: bytes
    ) -> bool:
        """`_commit_conf` for an immutable object that `state` (its profile) refers to by `key`:
        the state-protocol touch templates (durable/touch.py). The object is written first; a
        lost race deletes it again (nothing refers to it)."""
        await self.engine.put_blob(key, body)
        if await self._commit_conf(name, head, state, None):
            return True
        await self.engine.delete_blobs([key])
        return False

    def promoter(self, reg: dict[str, Any]) -> Callable[[StoredRecord], bytes] | None:
        """How a read brings stored entries to the current schema version (None: nothing
        to promote). Entries after a boundary are of its version; version 1 is the first."""
        current = int(reg.get("currentVersion", 0))
        if current < 2:
            return None

        def promote(rec: StoredRecord) -> bytes:
            version = schema.version_at(reg, rec.seq, key=boundary_seq)
            if version in (0, current):
                return rec.data_raw
            try:
                return jsoncodec.dumps(schema.promote(reg, jsoncodec.loads(rec.data_raw), version))
            except schema.LensApplyError as exc:
                raise PromotionFailed(
                    f"entry {rec.seq} (schema version {version}) cannot be read as version"
                    f" {current}: {exc}"
                ) from None

        return promote

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
        _check_producer(producer, stored)
        # The rules take it (it raced a write of its own from another process): let the
        # client send it again.
        raise StorageUnavailable("producer write raced; retry", headers=RETRY)

    async def _producer_dup(
        self, name: str, producer: Producer, head: Head | None = None
    ) -> Written | None:
        """A retry of a write the producer's state shows accepted, or None."""
        head = head or await self.engine.head_of(topic_of(name))
        if head is None or head.deleted:
            return None
        stored = await self.engine.producer_state(head, producer.id)
        if stored is not None and producer.epoch == stored[0] and producer.seq <= stored[1]:
            return await self._written_dup(name, stored, head)
        return None

    async def _written_dup(self, name: str, stored: tuple[int, int], head: Head | None) -> Written:
        head = head or await self.engine.head_of(topic_of(name))
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
            head = await self.engine.head_of(topic)
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
                if await self.engine.put_ext(head, verdict.ext, claim) is not None:
                    return verdict.note  # type: ignore[no-any-return]
            except ClaimRefused as refused:
                assert producer is not None
                return await self._refused(name, producer, refused.stored, head)
            await _backoff(attempt)
        raise StorageUnavailable(
            "stream update kept conflicting; retry", headers={"Retry-After": "1"}
        )

    # --- delete -------------------------------------------------------------------------
    async def delete(self, name: str) -> None:
        """Delete a stream. One that forks still read from is soft-deleted: it answers 410
        (and its name stays taken) until its last fork is deleted, which deletes it."""
        topic = topic_of(name)
        for attempt in range(HOT_ATTEMPTS):
            head = await self.engine.head_of(topic)
            state = state_of(head)
            if head is None or state is None:
                raise StreamNotFound(name)
            if state.gone:
                raise StreamGone(name)
            expired = state.expired(head, self.clock())
            if state.refs:
                if await self.engine.put_ext(head, replace(state, gone=True).dump()) is None:
                    await _backoff(attempt)
                    continue
                if expired:
                    raise StreamGone(name)
                return
            if not await self._drop(head, state):
                await _backoff(attempt)
                continue
            if expired:
                raise StreamNotFound(name)  # an expired stream is gone already; this reclaims it
            return
        raise StorageUnavailable("stream delete kept conflicting; retry", headers=RETRY)

    async def _drop(self, head: Head, state: StreamState) -> bool:
        """Delete an unreferenced stream's topic iff its state is still `head`'s (False:
        it moved, decide again), then give back its reference on its fork source."""
        if await self.engine.delete_topic(head.topic, if_empty=False, if_ext=head.ext) is None:
            return False
        if state.fork is not None:
            await self._release(state.fork)
        return True

    async def _release(self, fork: Fork) -> None:
        """Give back a fork's reference on its source; a deleted (or expired) source whose
        last reference this was is deleted now, and so on up the chain."""
        topic = topic_of(fork.src)
        for attempt in range(HOT_ATTEMPTS * 2):
            head = await self.engine.head_of(topic)
            state = state_of(head)
            if head is None or state is None or head.epoch != fork.src_epoch:
                return  # nothing holds a reference for it any more
            left = replace(state, refs=max(0, state.refs - 1))
            if not left.refs and (state.gone or state.expired(head, self.clock())):
                if await self._drop(head, left):
                    return
            elif await self.engine.put_ext(head, left.dump()) is not None:
                return
            await _backoff(min(attempt, 5))
        # The source keeps one reference too many: it is never reclaimed (410 until then).
        log.warning("fork reference on %r not released: it kept conflicting", fork.src)

    # --- read ---------------------------------------------------------------------------
    async def read(
        self, head: Head, after: int, limit: int, max_bytes: int, key: str | None = None
    ) -> RangeRead:
        """Entries after `after`: a fork's, up to its fork point, come from its source
        (recursively), then its own."""
        tag = json_literal(key) if key is not None else None
        try:
            return await self._compose(head, after, head.head_seq, limit, max_bytes, tag)
        except TopicNotFound:
            raise StreamNotFound(name_of(head.topic)) from None

    async def _compose(
        self, head: Head, after: int, upto: int, limit: int, max_bytes: int, tag: bytes | None
    ) -> RangeRead:
        state = state_of(head)
        fork = state.fork if state is not None else None
        records: list[StoredRecord] = []
        scanned = 0
        nxt = after
        if fork is not None and after < fork.at:
            src = await self.engine.head_of(topic_of(fork.src), consistent=False)
            if src is None or src.deleted or src.epoch != fork.src_epoch:
                src = await self.engine.head_of(topic_of(fork.src))  # strongly, to be sure
            if src is None or src.deleted or src.epoch != fork.src_epoch:
                raise StorageUnavailable(
                    f"the entries this fork inherits from {fork.src!r} are missing"
                )
            cap = min(fork.at, upto)
            inherited = await self._compose(src, after, cap, limit, max_bytes, tag)
            records, scanned, nxt = (
                list(inherited.records),
                inherited.scanned_bytes,
                inherited.next_seq,
            )
            used = sum(len(r.data_raw) for r in records)
            if nxt < cap or len(records) >= limit or used >= max_bytes:
                return RangeRead(head, records, nxt, scanned)
            limit, max_bytes = limit - len(records), max_bytes - used
        if nxt >= min(upto, head.head_seq):
            return RangeRead(head, records, max(nxt, after), scanned)
        own = await self.engine.read_range(head.topic, nxt, limit, max_bytes, tag, head, upto)
        if not records:
            return own
        nxt = own.next_seq
        for rec in own.records:
            if len(rec.data_raw) > max_bytes:
                nxt = rec.seq - 1  # the page is full: the next read starts here
                break
            records.append(rec)
            max_bytes -= len(rec.data_raw)
        return RangeRead(own.head, records, nxt, scanned + own.scanned_bytes)

    async def read_window(
        self, head: Head, after: int, upto: int, limit: int, max_bytes: int
    ) -> RangeRead:
        """Entries in (after, upto] of the stream as of `head` (at most `limit` records and
        about `max_bytes`; the page's next_seq says how far it got): the scans of _search,
        _aggregate and _routing_keys (durable/search.py) read newest-first windows with it."""
        try:
            return await self._compose(
                head, after, min(upto, head.head_seq), limit, max_bytes, None
            )
        except TopicNotFound:
            raise StreamNotFound(name_of(head.topic)) from None

    async def read_entries(self, head: Head, seqs: Sequence[int]) -> list[StoredRecord]:
        """The entries at `seqs` (ascending) of the stream's own log (seqs of its own sealed
        segments: a fork's inherited entries are not in it), deleted ones left out: the
        index families' candidates, read block by block."""
        try:
            return await self.engine.read_seqs(head, seqs)
        except TopicNotFound:
            raise StreamNotFound(name_of(head.topic)) from None

    async def segments(self, head: Head) -> list[SegmentItem]:
        """The stream's own sealed segments (S3), oldest first; [] without tiering.

        Kept per stream while its delete version and trim point stand (a record delete or a
        retention drop changes the items: read them all again); a head sealed further reads
        only the segments after the ones known. Segment items never change otherwise."""
        store = self.engine.segments
        if store is None:
            return []
        known = self._segments.get(head.log_key)
        out: list[SegmentItem] = []
        if known is not None and known[0] == (head.del_ver, head.earliest_seq):
            out = [s for s in known[1] if s.first_seq <= head.sealed_through]
            if len(out) < len(known[1]):
                return out  # an older head than the one that filled it
        after = out[-1].last_seq if out else 0
        while after < head.sealed_through:
            items = await self.engine.run_io(store.after, head, after, 256)
            if not items:
                break
            out.extend(it for it in items if it.first_seq <= head.sealed_through)
            after = items[-1].last_seq
        if len(self._segments) >= SEGMENT_LISTS and head.log_key not in self._segments:
            self._segments.clear()  # a bound, not an LRU: cheap to refill
        self._segments[head.log_key] = ((head.del_ver, head.earliest_seq), out)
        return list(out)

    async def read_filtered(
        self,
        head: Head,
        after: int,
        limit: int,
        max_bytes: int,
        key: str | None,
        pred: Predicate | None,
        reg: dict[str, Any] | None,
        pruner: SegmentPruner | None = None,
    ) -> tuple[RangeRead, bool]:
        """Entries after `after` with routing key `key` (when given) that match `pred`
        (§8.5; when given), scanning at most FILTER_SCAN_CAP payload bytes: (page, whether
        the cap stopped the scan). The page's next_seq is past every entry examined,
        matching or not.

        `pruner`: the index families' answer for a sealed segment of the stream's own (the
        seqs in it that may be selected, or None: no usable companion). A segment with no
        candidate is skipped unread; of one with some only the blocks holding them are read;
        the rest of the stream (segments without a companion, the unsealed tail, a fork's
        inherited entries) is scanned."""
        tag = json_literal(key) if key is not None else None
        out: list[StoredRecord] = []
        out_bytes = scanned = 0
        nxt = after
        segs = await self.segments(head) if pruner is not None else []
        at = 0  # segs[at] is the first segment ending after nxt
        while nxt < head.head_seq and scanned < FILTER_SCAN_CAP:
            while at < len(segs) and segs[at].last_seq <= nxt:
                at += 1
            seg = segs[at] if at < len(segs) and segs[at].first_seq <= nxt + 1 else None
            allowed = await pruner(seg) if pruner is not None and seg is not None else None
            if seg is not None and allowed is not None:
                picked = sorted(q for q in allowed if q > nxt)
                recs = await self.read_entries(head, picked) if picked else []
                upto = seg.last_seq
            else:
                # scan up to the next segment the families may answer
                if seg is not None:
                    upto = seg.last_seq
                elif at < len(segs):
                    upto = segs[at].first_seq - 1
                else:
                    upto = head.head_seq
                try:
                    rr = await self._compose(
                        head, nxt, upto, PAGE_SCAN_RECORDS, PAGE_SCAN_BYTES, tag
                    )
                except TopicNotFound:
                    raise StreamNotFound(name_of(head.topic)) from None
                head = rr.head
                recs = list(rr.records)
                upto = rr.next_seq
                if upto <= nxt:
                    break
            for rec in recs:
                if tag is not None and rec.tag_json != tag:
                    continue
                if out and (len(out) >= limit or out_bytes + len(rec.data_raw) > max_bytes):
                    return RangeRead(head, out, rec.seq - 1, scanned), False
                scanned += len(rec.data_raw)
                if pred is None:
                    selected = True
                else:
                    version = schema.version_at(reg, rec.seq, key=boundary_seq) if reg else 0
                    selected = pred.matches(jsoncodec.loads(rec.data_raw), version=version or None)
                if selected:
                    out.append(rec)
                    out_bytes += len(rec.data_raw)
                if scanned >= FILTER_SCAN_CAP:
                    more = rec.seq < head.head_seq
                    return RangeRead(head, out, rec.seq, scanned), more and pred is not None
            nxt = upto
            if pred is None and allowed is None:
                break  # a key read answers after one scanned page, as an unpruned one does
        return RangeRead(head, out, nxt, scanned), False

    async def seek(self, head: Head, ts: int) -> int:
        """The seq just before the first entry appended at or after `ts` (a fork's search
        continues into its source when its own entries are all newer)."""
        found = await self.engine.seek_time(head, ts)
        state = state_of(head)
        fork = state.fork if state is not None else None
        if fork is None or found > fork.at:
            return found
        src = await self.engine.head_of(topic_of(fork.src), consistent=False)
        if src is None or src.deleted or src.epoch != fork.src_epoch:
            return found
        return min(await self.seek(src, ts), fork.at)

    async def wait(self, head: Head, timeout_s: float) -> tuple[Head, StreamState] | None:
        """Wait for the stream to move past `head` (an append, closure): the stream as it
        is then, None at the timeout; StreamNotFound if it was deleted or expired."""
        if timeout_s <= 0:
            return None
        moved = await self.engine.wait_change(head.topic, head, timeout_s)
        if moved is None:
            return None
        state = state_of(moved)
        if state is None or moved.epoch != head.epoch:
            raise StreamNotFound(name_of(head.topic))
        _check_live(name_of(head.topic), moved, state, self.clock())
        return moved, state


def _check_live(name: str, head: Head, state: StreamState, now: int) -> None:
    """410 for a stream kept only for its forks, 404 for an expired one."""
    if state.held(head, now):
        raise StreamGone(name)
    if state.expired(head, now):
        raise StreamNotFound(name)


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


def _key_of(rec: StoredRecord) -> str | None:
    return None if rec.tag_json is None else str(jsoncodec.loads(rec.tag_json))


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
