"""Watch sessions (spec §7): many topics over one stream with exact resume.

A session stores the validated subscription (with initial positions resolved at POST time)
and the last-delivered cursor per topic. A stream runs one TopicFeed loop per connection: it
diffs the topics that may have news, emits `record` / `tombstone` / `caught-up` /
`topic-deleted` events, and otherwise waits for a wake-up: in-process appends via the
Notifier (one waiter task per topic), appends from other processes by polling the heads with
one eventually consistent BatchGetItem per poll, backing off to the configured poll interval.
The same loop, without a stored session, serves the WebSocket data plane (/v0/ws)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import math
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from headwater import jsoncodec
from headwater.engine.log import LogEngine, wall_ms
from headwater.engine.ports import Head, SessionStore, WatchSessionItem
from headwater.engine.values import DiffRequest
from headwater.engine.watch_values import (
    FeedPosition,
    OpenSession,
    TopicRequest,
    TopicWatch,
    WatchEvent,
    WatchSpec,
    decode_cursor_map,
    encode_cursor_map,
    new_wid,
)
from headwater.errors import TopicNotFound

log = logging.getLogger(__name__)
POLL_MIN_S = 0.025
SAVE_INTERVAL_S = 5.0  # session cursors are written at most this often while streaming (and on
# close, which is what a reconnect reads); a crashed server replays at most this much
WAITER_TIMEOUT_S = 3600.0


def _session_state(
    cursors: Mapping[str, int],
    deleted: set[str] | frozenset[str],
    epochs: Mapping[str, int] | None = None,
) -> str:
    state: dict[str, Any] = {"c": dict(cursors), "d": sorted(deleted)}
    if epochs:
        state["e"] = dict(epochs)  # topics followed into a newer incarnation than the spec's
    return json.dumps(state, separators=(",", ":"))


def _strip_data(record: bytes) -> bytes:
    obj = jsoncodec.loads(record)
    obj.pop("data", None)
    return jsoncodec.dumps(obj)


async def resolve_starts(
    engine: LogEngine, requested: Mapping[str, TopicRequest], *, lenient: bool
) -> tuple[list[TopicWatch], dict[str, Head]]:
    """Initial positions (tail resolved to the current head) and the heads they came from.
    An unknown or deleted topic is TopicNotFound, or silently dropped when lenient."""
    heads = await asyncio.to_thread(engine.heads.get_many, list(requested))
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
    return topics, {t.topic: live[t.topic] for t in topics}


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
        topics, heads = await resolve_starts(self.engine, requested, lenient=lenient)
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
        return wid, spec, heads

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
        epochs: dict[str, int] = {}
        if item.cursors is not None:
            state = json.loads(item.cursors)
            deleted = frozenset(state.get("d", []))
            epochs = {t: int(e) for t, e in state.get("e", {}).items() if t in start}
            for topic, seq in state.get("c", {}).items():
                if topic in start:
                    start[topic] = int(seq)
        if last_event_id:
            for topic, seq in decode_cursor_map(last_event_id).items():
                if topic in start:
                    start[topic] = min(start[topic], seq)
        for topic in deleted:
            start.pop(topic, None)
        return OpenSession(item, spec, start, deleted, epochs)

    async def stream(
        self, session: OpenSession, max_duration_s: float = 0
    ) -> AsyncGenerator[WatchEvent, None]:
        """The session's events; with `max_duration_s`, the stream ends (cursors saved) once
        that long has passed and what was read is sent."""
        runner = _StreamRun(self, session)
        if max_duration_s > 0:
            runner.ends_at = time.monotonic() + max_duration_s
        try:
            async for event in runner.run():
                yield event
        finally:
            runner.close()


@dataclass(slots=True, eq=False)
class _Sub:
    """One topic's subscription on a feed. Its identity is the subscription: a topic that is
    unsubscribed (or subscribed again) gets a new object, so a read that was in flight can
    tell that its result is stale."""

    cursor: int
    epoch: int
    opts: WatchSpec
    nodes: frozenset[str]
    live: bool = False
    fresh: bool = True  # not yet read on this connection
    deleted: bool = False
    waiter: asyncio.Task[None] | None = None


class TopicFeed:
    """The per-topic read loop shared by SSE watch streams and WebSocket connections.

    It diffs the topics that may have news, emits `record` / `tombstone` / `caught-up` /
    `topic-deleted` events, and otherwise waits for a wake-up: in-process appends via the
    Notifier (one waiter task per topic), appends from other processes by polling the heads
    with one eventually consistent BatchGetItem per poll, backing off to the configured poll
    interval. Topics can be added and removed while it runs (WebSocket subscribe and
    unsubscribe). A consumer that awaits before taking the next event holds the loop: the
    reads after it see everything appended meanwhile, so records coalesce into fewer,
    larger batches. The base keeps no state outside the process: a stored watch session
    is the subclass below."""

    # Whether a subscription resumed at an older incarnation follows the topic into its new
    # one (a stored session: the epoch is saved with the cursors) or ends with topic-deleted.
    follows_recreate = False

    def __init__(self, engine: LogEngine, *, heartbeat_ms: int | None = None) -> None:
        self.engine = engine
        self.hb_s = heartbeat_ms / 1000 if heartbeat_ms is not None else None
        self.subs: dict[str, _Sub] = {}
        self.dirty: set[str] = set()
        self.wake = asyncio.Event()
        self.running = False
        self.ends_at: float | None = None  # time.monotonic() at which the feed ends

    # --- subscriptions ------------------------------------------------------------------
    def subscribe(self, topic: str, from_seq: int, epoch: int, opts: WatchSpec) -> None:
        """Deliver `topic` after `from_seq` with `opts` (node, limit, include_*); replaces
        any subscription the topic already has."""
        self.unsubscribe(topic)
        nodes = frozenset({opts.node}) if opts.node is not None else frozenset()
        sub = _Sub(from_seq, epoch, opts, nodes)
        self.subs[topic] = sub
        if self.running:
            self._start_waiter(topic, sub)
        self.dirty.add(topic)
        self.wake.set()

    def unsubscribe(self, topic: str) -> bool:
        sub = self.subs.pop(topic, None)
        if sub is None:
            return False
        self._stop_waiter(topic, sub)
        self.dirty.discard(topic)
        return True

    def subscription(self, topic: str) -> object | None:
        """An opaque token for the topic's current subscription (None if there is none)."""
        return self.subs.get(topic)

    def active_topics(self) -> list[str]:
        return [t for t, s in self.subs.items() if not s.deleted]

    @property
    def cursors(self) -> dict[str, int]:
        return {t: s.cursor for t, s in self.subs.items()}

    # --- one-shot reads (no loop: the API Gateway WebSocket delivery, ws/gateway.py) -
    def restore(
        self, topic: str, from_seq: int, epoch: int, opts: WatchSpec, *, live: bool, fresh: bool
    ) -> None:
        """Subscribe at a stored position: `live` = caught-up was already sent, `fresh` = the
        from_seq_too_old check is still due (the subscription was never read)."""
        self.subscribe(topic, from_seq, epoch, opts)
        sub = self.subs[topic]
        sub.live, sub.fresh = live, fresh

    def position(self, topic: str) -> FeedPosition | None:
        sub = self.subs.get(topic)
        if sub is None:
            return None
        return FeedPosition(sub.cursor, sub.live, sub.fresh, sub.deleted, topic in self.dirty)

    async def read_once(self, topic: str) -> AsyncIterator[WatchEvent]:
        """One read of `topic` (one diff), exactly as the loop reads it. Afterwards
        `position(topic).pending` says whether more backlog is waiting."""
        self.dirty.discard(topic)
        async for event in self._read(topic):
            yield event

    # --- hooks (a stored session overrides them) ----------------------------------------
    def _id(self) -> str | None:
        """The id of a data-bearing event: the composite cursor (SSE), or none."""
        return None

    def _id_after(self, topic: str, seq: int) -> str | None:
        return None

    async def _checkpoint(self) -> WatchEvent | None:
        """Runs after each round of reads; an event returned is the last one (terminal)."""
        return None

    def _checkpoint_deadline(self) -> float:
        return float("inf")

    # --- the loop -----------------------------------------------------------------------
    async def _waiter(self, topic: str) -> None:
        while True:
            if await self.engine.notifier.wait(topic, WAITER_TIMEOUT_S):
                self.dirty.add(topic)
                self.wake.set()

    def _start_waiter(self, topic: str, sub: _Sub) -> None:
        """Wake-ups for a topic: in-process appends and the process's HeadHub (which polls
        the heads of every watched topic once for all readers) both come through the
        Notifier."""
        sub.waiter = asyncio.create_task(self._waiter(topic))
        self.engine.hub.watch(topic)

    def _stop_waiter(self, topic: str, sub: _Sub) -> None:
        if sub.waiter is not None:
            sub.waiter.cancel()
            sub.waiter = None
            self.engine.hub.unwatch(topic)

    async def run(self) -> AsyncIterator[WatchEvent]:
        self.running = True
        for topic, sub in self.subs.items():
            if sub.waiter is None and not sub.deleted:
                self._start_waiter(topic, sub)
        await asyncio.sleep(0)  # the waiters register before the first read: no lost wake-up
        hb_s = self.hb_s
        poll_max = self.engine.settings.poll_interval_ms / 1000
        poll = POLL_MIN_S
        now = time.monotonic()
        last_sent = now
        next_poll = now + poll
        while True:
            if self.dirty:
                batch = [t for t, s in self.subs.items() if t in self.dirty and not s.deleted]
                self.dirty.clear()
                for topic in batch:
                    async for event in self._read(topic):
                        yield event
                        last_sent = time.monotonic()
                        if event.name == "record":
                            poll = POLL_MIN_S
            final = await self._checkpoint()
            if final is not None:
                yield final
                return
            if self.dirty:
                continue
            now = time.monotonic()
            if self.ends_at is not None and now >= self.ends_at:
                return  # everything read so far was sent: the stream ends here
            if all(s.live or s.deleted for s in self.subs.values()):
                # Live topics are woken by the Notifier (local appends and the HeadHub's
                # polls); the timer below is only the backstop for backlog reads.
                next_poll = max(next_poll, now + poll_max)
            deadline = min(next_poll, self._checkpoint_deadline())
            if hb_s is not None:
                deadline = min(deadline, last_sent + hb_s)
            if self.ends_at is not None:
                deadline = min(deadline, self.ends_at)
            if not self.wake.is_set() and deadline > now:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(deadline - now):
                        await self.wake.wait()
            self.wake.clear()
            now = time.monotonic()
            if now >= next_poll:
                await self._poll_heads()
                poll = POLL_MIN_S if self.dirty else min(poll * 2, poll_max)
                next_poll = time.monotonic() + poll
            if hb_s is not None and not self.dirty and now - last_sent >= hb_s:
                last_sent = now
                yield WatchEvent("heartbeat", str(wall_ms()).encode())

    async def _poll_heads(self) -> None:
        """Compare the subscriptions with the heads this process knows (the HeadHub keeps
        them fresh): no storage call. A topic with no known head is re-read (strongly)."""
        for topic, sub in self.subs.items():
            if sub.deleted:
                continue
            h = self.engine.known.fresh(topic, float("inf"))
            if h is None or h.deleted or h.epoch != sub.epoch or h.head_seq > sub.cursor:
                self.dirty.add(topic)

    def _topic_deleted(self, topic: str, sub: _Sub) -> WatchEvent:
        data = jsoncodec.dumps({"topic": topic, "head_seq": sub.cursor, "reason": "deleted"})
        event = WatchEvent("topic-deleted", data, self._id(), topic)
        sub.deleted = True
        self._stop_waiter(topic, sub)
        return event

    async def _read(self, topic: str) -> AsyncIterator[WatchEvent]:
        # Every event is yielded while `sub` is still the topic's subscription: it is checked
        # after each await and after each yield (the consumer may await in between).
        sub = self.subs.get(topic)
        if sub is None or sub.deleted:
            return
        opts = sub.opts
        cur = sub.cursor
        req = DiffRequest(
            from_seq=cur,
            limit=opts.limit,
            nodes=sub.nodes,
            include_tags=opts.include_tags,
            include_meta=opts.include_meta,
            max_bytes=opts.max_batch_bytes,
            consistency=opts.consistency,
        )
        try:
            res = await self.engine.diff(topic, req)
        except TopicNotFound:
            if self.subs.get(topic) is sub:
                yield self._topic_deleted(topic, sub)
            return
        if self.subs.get(topic) is not sub:
            return  # unsubscribed (or subscribed anew) during the read
        head = res.head
        if head.epoch != sub.epoch:
            if not (self.follows_recreate and sub.fresh and head.epoch > sub.epoch):
                yield self._topic_deleted(topic, sub)
                return
            # A stored session resumed after the topic was deleted and recreated: the
            # consumer was not connected when it happened. Spec §7: the loss is reported as
            # a `recreated` tombstone and delivery starts over in the new incarnation.
            data = jsoncodec.dumps(
                {
                    "topic": topic,
                    "reason": "recreated",
                    "gap_from": cur + 1,
                    "gap_to": max(cur, head.prev_head_seq),
                    "missed_estimate": max(0, head.prev_head_seq - cur),
                    "earliest_seq": head.first_live_seq,
                    "head_seq": head.head_seq,
                }
            )
            sub.epoch, sub.cursor, sub.fresh = head.epoch, 0, False
            self.dirty.add(topic)  # read the new incarnation next
            yield WatchEvent("tombstone", data, self._id_after(topic, 0), topic)
            return
        tomb = res.tombstone
        if sub.fresh:
            sub.fresh = False
            earliest = head.first_live_seq
            if cur > 0 and cur + 1 < earliest:
                tomb = None  # reported below as from_seq_too_old
                # The requested position fell off the start (Kafka's OffsetOutOfRange).
                gap_to = earliest - 1
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
                yield WatchEvent("tombstone", data, self._id_after(topic, gap_to), topic)
                sub.cursor = cur = gap_to
                if self.subs.get(topic) is not sub:
                    return
        if tomb is not None and tomb.gap_to >= tomb.gap_from and tomb.reason != "recreated":
            # Records lost under the cursor (evicted by cap, expired by TTL): spec §7.
            data = jsoncodec.dumps(
                {
                    "topic": topic,
                    "reason": tomb.reason,
                    "gap_from": tomb.gap_from,
                    "gap_to": tomb.gap_to,
                    "missed_estimate": tomb.missed_estimate,
                    "earliest_seq": tomb.earliest_seq,
                    "head_seq": tomb.head_seq,
                }
            )
            yield WatchEvent("tombstone", data, self._id_after(topic, tomb.gap_to), topic)
            sub.cursor = cur = max(cur, tomb.gap_to)
            if self.subs.get(topic) is not sub:
                return
        if res.records:
            records = res.records if opts.include_data else [_strip_data(r) for r in res.records]
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
            yield WatchEvent("record", data, self._id_after(topic, res.next_from_seq), topic)
            sub.cursor = res.next_from_seq
            if self.subs.get(topic) is not sub:
                return
        elif res.next_from_seq > cur:
            sub.cursor = res.next_from_seq  # only filtered-out records
        if not res.caught_up:
            sub.live = False
            if res.records or res.next_from_seq > cur:
                self.dirty.add(topic)  # more backlog; a read that made no progress waits
                # for the next head poll instead of spinning
        elif not sub.live:
            sub.live = True
            data = jsoncodec.dumps({"topic": topic, "head_seq": head.head_seq})
            yield WatchEvent("caught-up", data, self._id(), topic)

    def close(self) -> None:
        self.running = False
        for topic, sub in self.subs.items():
            self._stop_waiter(topic, sub)


