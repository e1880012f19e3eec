"""A Durable Streams stream's own state, kept as JSON in its topic head's `ext` attribute.

Changed only through the engine's guarded appends and conditional ext puts, so every check
against it (closed, Stream-Seq order, producer epochs and seqs) and the write it allows are
one atomic DynamoDB transaction, across any number of processes."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from headwater.engine.ports import Head

TOPIC_PREFIX = "~ds/"  # no /v0 topic name can start with "~": the namespaces never meet
MAX_NAME_BYTES = 1024
MAX_PRODUCERS = 4096  # per stream; the least recently used is forgotten past this


@dataclass(frozen=True, slots=True)
class Fork:
    """Where a fork's entries up to `at` come from: stream `src` (incarnation `src_epoch`).

    Offsets are shared along the chain: the fork's own entries continue the source's seqs
    after `at`. `lineage` is every ancestor's (epoch, last seq this fork inherits from it),
    so an offset an ancestor handed out before the fork point reads the same entries here."""

    src: str
    src_epoch: int
    at: int
    off: int = 0  # Stream-Fork-Offset as a seq (at differs with a JSON sub-offset)
    sub: int = 0  # Stream-Fork-Sub-Offset as given (0: none), for idempotent re-creates
    lineage: tuple[tuple[int, int], ...] = ()

    def dump(self) -> dict[str, Any]:
        return {
            "src": self.src,
            "se": self.src_epoch,
            "at": self.at,
            "off": self.off,
            "sub": self.sub,
            "lin": [list(p) for p in self.lineage],
        }

    @staticmethod
    def load(raw: dict[str, Any]) -> Fork:
        return Fork(
            src=str(raw["src"]),
            src_epoch=int(raw["se"]),
            at=int(raw["at"]),
            off=int(raw.get("off", raw["at"])),
            sub=int(raw.get("sub", 0)),
            lineage=tuple((int(e), int(s)) for e, s in raw.get("lin", ())),
        )

    def inherits(self, epoch: int, seq: int) -> bool:
        """Whether (epoch, seq), an offset of some ancestor, names a point this fork shares."""
        return any(epoch == e and seq <= last for e, last in self.lineage)


@dataclass(frozen=True, slots=True)
class StreamState:
    content_type: str
    created_ms: int
    ttl_ms: int = 0  # sliding idle window (0: none)
    expires_ms: int = 0  # absolute expiry (0: none)
    expires_text: str = ""  # Stream-Expires-At as the client gave it
    # last close (and, in streams written before 2026-12, last append): appends are in the
    # head's last_write_ts, reads in its last_read_ts, so an append leaves the ext as it is
    access_ms: int = 0
    closed: bool = False
    stream_seq: str | None = None  # last accepted Stream-Seq
    producers: dict[str, tuple[int, int]] = field(default_factory=dict)  # id -> (epoch, seq)
    profile: dict[str, Any] | None = None
    fork: Fork | None = None
    # The schema registry (durable/schema/) lives in S3, one immutable object per
    # revision; the head holds its key and current version (every append rewrites the head).
    registry_key: str = ""
    schema_version: int = 0
    refs: int = 0  # forks reading entries from this stream (it outlives its delete for them)
    # The state-protocol touch templates (durable/touch/): an immutable S3 object per
    # revision, like the registry. Not part of `conf`: templates do not shape appends.
    touch_key: str = ""
    gone: bool = False  # deleted while forks still read from it: 410 until the last goes

    def dump(self) -> str:
        body: dict[str, Any] = {"ct": self.content_type, "cr": self.created_ms}
        if self.ttl_ms:
            body["ttl"] = self.ttl_ms
        if self.expires_ms:
            body["exp"] = self.expires_ms
            body["ext"] = self.expires_text
        if self.access_ms:
            body["acc"] = self.access_ms
        if self.closed:
            body["closed"] = True
        if self.stream_seq is not None:
            body["sq"] = self.stream_seq
        if self.producers:
            body["pr"] = {k: list(v) for k, v in self.producers.items()}
        if self.profile is not None:
            body["prof"] = self.profile
        if self.fork is not None:
            body["fk"] = self.fork.dump()
        if self.registry_key:
            body["reg"] = [self.registry_key, self.schema_version]
        if self.refs:
            body["refs"] = self.refs
        if self.touch_key:
            body["tch"] = self.touch_key
        if self.gone:
            body["gone"] = True
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False)

    @staticmethod
    def load(text: str) -> StreamState:
        raw = json.loads(text)
        return StreamState(
            content_type=raw["ct"],
            created_ms=int(raw.get("cr", 0)),
            ttl_ms=int(raw.get("ttl", 0)),
            expires_ms=int(raw.get("exp", 0)),
            expires_text=str(raw.get("ext", "")),
            access_ms=int(raw.get("acc", 0)),
            closed=bool(raw.get("closed", False)),
            stream_seq=raw.get("sq"),
            producers={k: (int(v[0]), int(v[1])) for k, v in raw.get("pr", {}).items()},
            profile=raw.get("prof"),
            fork=Fork.load(raw["fk"]) if "fk" in raw else None,
            registry_key=str(raw["reg"][0]) if "reg" in raw else "",
            schema_version=int(raw["reg"][1]) if "reg" in raw else 0,
            refs=int(raw.get("refs", 0)),
            touch_key=str(raw.get("tch", "")),
            gone=bool(raw.get("gone", False)),
        )

    def with_producer(self, pid: str, epoch: int, seq: int) -> StreamState:
        producers = dict(self.producers)
        producers.pop(pid, None)  # re-inserted last: dict order is recency
        producers[pid] = (epoch, seq)
        while len(producers) > MAX_PRODUCERS:
            producers.pop(next(iter(producers)))
        return replace(self, producers=producers)

    def last_access(self, head: Head) -> int:
        return max(self.created_ms, self.access_ms, head.last_read_ts or 0, head.last_write_ts or 0)

    @property
    def conf(self) -> tuple[str, str]:
        """What shapes appends (registry revision, profile): an append prepared for one
        conf is refused by the guard under another, and prepared again."""
        return self.registry_key, json.dumps(self.profile, sort_keys=True) if self.profile else ""

    def held(self, head: Head, now: int) -> bool:
        """Deleted (or expired) but kept, because forks still read its entries."""
        return self.gone or (self.refs > 0 and self.expired(head, now))

    def expired(self, head: Head, now: int) -> bool:
        if self.expires_ms and now >= self.expires_ms:
            return True
        return bool(self.ttl_ms) and now >= self.last_access(head) + self.ttl_ms


def topic_of(name: str) -> str:
    return TOPIC_PREFIX + name


def name_of(topic: str) -> str:
    return topic[len(TOPIC_PREFIX) :]


def state_of(head: Head | None) -> StreamState | None:
    """The stream state of a live head (None: no stream, or not a stream's topic)."""
    if head is None or head.deleted or not head.ext:
        return None
    return StreamState.load(head.ext)
