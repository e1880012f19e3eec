"""A Durable Streams stream's own state, kept as JSON in its topic head's `ext` attribute.

Changed only through the engine's guarded appends and conditional ext puts, so every check
against it (closed, Stream-Seq order, producer epochs and seqs) and the write it allows are
one atomic DynamoDB transaction, across any number of processes."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from headwater.storage.ports import Head

TOPIC_PREFIX = "~ds/"  # no /v0 topic name can start with "~": the namespaces never meet
MAX_NAME_BYTES = 1024
MAX_PRODUCERS = 4096  # per stream; the least recently used is forgotten past this


@dataclass(frozen=True, slots=True)
class StreamState:
    content_type: str
    created_ms: int
    ttl_ms: int = 0  # sliding idle window (0: none)
    expires_ms: int = 0  # absolute expiry (0: none)
    expires_text: str = ""  # Stream-Expires-At as the client gave it
    access_ms: int = 0  # last append or close (reads are in the head's last_read_ts)
    closed: bool = False
    stream_seq: str | None = None  # last accepted Stream-Seq
    producers: dict[str, tuple[int, int]] = field(default_factory=dict)  # id -> (epoch, seq)
    profile: dict[str, Any] | None = None

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
        )

    def with_producer(self, pid: str, epoch: int, seq: int) -> StreamState:
        producers = dict(self.producers)
        producers.pop(pid, None)  # re-inserted last: dict order is recency
        producers[pid] = (epoch, seq)
        while len(producers) > MAX_PRODUCERS:
            producers.pop(next(iter(producers)))
        return replace(self, producers=producers)

    def last_access(self, head: Head) -> int:
        return max(self.created_ms, self.access_ms, head.last_read_ts or 0)

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
