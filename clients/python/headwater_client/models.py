"""Typed results of the /v0 topics API (spec §1–§10) and of the /v1 Durable Streams reads.
Every result keeps the server's JSON in `raw` (the spec lets servers add fields; a client
that needs one before this module knows it finds it there)."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "AppendResult",
    "ClaimResult",
    "DeleteRecordsResult",
    "DeleteTopicResult",
    "DiffResult",
    "ExtendResult",
    "Job",
    "LeaseResult",
    "PutTopicResult",
    "QueueCounters",
    "Record",
    "SearchHit",
    "SearchResult",
    "StreamAppendResult",
    "StreamChunk",
    "StreamInfo",
    "Tombstone",
    "TopicPage",
    "TopicState",
    "TopicSummary",
    "WatchEvent",
    "WatchSession",
    "decode_cursor_map",
]


def _int(obj: dict[str, Any], name: str, default: int = 0) -> int:
    value = obj.get(name, default)
    return int(value) if value is not None else default


def _opt_str(obj: dict[str, Any], name: str) -> str | None:
    value = obj.get(name)
    return None if value is None else str(value)


@dataclass(frozen=True, slots=True)
class Record:
    """One record as every read surface returns it: `$seq`, `$ts`, `$node`, `$tag`, `data`,
    `meta`."""

    seq: int
    ts: int
    data: Any
    node: str | None = None
    tag: str | None = None
    meta: dict[str, Any] | None = None

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Record:
        meta = obj.get("meta")
        return cls(
            seq=int(obj["$seq"]),
            ts=_int(obj, "$ts"),
            data=obj.get("data"),
            node=_opt_str(obj, "$node"),
            tag=_opt_str(obj, "$tag"),
            meta=meta if isinstance(meta, dict) else None,
        )

    def to_json(self) -> dict[str, Any]:
        """The wire shape ($-metadata first), for printing as a JSON line."""
        out: dict[str, Any] = {"$seq": self.seq, "$ts": self.ts}
        if self.node is not None:
            out["$node"] = self.node
        if self.tag is not None:
            out["$tag"] = self.tag
        out["data"] = self.data
        if self.meta is not None:
            out["meta"] = self.meta
        return out


@dataclass(frozen=True, slots=True)
class QueueCounters:
    ready: int
    in_flight: int
    dead_lettered: int = 0


@dataclass(frozen=True, slots=True)
class TopicState:
    """`GET /v0/topics/:t` (§1.2)."""

    topic: str
    type: str
    head_seq: int
    earliest_seq: int
    next_seq: int
    count: int
    bytes: int
    config: dict[str, Any]
    effective_priority: int = 0
    last_write_ts: int | None = None
    last_read_ts: int | None = None
    queue: QueueCounters | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> TopicState:
        q = obj.get("queue")
        return cls(
            topic=str(obj["topic"]),
            type=str(obj.get("type", "log")),
            head_seq=_int(obj, "head_seq"),
            earliest_seq=_int(obj, "earliest_seq"),
            next_seq=_int(obj, "next_seq"),
            count=_int(obj, "count"),
            bytes=_int(obj, "bytes"),
            config=dict(obj.get("config") or {}),
            effective_priority=_int(obj, "effective_priority"),
            last_write_ts=obj.get("last_write_ts"),
            last_read_ts=obj.get("last_read_ts"),
            queue=(
                QueueCounters(_int(q, "ready"), _int(q, "in_flight"), _int(q, "dead_lettered"))
                if isinstance(q, dict)
                else None
            ),
            raw=obj,
        )


@dataclass(frozen=True, slots=True)
class TopicSummary:
    """One entry of `GET /v0/topics` (§1.3)."""

    topic: str
    head_seq: int
    earliest_seq: int
    count: int
    bytes: int
    durable: bool
    effective_priority: int = 0

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> TopicSummary:
        return cls(
            topic=str(obj["topic"]),
            head_seq=_int(obj, "head_seq"),
            earliest_seq=_int(obj, "earliest_seq"),
            count=_int(obj, "count"),
            bytes=_int(obj, "bytes"),
            durable=bool(obj.get("durable", False)),
            effective_priority=_int(obj, "effective_priority"),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "head_seq": self.head_seq,
            "earliest_seq": self.earliest_seq,
            "count": self.count,
            "bytes": self.bytes,
            "durable": self.durable,
            "effective_priority": self.effective_priority,
        }


@dataclass(frozen=True, slots=True)
class TopicPage:
    topics: list[TopicSummary]
    next_cursor: str | None

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> TopicPage:
        return cls(
            [TopicSummary.from_json(t) for t in obj.get("topics", [])],
            _opt_str(obj, "next_cursor"),
        )


@dataclass(frozen=True, slots=True)
class PutTopicResult:
    """`PUT /v0/topics/:t` (§1.1): `created` is False for an update or a no-op."""

    topic: str
    created: bool
    config: dict[str, Any]

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> PutTopicResult:
        return cls(str(obj["topic"]), bool(obj.get("created")), dict(obj.get("config") or {}))


@dataclass(frozen=True, slots=True)
class DeleteTopicResult:
    topic: str
    deleted: bool
    routers_removed: list[str]

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> DeleteTopicResult:
        return cls(
            str(obj["topic"]),
            bool(obj.get("deleted")),
            [str(r) for r in obj.get("routers_removed", [])],
        )


@dataclass(frozen=True, slots=True)
class AppendResult:
    """`POST /v0/topics/:t` (§2). `deduped` is True when the idempotency key had been seen:
    nothing was written and the seqs are those of the first append."""

    topic: str
    first_seq: int
    last_seq: int
    head_seq: int
    count: int
    created: bool
    deduped: bool
    seqs: list[int] | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> AppendResult:
        seqs = obj.get("seqs")
        return cls(
            topic=str(obj["topic"]),
            first_seq=_int(obj, "first_seq"),
            last_seq=_int(obj, "last_seq"),
            head_seq=_int(obj, "head_seq"),
            count=_int(obj, "count"),
            created=bool(obj.get("created")),
            deduped=bool(obj.get("deduped")),
            seqs=[int(s) for s in seqs] if isinstance(seqs, list) else None,
            raw=obj,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "head_seq": self.head_seq,
            "count": self.count,
            "created": self.created,
            "deduped": self.deduped,
        }


@dataclass(frozen=True, slots=True)
class Tombstone:
    """Records lost under a cursor (§3–§4, §7): `reason` is cap, ttl, mixed, recreated or
    from_seq_too_old."""

    reason: str
    gap_from: int
    gap_to: int
    earliest_seq: int
    head_seq: int
    missed_estimate: int | None = None
    topic: str | None = None

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Tombstone:
        missed = obj.get("missed_estimate")
        return cls(
            reason=str(obj.get("reason", "")),
            gap_from=_int(obj, "gap_from"),
            gap_to=_int(obj, "gap_to"),
            earliest_seq=_int(obj, "earliest_seq"),
            head_seq=_int(obj, "head_seq"),
            missed_estimate=int(missed) if missed is not None else None,
            topic=_opt_str(obj, "topic"),
        )


@dataclass(frozen=True, slots=True)
class DiffResult:
    """`POST /v0/topics/:t/diff` (§3–§4). Pass `next_from_seq` back as `from_seq`."""

    topic: str
    records: list[Record]
    next_from_seq: int
    head_seq: int
    earliest_seq: int
    caught_up: bool
    lag: int
    tombstone: Tombstone | None = None

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> DiffResult:
        tomb = obj.get("tombstone")
        return cls(
            topic=str(obj["topic"]),
            records=[Record.from_json(r) for r in obj.get("records", [])],
            next_from_seq=_int(obj, "next_from_seq"),
            head_seq=_int(obj, "head_seq"),
            earliest_seq=_int(obj, "earliest_seq"),
            caught_up=bool(obj.get("caught_up")),
            lag=_int(obj, "lag"),
            tombstone=Tombstone.from_json(tomb) if isinstance(tomb, dict) else None,
        )


@dataclass(frozen=True, slots=True)
class DeleteRecordsResult:
    topic: str
    deleted: int
    earliest_seq: int
    head_seq: int
    count: int
    bytes: int

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> DeleteRecordsResult:
        return cls(
            str(obj["topic"]),
            _int(obj, "deleted"),
            _int(obj, "earliest_seq"),
            _int(obj, "head_seq"),
            _int(obj, "count"),
            _int(obj, "bytes"),
        )


@dataclass(frozen=True, slots=True)
class WatchSession:
    """`POST /v0/watch` (§7.1): the session id and each topic's resolved start."""

    wid: str
    stream_url: str
    session_ttl_ms: int
    topics: dict[str, dict[str, int]]

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> WatchSession:
        return cls(
            str(obj["wid"]),
            str(obj.get("stream_url", f"/v0/watch/{obj['wid']}")),
            _int(obj, "session_ttl_ms"),
            {str(k): dict(v) for k, v in (obj.get("topics") or {}).items()},
        )


