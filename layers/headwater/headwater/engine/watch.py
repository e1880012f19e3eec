"""Watch sessions (spec §7): many topics over one stream with exact resume.

A session stores the validated subscription (with initial positions resolved at POST time)
and the last-delivered cursor per topic. A stream runs one loop per connection: it diffs
the topics that may have news, emits `record` / `tombstone` / `caught-up` / `topic-deleted`
events, and otherwise waits for a wake-up: in-process appends via the Notifier (one waiter
task per topic), appends from other processes by polling the heads with one eventually
consistent BatchGetItem per poll, backing off to the configured poll interval."""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import dataclasses
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from headwater import jsoncodec
from headwater.engine.log import LogEngine, wall_ms
from headwater.engine.values import DiffRequest
from headwater.errors import InvalidRequest, TopicNotFound
from headwater.storage.ports import Head, SessionStore, WatchSessionItem

log = logging.getLogger(__name__)
POLL_MIN_S = 0.025
SAVE_INTERVAL_S = 1.0  # session cursors are written at most this often (and on close)
WAITER_TIMEOUT_S = 3600.0


@dataclass(frozen=True, slots=True)
class TopicWatch:
    topic: str
    from_seq: int  # resolved initial position (tail resolved to the head at POST time)
    epoch: int


@dataclass(frozen=True, slots=True)
class WatchSpec:
    topics: tuple[TopicWatch, ...]
    node: str | None = None
    limit: int = 256
    max_batch_bytes: int = 262_144
    heartbeat_ms: int = 15_000
    include_meta: bool = True
    include_tags: bool = False
    include_data: bool = True
    consistency: str = "eventual"

    def to_json(self) -> str:
        body = dataclasses.asdict(self)
        body["topics"] = [[t.topic, t.from_seq, t.epoch] for t in self.topics]
        return json.dumps(body, separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str) -> WatchSpec:
        body: dict[str, Any] = json.loads(raw)
        topics = tuple(TopicWatch(str(t), int(s), int(e)) for t, s, e in body.pop("topics"))
        return cls(topics=topics, **body)


@dataclass(frozen=True, slots=True)
class TopicRequest:
    from_seq: int = 0
    tail: bool = False


@dataclass(frozen=True, slots=True)
class WatchEvent:
    name: str  # record | tombstone | caught-up | topic-deleted | error | heartbeat
    data: bytes = b""
    id: str | None = None  # composite cursor; only on data-bearing frames


@dataclass(frozen=True, slots=True)
class OpenSession:
    item: WatchSessionItem
    spec: WatchSpec
    start: dict[str, int]  # where this stream begins, per live topic
    deleted: frozenset[str]


def new_wid() -> str:
    return "wid_" + secrets.token_urlsafe(18)  # 144 random bits


def encode_cursor_map(cursors: Mapping[str, int]) -> str:
    raw = json.dumps(dict(cursors), separators=(",", ":"), ensure_ascii=False).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def decode_cursor_map(token: str) -> dict[str, int]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        value = json.loads(raw)
    except (binascii.Error, ValueError) as exc:
        raise InvalidRequest("malformed cursor", detail={"field": "Last-Event-ID"}) from exc
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
        for k, v in value.items()
    ):
        raise InvalidRequest("malformed cursor", detail={"field": "Last-Event-ID"})
    return value


def _session_state(cursors: Mapping[str, int], deleted: set[str] | frozenset[str]) -> str:
    return json.dumps({"c": dict(cursors), "d": sorted(deleted)}, separators=(",", ":"))


def _strip_data(record: bytes) -> bytes:
    obj = jsoncodec.loads(record)
    obj.pop("data", None)
    return jsoncodec.dumps(obj)


