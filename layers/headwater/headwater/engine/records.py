"""Records and frames. A frame is the unit of commit: the records of one group commit with
contiguous seqs, packed into one DynamoDB item (or one S3 object when large)."""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from typing import Any

FRAME_FORMAT_RAW = 1
FRAME_FORMAT_ZLIB = 2
_COMPRESS_OVER = 2048

# Bytes of framing charged per record in count/bytes accounting (seq, ts, lengths).
RECORD_OVERHEAD_BYTES = 16


@dataclass(frozen=True, slots=True)
class NewRecord:
    """A record as written: data is the parsed JSON value (stored verbatim)."""

    data: Any
    node: str | None = None
    tag: str | None = None
    meta: dict[str, Any] | None = None
    size: int = 0  # accounted bytes: encoded data + meta + tag + node + framing


@dataclass(frozen=True, slots=True)
class StoredRecord:
    seq: int
    ts: int
    data: Any
    node: str | None
    tag: str | None
    meta: dict[str, Any] | None
    size: int


@dataclass(slots=True)
class Frame:
    """Decoded frame. `deleted` is the set of seqs removed by record deletes."""

    first_seq: int
    last_seq: int
    ts: int
    records: list[StoredRecord]
    deleted: frozenset[int] = field(default_factory=frozenset)
    deleted_count: int = 0
    deleted_bytes: int = 0
    payload_bytes: int = 0


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def encoded_size(data_json: str, meta_json: str | None, tag: str | None, node: str | None) -> int:
    return (
        len(data_json.encode())
        + (len(meta_json.encode()) if meta_json else 0)
        + (len(tag.encode()) if tag else 0)
        + (len(node.encode()) if node else 0)
        + RECORD_OVERHEAD_BYTES
    )


def encode_records(records: list[NewRecord]) -> bytes:
    rows = [[r.data, r.node, r.tag, r.meta, r.size] for r in records]
    raw = _dumps(rows).encode()
    if len(raw) > _COMPRESS_OVER:
        return bytes([FRAME_FORMAT_ZLIB]) + zlib.compress(raw, 1)
    return bytes([FRAME_FORMAT_RAW]) + raw


def decode_records(blob: bytes, first_seq: int, ts: int) -> list[StoredRecord]:
    if not blob:
        raise ValueError("empty frame blob")
    fmt, body = blob[0], blob[1:]
    if fmt == FRAME_FORMAT_ZLIB:
        body = zlib.decompress(body)
    elif fmt != FRAME_FORMAT_RAW:
        raise ValueError(f"unknown frame format {fmt}")
    rows = json.loads(body)
    return [
        StoredRecord(first_seq + i, ts, row[0], row[1], row[2], row[3], row[4])
        for i, row in enumerate(rows)
    ]