def decode_cursor_map(event_id: str | None) -> dict[str, int] | None:
    """A watch event id (§7.3: base64url JSON of topic -> seq) as a dict; None when the id is
    absent or opaque (the spec lets a server send an opaque checkpoint instead)."""
    if not event_id:
        return None
    try:
        raw = base64.urlsafe_b64decode(event_id + "=" * (-len(event_id) % 4))
        value = json.loads(raw)
    except (binascii.Error, ValueError):
        return None
    if not isinstance(value, dict):
        return None
    out: dict[str, int] = {}
    for k, v in value.items():
        if not isinstance(v, int) or isinstance(v, bool):
            return None
        out[str(k)] = v
    return out


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One data-bearing frame of a watch stream (§7.3–§7.5).

    kind: `record` (records of one topic, batched), `tombstone`, `caught-up`,
    `topic-deleted` or `error` (an advisory or terminal per-stream problem; `data["code"]`).
    `id` is the composite cursor after this frame: pass it back as `last_event_id`."""

    kind: str
    data: dict[str, Any]
    id: str | None = None
    topic: str | None = None
    records: list[Record] = field(default_factory=list)

    @classmethod
    def from_sse(cls, event: str, data: str, id: str | None) -> WatchEvent:
        try:
            body = json.loads(data) if data else {}
        except ValueError:
            body = {"raw": data}
        if not isinstance(body, dict):
            body = {"value": body}
        records = (
            [Record.from_json(r) for r in body.get("records", [])] if event == "record" else []
        )
        return cls(event or "message", body, id or None, _opt_str(body, "topic"), records)

    @property
    def cursors(self) -> dict[str, int] | None:
        return decode_cursor_map(self.id)

    @property
    def tombstone(self) -> Tombstone | None:
        return Tombstone.from_json(self.data) if self.kind == "tombstone" else None

    @property
    def code(self) -> int | None:
        code = self.data.get("code")
        return code if isinstance(code, int) else None


@dataclass(frozen=True, slots=True)
class Job:
    """One claimed job (§10.2): the record plus its lease."""

    topic: str
    seq: int
    ts: int
    data: Any
    lease_id: str
    deadline: int
    deliveries: int
    node: str | None = None
    tag: str | None = None
    meta: dict[str, Any] | None = None

    @classmethod
    def from_json(cls, obj: dict[str, Any], topic: str) -> Job:
        meta = obj.get("meta")
        return cls(
            topic=str(obj.get("topic", topic)),
            seq=int(obj["$seq"]),
            ts=_int(obj, "$ts"),
            data=obj.get("data"),
            lease_id=str(obj.get("lease_id", "")),
            deadline=_int(obj, "deadline"),
            deliveries=_int(obj, "deliveries", 1),
            node=_opt_str(obj, "$node"),
            tag=_opt_str(obj, "$tag"),
            meta=meta if isinstance(meta, dict) else None,
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"topic": self.topic, "$seq": self.seq, "$ts": self.ts}
        if self.node is not None:
            out["$node"] = self.node
        if self.tag is not None:
            out["$tag"] = self.tag
        out["data"] = self.data
        if self.meta is not None:
            out["meta"] = self.meta
        out.update(lease_id=self.lease_id, deadline=self.deadline, deliveries=self.deliveries)
        return out


@dataclass(frozen=True, slots=True)
class ClaimResult:
    topic: str
    jobs: list[Job]
    ready: int

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> ClaimResult:
        topic = str(obj["topic"])
        return cls(
            topic, [Job.from_json(j, topic) for j in obj.get("claimed", [])], _int(obj, "ready")
        )


@dataclass(frozen=True, slots=True)
class LeaseResult:
    """`ack` / `nack` (§10.4–§10.5): `done` jobs acked (or nacked); `skipped` seqs not held
    by this node (expired and re-claimed, never claimed, already acked)."""

    topic: str
    done: int
    skipped: list[int]
    ready: int
    in_flight: int

    @classmethod
    def from_json(cls, obj: dict[str, Any], verb: str) -> LeaseResult:
        return cls(
            str(obj["topic"]),
            _int(obj, verb),
            [int(s) for s in obj.get("skipped", [])],
            _int(obj, "ready"),
            _int(obj, "in_flight"),
        )


@dataclass(frozen=True, slots=True)
class ExtendResult:
    """`extend` (§10.6): the new absolute deadline (ms) per extended seq."""

    topic: str
    extended: int
    skipped: list[int]
    deadlines: dict[int, int]

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> ExtendResult:
        return cls(
            str(obj["topic"]),
            _int(obj, "extended"),
            [int(s) for s in obj.get("skipped", [])],
            {int(k): int(v) for k, v in (obj.get("deadlines") or {}).items()},
        )


# --- /v1 Durable Streams ---------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class StreamChunk:
    """One read of a Durable Stream: the entries after the requested offset. `items` is the
    decoded JSON array of a JSON stream (None for a byte stream); `data` the raw body.
    Resume from `next_offset`."""

    stream: str
    data: bytes
    items: list[Any] | None
    next_offset: str
    up_to_date: bool
    closed: bool
    cursor: str | None
    content_type: str


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """`HEAD /v1/stream/:name`."""

    stream: str
    content_type: str
    next_offset: str
    closed: bool


@dataclass(frozen=True, slots=True)
class StreamAppendResult:
    stream: str
    next_offset: str
    closed: bool
    created: bool | None = None  # set by create()


@dataclass(frozen=True, slots=True)
class SearchHit:
    offset: str
    score: float | None
    source: Any
    sort: list[Any]
    fields: dict[str, Any]

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> SearchHit:
        score = obj.get("score")
        return cls(
            str(obj.get("offset", "")),
            float(score) if isinstance(score, int | float) else None,
            obj.get("source"),
            list(obj.get("sort") or []),
            dict(obj.get("fields") or {}),
        )


@dataclass(frozen=True, slots=True)
class SearchResult:
    """`POST /v1/stream/:name/_search`. `total_relation` is "eq" on the complete last page
    and "gte" while a next page follows or when the search timed out; pass
    `next_search_after` back as `search_after` for the next page (until it is None)."""

    stream: str
    total: int
    total_relation: str
    hits: list[SearchHit]
    next_search_after: list[Any] | None
    timed_out: bool
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> SearchResult:
        total = obj.get("total") or {}
        nxt = obj.get("next_search_after")
        return cls(
            str(obj.get("stream", "")),
            _int(total, "value"),
            str(total.get("relation", "eq")),
            [SearchHit.from_json(h) for h in obj.get("hits", [])],
            list(nxt) if isinstance(nxt, list) else None,
            bool(obj.get("timed_out")),
            raw=obj,
        )