class _StreamRun(TopicFeed):
    """One open SSE stream of a stored session: composite-cursor ids, heartbeats, and the
    session's cursors saved as it goes (and when it closes)."""

    follows_recreate = True

    def __init__(self, owner: WatchEngine, session: OpenSession) -> None:
        super().__init__(owner.engine, heartbeat_ms=session.spec.heartbeat_ms)
        self.owner = owner
        self.spec = session.spec
        self.wid = session.item.wid
        self.ttl_ms = session.item.ttl_ms
        self.spec_epochs = {t.topic: t.epoch for t in self.spec.topics}
        for t in self.spec.topics:
            if t.topic in session.start:
                epoch = session.epochs.get(t.topic, t.epoch)
                self.subscribe(t.topic, session.start[t.topic], epoch, self.spec)
        self.deleted_before = session.deleted  # dropped from the session on an earlier stream
        self.saved_state = session.item.cursors
        self.unsaved = False
        self.saving: asyncio.Future[bool] | None = None
        self.saving_state = self.saved_state
        self.last_save = time.monotonic()
        self.touch_s = min(self.ttl_ms / 3000, 60.0)

    def _id(self) -> str:
        return encode_cursor_map(self.cursors)

    def _id_after(self, topic: str, seq: int) -> str:
        return encode_cursor_map({**self.cursors, topic: seq})

    def _state(self) -> str:
        deleted = set(self.deleted_before) | {t for t, s in self.subs.items() if s.deleted}
        epochs = {t: s.epoch for t, s in self.subs.items() if s.epoch != self.spec_epochs.get(t)}
        return _session_state(self.cursors, deleted, epochs)

    async def _checkpoint(self) -> WatchEvent | None:
        # Cursor saves never hold up delivery: one runs on the engine's pool at a time, and
        # its outcome is read at a later checkpoint (a False means the session is gone).
        fut = self.saving
        if fut is not None:
            if not fut.done():
                return None
            self.saving = None
            if fut.cancelled() or fut.exception() is not None:
                _log_failure(fut)
            elif not fut.result():
                return WatchEvent(
                    "error",
                    b'{"code":410,"error":"watch session expired; POST /v0/watch again"}',
                )
            else:
                self.saved_state = self.saving_state
        now = time.monotonic()
        state = self._state()
        self.unsaved = state != self.saved_state
        if (self.unsaved and now - self.last_save >= SAVE_INTERVAL_S) or (
            now - self.last_save >= self.touch_s
        ):
            self.last_save = now
            self.saving_state = state
            self.saving = self._save(state)
            self.saving.add_done_callback(lambda _: self.wake.set())
        return None

    def _save(self, state: str) -> asyncio.Future[bool]:
        return self.engine.submit_io(
            self.owner.sessions.save_cursors, self.wid, state, wall_ms(), self.ttl_ms
        )

    def _checkpoint_deadline(self) -> float:
        if self.saving is not None and not self.saving.done():
            # A save in flight wakes the loop when it ends: no deadline until then (one
            # already past would make the loop spin on the event loop, starving every other
            # stream and request while the storage pool is slow: issue 42's soak).
            return math.inf
        deadline = self.last_save + self.touch_s
        if self.unsaved:
            deadline = min(deadline, self.last_save + SAVE_INTERVAL_S)
        return deadline

    def close(self) -> None:
        super().close()
        state = self._state()
        # The stream may be closing under cancellation (client gone): the final cursor write
        # is not awaited. It starts after a save still in flight, so it lands last.
        pending = self.saving
        if pending is not None and not pending.done():
            pending.add_done_callback(lambda _: self._final_save(state))
        else:
            self._final_save(state)

    def _final_save(self, state: str) -> None:
        try:
            self._save(state).add_done_callback(_log_failure)
        except RuntimeError:  # the engine is shutting down: DynamoDB's TTL still applies
            log.warning("watch session %s closed during shutdown; cursors not saved", self.wid)


def _log_failure(fut: asyncio.Future[bool]) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.warning("watch session cursor save failed", exc_info=fut.exception())
