"""Watch sessions' values (spec §7): a validated subscription (WatchSpec), where each topic
starts, the events a feed emits, and the composite cursor (the SSE id and
`Last-Event-ID`, one seq per topic). Shared by the watch engine (engine/watch.py), the
/v0 request language and the WebSocket wing."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from headwater.engine.ports import WatchSessionItem
from headwater.errors import InvalidRequest


@dataclass(frozen=True, slots=True)
class TopicWatch:
    """One topic of a watch, from its resolved start, in the incarnation it was resolved in."""

    topic: str
    from_seq: int  # resolved initial position (tail resolved to the head at POST time)
    epoch: int


@dataclass(frozen=True, slots=True)
class WatchSpec:
    """A validated subscription (POST /v0/watch, a WebSocket subscribe): its topics and
    what each event carries. Stored as JSON with its session."""

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
    """Where a watch asks one topic to start: after a seq, or at the tail."""

    from_seq: int = 0
    tail: bool = False


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One event of a watch stream (an SSE frame, a WebSocket message)."""

    name: str  # record | tombstone | caught-up | topic-deleted | error | heartbeat
    data: bytes = b""
    id: str | None = None  # composite cursor; only on data-bearing SSE frames
    topic: str | None = None  # the topic a per-topic event is about


@dataclass(frozen=True, slots=True)
class FeedPosition:
    """Where one topic's subscription on a TopicFeed stands after a read."""

    cursor: int
    live: bool  # caught-up sent, no backlog since
    fresh: bool  # never read yet
    deleted: bool  # topic-deleted sent: the subscription is over
    pending: bool  # a read left more backlog behind


@dataclass(frozen=True, slots=True)
class OpenSession:
    """A watch session being streamed: its stored item, spec, where each live topic
    starts, and the topics already deleted."""

    item: WatchSessionItem
    spec: WatchSpec
    start: dict[str, int]  # where this stream begins, per live topic
    deleted: frozenset[str]
    epochs: dict[str, int] = field(default_factory=dict)  # followed into a recreated topic


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