class WatchEngine:
    def __init__(self, engine: LogEngine, sessions: SessionStore, session_ttl_ms: int) -> None:
        self.engine = engine
        self.sessions = sessions
        self.ttl_ms = session_ttl_ms

    # --- POST /v0/watch ----------------------------------------------------------------
    async def create(
        self,
        requested: Mapping[str, TopicRequest],
        spec: WatchSpec,
        *,
        key_id: str,
        scopes: frozenset[str],
        auth: bool,
        lenient: bool,
    ) -> tuple[str, WatchSpec, dict[str, Head]]:
        heads = await asyncio.to_thread(self.engine.heads.get_many, list(requested))
        live = {t: h for t, h in heads.items() if not h.deleted}
        topics: list[TopicWatch] = []
        for name, req in requested.items():
            head = live.get(name)
            if head is None:
                if lenient:
                    continue
                raise TopicNotFound(name)
            start = head.head_seq if req.tail else req.from_seq
            topics.append(TopicWatch(name, start, head.epoch))
        spec = dataclasses.replace(spec, topics=tuple(topics))
        wid = new_wid()
        item = WatchSessionItem(
            wid=wid,
            key_id=key_id,
            scopes=scopes,
            auth=auth,
            spec=spec.to_json(),
            cursors=None,
            last_access_ms=wall_ms(),
            ttl_ms=self.ttl_ms,
        )
        await asyncio.to_thread(self.sessions.put, item)
        return wid, spec, {t.topic: live[t.topic] for t in topics}

    # --- GET /v0/watch/:wid ------------------------------------------------------------
    async def load(self, wid: str) -> WatchSessionItem | None:
        """The session, or None if unknown or idle past its TTL (then it is removed: the
        opportunistic GC of spec §7.1; DynamoDB's TTL removes the ones nobody asks for)."""
        item = await asyncio.to_thread(self.sessions.get, wid)
        if item is None:
            return None
        if wall_ms() - item.last_access_ms > item.ttl_ms:
            await asyncio.to_thread(self.sessions.delete, wid)
            return None
        return item

    @staticmethod
    def resolve(item: WatchSessionItem, last_event_id: str | None) -> OpenSession:
        """Resume order (spec §7.3): the session's cursors, rewound (never advanced) to the
        Last-Event-ID map; the initial positions where neither applies."""
        spec = WatchSpec.from_json(item.spec)
        start = {t.topic: t.from_seq for t in spec.topics}
        deleted: frozenset[str] = frozenset()
        if item.cursors is not None:
            state = json.loads(item.cursors)
            deleted = frozenset(state.get("d", []))
            for topic, seq in state.get("c", {}).items():
                if topic in start:
                    start[topic] = int(seq)
        if last_event_id:
            for topic, seq in decode_cursor_map(last_event_id).items():
                if topic in start:
                    start[topic] = min(start[topic], seq)
        for topic in deleted:
            start.pop(topic, None)
        return OpenSession(item, spec, start, deleted)

    async def stream(self, session: OpenSession) -> AsyncIterator[WatchEvent]:
        runner = _StreamRun(self, session)
        try:
            async for event in runner.run():
                yield event
        finally:
            runner.close()


