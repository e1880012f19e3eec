"""/v0/ws on an API Gateway WebSocket API: the stored side of a connection.

Under uvicorn a connection is a process-local socket with a TopicFeed loop (http/ws.py). On
API Gateway every message is its own Lambda invocation (functions/ws) and nothing stays
in memory between them, so:

- `StoredSubscriptions` is the `ws.commands.Subscriptions` port backed by DynamoDB (one
  subscription item per topic and connection, plus the topic list on the connection item);
- `Delivery` pushes a subscription's backlog from its stored cursor to the head with
  TopicFeed's own per-topic read (same frames, tombstones, caught-up and topic-deleted
  rules as the socket), posts each frame to the connection, then advances the cursor with a
  conditional write. functions/ws runs it right after `subscribed`; the forwarder
  (functions/forwarder) runs it for every topic that gets a new log frame.

Delivery guarantee: at least once, without gaps. A frame is posted before the cursor moves
past it, and a delivery always starts from a stored cursor, so a delivery that fails after
posting (or races another: the forwarder and a subscribe's backlog, a stream retry) posts
those records again; the cursor write is conditional (`cur` = the value read, and the same
subscription), so it moves once and the loser stops. Every record frame carries `from_seq`
/ `to_seq`: a client that drops records at or below the last `$seq` it processed sees each
record once, in order."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import secrets
import time
from dataclasses import dataclass
from typing import Any

from headwater import jsoncodec
from headwater.engine import LogEngine, Quotas, TopicFeed, WatchSpec
from headwater.engine.ports.ws import ConnectionGone, Poster, WsConnection, WsStore, WsSubscription
from headwater.errors import HeadwaterError, PayloadTooLarge
from headwater.ws.frames import error_frame, event_frame

# The connection side ($connect, $disconnect) lives in ws/gate.py, without the engine; its
# names are this module's too.
from headwater.ws.gate import (
    CONNECTION_TTL_S,
    drop_connection,
    new_connection,
    now_s,
    principal_of,
)

__all__ = [
    "CONNECTION_TTL_S",
    "MAX_BATCH_BYTES",
    "MAX_MESSAGE_BYTES",
    "Delivered",
    "Delivery",
    "StoredSubscriptions",
    "drop_connection",
    "fit_message",
    "new_connection",
    "now_s",
    "principal_of",
]

log = logging.getLogger(__name__)

# API Gateway's WebSocket message limit (post_to_connection refuses more).
MAX_MESSAGE_BYTES = 128 * 1024
# Record batches are read at most this big, so a frame normally fits one message; a frame
# that still does not fit is split (`fit_message`).
MAX_BATCH_BYTES = 120 * 1024
DELIVERY_CONCURRENCY = 16  # subscriptions of one topic delivered at once


class StoredSubscriptions:
    """commands.Subscriptions for one API Gateway connection. `subscribe` stores the
    subscription at its initial position (`added` lists them, for the backlog delivery that
    follows the command); `unsubscribe` removes it before the reply is sent."""

    def __init__(self, store: WsStore, conn: WsConnection) -> None:
        self.store = store
        self.conn = conn
        self.topics = set(conn.topics)
        self.added: list[WsSubscription] = []

    def subscribe(self, topic: str, from_seq: int, epoch: int, opts: WatchSpec) -> None:
        sub = WsSubscription(
            topic=topic,
            connection_id=self.conn.connection_id,
            endpoint=self.conn.endpoint,
            cursor=from_seq,
            epoch=epoch,
            opts=dataclasses.replace(opts, topics=()).to_json(),
            gen=secrets.token_hex(8),
            live=False,
            fresh=True,
            expires_s=self.conn.expires_s,
        )
        self.store.put_subscription(sub)  # replaces an earlier subscription of the topic
        if not self.store.add_topic(self.conn.connection_id, topic):
            # $disconnect ran meanwhile: it could not see this topic, so remove it here.
            self.store.delete_subscription(topic, self.conn.connection_id, sub.gen)
            raise HeadwaterError("the connection has closed", code="connection_closed", status=410)
        self.topics.add(topic)
        self.added = [s for s in self.added if s.topic != topic] + [sub]

    def unsubscribe(self, topic: str) -> bool:
        removed = self.store.delete_subscription(topic, self.conn.connection_id)
        if topic in self.topics or removed:
            self.store.remove_topic(self.conn.connection_id, topic)
        self.topics.discard(topic)
        self.added = [s for s in self.added if s.topic != topic]
        return removed

    def active_topics(self) -> list[str]:
        return sorted(self.topics)


@dataclass(frozen=True, slots=True)
class Delivered:
    frames: int = 0
    # A later frame at or below this seq needs no delivery to this subscription (None: the
    # subscription is over). After a lost cursor race, the cursor this delivery started at.
    through: int | None = None
    gone: bool = False
    raced: bool = False  # another delivery moved the cursor first


def fit_message(frame: bytes, limit: int = MAX_MESSAGE_BYTES) -> list[bytes]:
    """`frame` as messages of at most `limit` bytes: itself if it fits; a record frame is
    split into record frames with contiguous from_seq/to_seq; a single record that cannot
    fit becomes a `payload_too_large` error frame naming its seqs (read it with
    POST /v0/topics/:topic/diff), so the subscription moves on instead of stalling."""
    if len(frame) <= limit:
        return [frame]
    body: dict[str, Any] = jsoncodec.loads(frame)
    if body.get("op") != "record":
        err = PayloadTooLarge(
            f"a {body.get('op')} frame exceeds API Gateway's message limit",
            detail={"max_bytes": limit},
        )
        return [error_frame(None, err)]
    topic, records = body["topic"], body["records"]
    room = limit - 64  # a part's envelope may have longer seq numbers than the original's
    out: list[bytes] = []
    start, size = int(body["from_seq"]), 0
    chunk: list[dict[str, Any]] = []
    overhead = len(frame) - sum(len(jsoncodec.dumps(r)) + 1 for r in records)

    def flush(to_seq: int) -> None:
        nonlocal start, chunk, size
        if chunk:
            part = {**body, "records": chunk, "from_seq": start, "to_seq": to_seq}
            out.append(jsoncodec.dumps(part))
        start, chunk, size = to_seq, [], 0

    for rec in records:
        encoded = len(jsoncodec.dumps(rec)) + 1
        seq = int(rec["$seq"])
        if overhead + encoded > room:
            flush(seq - 1)
            err = PayloadTooLarge(
                f"record {seq} of {topic!r} exceeds API Gateway's message limit; "
                "read it with POST /v0/topics/:topic/diff",
                detail={"topic": topic, "from_seq": seq - 1, "to_seq": seq, "max_bytes": limit},
            )
            out.append(error_frame(None, err))
            start = seq
            continue
        if chunk and overhead + size + encoded > room:
            flush(int(chunk[-1]["$seq"]))
        chunk.append(rec)
        size += encoded
    flush(int(body["to_seq"]))
    return out


class Delivery:
    def __init__(
        self,
        engine: LogEngine,
        store: WsStore,
        poster: Poster,
        quotas: Quotas | None = None,
    ) -> None:
        self.engine = engine
        self.store = store
        self.poster = poster
        self.quotas = quotas

    async def post(self, endpoint: str, connection_id: str, frame: bytes) -> None:
        for message in fit_message(frame):
            await asyncio.to_thread(self.poster.post, endpoint, connection_id, message)

    def drop_connection(self, connection_id: str) -> WsConnection | None:
        """gate.drop_connection over this delivery's store and quotas."""
        return drop_connection(self.store, self.quotas, connection_id)

    async def deliver(self, sub: WsSubscription, deadline: float) -> Delivered:
        """Post the subscription's frames from its stored cursor towards the head (until
        caught up, or the monotonic `deadline`), then advance the cursor conditionally."""
        feed = TopicFeed(self.engine)
        opts = WatchSpec.from_json(sub.opts)
        opts = dataclasses.replace(opts, max_batch_bytes=min(opts.max_batch_bytes, MAX_BATCH_BYTES))
        feed.restore(sub.topic, sub.cursor, sub.epoch, opts, live=sub.live, fresh=sub.fresh)
        frames = 0
        failure: BaseException | None = None
        try:
            while True:
                async for event in feed.read_once(sub.topic):
                    frame = event_frame(event)
                    if frame is not None:
                        await self.post(sub.endpoint, sub.connection_id, frame)
                        frames += 1
                pos = feed.position(sub.topic)
                if pos is None or not pos.pending or time.monotonic() >= deadline:
                    break
        except ConnectionGone:
            await asyncio.to_thread(self.drop_connection, sub.connection_id)
            return Delivered(frames, None, gone=True)
        except Exception as exc:  # keep what was posted, then fail
            failure = exc
        pos = feed.position(sub.topic)
        through: int | None = None
        if pos is not None:
            moved = (pos.cursor, pos.live, pos.fresh) != (sub.cursor, sub.live, sub.fresh)
            if pos.deleted:
                # topic_deleted ends the subscription (a recreated topic needs a new one)
                await asyncio.to_thread(self._end, sub)
            elif moved:
                won = await asyncio.to_thread(
                    self.store.advance, sub, pos.cursor, pos.live, pos.fresh
                )
                if not won:
                    if failure is not None:
                        raise failure
                    return Delivered(frames, sub.cursor, raced=True)
                through = pos.cursor
            else:
                through = pos.cursor
        if failure is not None:
            raise failure
        return Delivered(frames, through)

    def _end(self, sub: WsSubscription) -> None:
        if self.store.delete_subscription(sub.topic, sub.connection_id, sub.gen):
            self.store.remove_topic(sub.connection_id, sub.topic)

    async def deliver_topic(self, topic: str, deadline: float) -> tuple[list[Delivered], int]:
        """Deliver every subscription of `topic`. Returns the outcomes and the lowest
        cursor any subscription was left at by this call (the head when all caught up;
        a large number when there was nothing to track). Raises the first failure after
        every subscription had its turn."""
        subs = await asyncio.to_thread(self.store.subscriptions, topic, now_s())
        gate = asyncio.Semaphore(DELIVERY_CONCURRENCY)

        async def one(sub: WsSubscription) -> Delivered:
            async with gate:
                return await self.deliver(sub, deadline)

        results = await asyncio.gather(*(one(s) for s in subs), return_exceptions=True)
        done: list[Delivered] = []
        failure: BaseException | None = None
        for r in results:
            if isinstance(r, BaseException):
                failure = failure or r
            else:
                done.append(r)
        if failure is not None:
            raise failure
        through = min((d.through for d in done if d.through is not None), default=1 << 62)
        return done, through
