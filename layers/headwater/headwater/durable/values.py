"""The values Durable Streams' parts and its HTTP surface pass each other: entries, a
create's configuration and fork request, what a write did, and a stream's listing entry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from headwater import jsoncodec
from headwater.durable.offsets import Offset, StartOfStream, encode_offset
from headwater.durable.state import StreamState, name_of
from headwater.durable.wire import media_type
from headwater.engine import RECORD_OVERHEAD_BYTES, NewRecord, StoredRecord
from headwater.engine.ports import Head, SegmentItem
from headwater.errors import InvalidRequest

MAX_KEY_BYTES = 256  # a routing key derived from an entry, as http.v1 caps Stream-Key


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


def check_derived_key(key: str) -> None:
    """A routing key taken from an entry is held to a Stream-Key header's rules: it is
    stored as the record's tag (a DynamoDB key), so a lone surrogate or an oversized key
    would only fail in storage."""
    if not jsoncodec.is_scalar_text(key):
        raise InvalidRequest("the entry's routing key is not valid Unicode text (lone surrogate)")
    if len(key.encode()) > MAX_KEY_BYTES:
        raise InvalidRequest(f"the entry's routing key is over {MAX_KEY_BYTES} bytes")


def new_records(entries: list[Entry]) -> list[NewRecord]:
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
    (every record is charged its bytes plus RECORD_OVERHEAD_BYTES: new_records). Seqs reserved
    by an append that never committed count until a seal passes them, as in `count`."""
    return max(0, head.bytes - RECORD_OVERHEAD_BYTES * head.count)


def key_of(rec: StoredRecord) -> str | None:
    """The routing key an entry was written with (None: none)."""
    return None if rec.tag_json is None else str(jsoncodec.loads(rec.tag_json))


class SegmentPruner(Protocol):
    """What a stream's index families say of one of its sealed segments: the seqs in it that
    may be selected (a superset), or None when no usable companion answers it."""

    async def __call__(self, seg: SegmentItem) -> frozenset[int] | None: ...


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