class _StreamRun:
    """One open stream's state and loop."""

    def __init__(self, owner: WatchEngine, session: OpenSession) -> None:
        self.owner = owner
        self.engine = owner.engine
        self.spec = session.spec
        self.wid = session.item.wid
        self.ttl_ms = session.item.ttl_ms
        self.cursors: dict[str, int] = {
            t.topic: session.start[t.topic] for t in self.spec.topics if t.topic in session.start
        }
        self.epochs = {t.topic: t.epoch for t in self.spec.topics}
        self.deleted: set[str] = set(session.deleted)
        self.live: dict[str, bool] = dict.fromkeys(self.cursors, False)
        self.fresh: set[str] = set(self.cursors)  # not yet read on this connection
        self.dirty: set[str] = set(self.cursors)
        self.wake = asyncio.Event()
        self.waiters: dict[str, asyncio.Task[None]] = {}
        self.saved_state = session.item.cursors
        self.nodes = frozenset({self.spec.node}) if self.spec.node is not None else frozenset()

    def _id(self, cursors: Mapping[str, int]) -> str:
        return encode_cursor_map(cursors)

    async def _waiter(self, topic: str) -> None:
        while True:
            if await self.engine.notifier.wait(topic, WAITER_TIMEOUT_S):
                self.dirty.add(topic)
                self.wake.set()

    def _state(self) -> str:
        return _session_state(self.cursors, self.deleted)

    async def run(self) -> AsyncIterator[WatchEvent]:
        for topic in self.cursors:
            self.waiters[topic] = asyncio.create_task(self._waiter(topic))
        await asyncio.sleep(0)  # the waiters register before the first read: no lost wake-up
        spec = self.spec
        hb_s = spec.heartbeat_ms / 1000
        poll_max = self.engine.settings.poll_interval_ms / 1000
        poll = POLL_MIN_S
        now = time.monotonic()
        last_sent = now
        next_poll = now + poll
        last_save = now
        touch_s = min(self.ttl_ms / 3000, 60.0)
        while True:
            if self.dirty:
                batch = [t for t in self.cursors if t in self.dirty and t not in self.deleted]
                self.dirty.clear()
                for topic in batch:
                    async for event in self._read(topic):
                        yield event
                        last_sent = time.monotonic()
                        if event.name == "record":
                            poll = POLL_MIN_S
            now = time.monotonic()
            state = self._state()
            if (state != self.saved_state and now - last_save >= SAVE_INTERVAL_S) or (
                now - last_save >= touch_s
            ):
                last_save = now
                ok = await asyncio.to_thread(
                    self.owner.sessions.save_cursors, self.wid, state, wall_ms(), self.ttl_ms
                )
                if not ok:
                    yield WatchEvent(
                        "error",
                        b'{"code":410,"error":"watch session expired; POST /v0/watch again"}',
                    )
                    return
                self.saved_state = state
            if self.dirty:
                continue
            now = time.monotonic()
            deadline = min(last_sent + hb_s, next_poll, last_save + touch_s)
            if state != self.saved_state:
                deadline = min(deadline, last_save + SAVE_INTERVAL_S)
            if not self.wake.is_set() and deadline > now:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), deadline - now)
            self.wake.clear()
            now = time.monotonic()
            if now >= next_poll:
                await self._poll_heads()
                poll = POLL_MIN_S if self.dirty else min(poll * 2, poll_max)
                next_poll = time.monotonic() + poll
            if not self.dirty and now - last_sent >= hb_s:
                last_sent = now
                yield WatchEvent("heartbeat", str(wall_ms()).encode())

    async def _poll_heads(self) -> None:
        topics = [t for t in self.cursors if t not in self.deleted]
        if not topics:
            return
        heads = await asyncio.to_thread(self.engine.heads.get_many, topics, consistent=False)
        for topic in topics:
            h = heads.get(topic)
            if (
                h is None
                or h.deleted
                or h.epoch != self.epochs[topic]
                or h.head_seq > self.cursors[topic]
            ):
                self.dirty.add(topic)

    def _topic_deleted(self, topic: str) -> WatchEvent:
        data = jsoncodec.dumps(
            {"topic": topic, "head_seq": self.cursors[topic], "reason": "deleted"}
        )
        event = WatchEvent("topic-deleted", data, self._id(self.cursors))
        self.deleted.add(topic)
        task = self.waiters.pop(topic, None)
        if task is not None:
            task.cancel()
        return event

    async def _read(self, topic: str) -> AsyncIterator[WatchEvent]:
        spec = self.spec
        cur = self.cursors[topic]
        req = DiffRequest(
            from_seq=cur,
            limit=spec.limit,
            nodes=self.nodes,
            include_tags=spec.include_tags,
            include_meta=spec.include_meta,
            max_bytes=spec.max_batch_bytes,
        )
        try:
            res = await self.engine.diff(topic, req)
        except TopicNotFound:
            yield self._topic_deleted(topic)
            return
        head = res.head
        if head.epoch != self.epochs[topic]:
            yield self._topic_deleted(topic)
            return
        if topic in self.fresh:
            self.fresh.discard(topic)
            earliest = head.first_live_seq
            if cur > 0 and cur + 1 < earliest:
                # The requested position fell off the start (Kafka's OffsetOutOfRange).
                gap_to = earliest - 1
                after = {**self.cursors, topic: gap_to}
                data = jsoncodec.dumps(
                    {
                        "topic": topic,
                        "reason": "from_seq_too_old",
                        "gap_from": cur + 1,
                        "gap_to": gap_to,
                        "earliest_seq": earliest,
                        "head_seq": head.head_seq,
                    }
                )
                yield WatchEvent("tombstone", data, self._id(after))
                self.cursors[topic] = cur = gap_to
        if res.records:
            records = res.records if spec.include_data else [_strip_data(r) for r in res.records]
            after = {**self.cursors, topic: res.next_from_seq}
            data = b"".join(
                (
                    b'{"topic":',
                    jsoncodec.dumps(topic),
                    b',"records":[',
                    b",".join(records),
                    b'],"from_seq":%d,"to_seq":%d,"head_seq":%d}'
                    % (cur, res.next_from_seq, head.head_seq),
                )
            )
            yield WatchEvent("record", data, self._id(after))
            self.cursors[topic] = res.next_from_seq
        elif res.next_from_seq > cur:
            self.cursors[topic] = res.next_from_seq  # only filtered-out records
        if not res.caught_up:
            self.live[topic] = False
            if res.records or res.next_from_seq > cur:
                self.dirty.add(topic)  # more backlog; a read that made no progress waits
                # for the next head poll instead of spinning
        elif not self.live[topic]:
            self.live[topic] = True
            data = jsoncodec.dumps({"topic": topic, "head_seq": head.head_seq})
            yield WatchEvent("caught-up", data, self._id(self.cursors))

    def close(self) -> None:
        for task in self.waiters.values():
            task.cancel()
        self.waiters.clear()
        state = self._state()
        # The stream may be closing under cancellation (client gone): the final cursor write
        # runs on a worker thread and is not awaited.
        fut = asyncio.get_running_loop().run_in_executor(
            None, self.owner.sessions.save_cursors, self.wid, state, wall_ms(), self.ttl_ms
        )
        fut.add_done_callback(_log_failure)


def _log_failure(fut: asyncio.Future[bool]) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.warning("watch session cursor save failed", exc_info=fut.exception())
