"""Records and frames. A frame is the unit of commit: the records of one group commit with
contiguous seqs, packed into one DynamoDB item (or one S3 object when large).

Payloads stay JSON text end to end: a record's `data` and `meta` are serialized once when
the append is parsed, stored as raw UTF-8 JSON inside the frame, and spliced verbatim into
read responses. Reads never decode and re-encode payloads.

Frame body layout (format 3 = raw, 4 = zlib of the same), one entry per record:
    <IIIII  data_len, meta_len, node_len, tag_len (NONE = 0xFFFFFFFF: absent), size
    data bytes, meta bytes, node bytes, tag bytes
node and tag are stored as JSON string literals (quotes included), ready to splice."""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from headwater import jsoncodec

FRAME_FORMAT_RAW = 3
FRAME_FORMAT_ZLIB = 4
# A DynamoDB item is billed per KB started: a 1 KB record's frame item (~1.1 KB raw, ~0.9
# KB deflated) is 1 write unit deflated and 2 raw. Deflating 1 KB costs ~0.07 ms of CPU.
_COMPRESS_OVER = 512
COMPRESS_SAMPLE = 8 << 10  # bytes zlib tries before a large body (incompressible())
_ENTRY = struct.Struct("<IIIII")
_NONE = 0xFFFFFFFF

# Bytes of framing charged per record in count/bytes accounting (seq, ts, lengths).
RECORD_OVERHEAD_BYTES = 16

_encode_json_str = json.encoder.encode_basestring  # C-accelerated, non-ASCII kept


def json_literal(text: str) -> bytes:
    return _encode_json_str(text).encode()


@dataclass(frozen=True, slots=True)
class NewRecord:
    """A record as written. `data_raw`/`meta_raw` carry the JSON text when the caller has
    already serialized it (the HTTP layer does, to measure sizes); otherwise it is made here."""

    data: Any
    node: str | None = None
    tag: str | None = None
    meta: dict[str, Any] | None = None
    size: int = 0  # accounted bytes: encoded data + meta + tag + node + framing
    data_raw: bytes | None = None
    meta_raw: bytes | None = None

    def raw_data(self) -> bytes:
        return self.data_raw if self.data_raw is not None else jsoncodec.dumps(self.data)

    def raw_meta(self) -> bytes | None:
        if self.meta is None:
            return None
        return self.meta_raw if self.meta_raw is not None else jsoncodec.dumps(self.meta)


class StoredRecord(NamedTuple):
    """A record as stored. A NamedTuple rather than a frozen dataclass: sealed reads build
    one per record decoded, and tuple construction is several times cheaper."""

    seq: int
    ts: int
    data_raw: bytes
    node_json: bytes | None  # JSON string literal
    tag_json: bytes | None
    meta_raw: bytes | None
    size: int

    @property
    def data(self) -> Any:
        return json.loads(self.data_raw)

    @property
    def meta(self) -> Any:
        return None if self.meta_raw is None else json.loads(self.meta_raw)

    @property
    def node(self) -> str | None:
        return None if self.node_json is None else str(json.loads(self.node_json))

    @property
    def tag(self) -> str | None:
        return None if self.tag_json is None else str(json.loads(self.tag_json))

    def render(self, include_tags: bool, include_meta: bool) -> bytes:
        """The record as the JSON object every read surface returns ($-metadata first)."""
        seq, ts, data, node, tag, meta, _ = self
        out = b'{"$seq":%d,"$ts":%d' % (seq, ts)
        if node is not None:
            out += b',"$node":' + node
        if include_tags and tag is not None:
            out += b',"$tag":' + tag
        out += b',"data":' + data
        if include_meta and meta is not None:
            out += b',"meta":' + meta
        return out + b"}"


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
    hole: bool = False  # seqs reserved that no append committed: no records
    void_bytes: int = 0  # a hole's reserved payload bytes, when its writer left it


def encoded_size(data_raw: bytes, meta_raw: bytes | None, tag: str | None, node: str | None) -> int:
    return (
        len(data_raw)
        + (len(meta_raw) if meta_raw else 0)
        + (len(tag.encode()) if tag else 0)
        + (len(node.encode()) if node else 0)
        + RECORD_OVERHEAD_BYTES
    )


def stored(rec: NewRecord, seq: int, ts: int) -> StoredRecord:
    return StoredRecord(
        seq,
        ts,
        rec.raw_data(),
        None if rec.node is None else json_literal(rec.node),
        None if rec.tag is None else json_literal(rec.tag),
        rec.raw_meta(),
        rec.size,
    )


def encode_records(records: list[NewRecord]) -> bytes:
    pack = _ENTRY.pack
    chunks: list[bytes] = []
    for r in records:
        data = r.raw_data()
        meta = r.raw_meta()
        node = None if r.node is None else json_literal(r.node)
        tag = None if r.tag is None else json_literal(r.tag)
        chunks.append(
            pack(
                len(data),
                _NONE if meta is None else len(meta),
                _NONE if node is None else len(node),
                _NONE if tag is None else len(tag),
                r.size,
            )
        )
        chunks.append(data)
        if meta is not None:
            chunks.append(meta)
        if node is not None:
            chunks.append(node)
        if tag is not None:
            chunks.append(tag)
    return bytes([FRAME_FORMAT_RAW]) + b"".join(chunks)


def incompressible(data: bytes | memoryview) -> bool:
    """Whether a sample of `data` (its first 8 KiB) fails to shrink by 10% under zlib level 1:
    already-compressed or encrypted payloads. Deflating those costs ~16 ms of CPU per MiB, at
    any level, and saves nothing; the sample costs ~0.04 ms."""
    sample = memoryview(data)[:COMPRESS_SAMPLE]
    return len(zlib.compress(sample, 1)) > len(sample) * 0.9


def compress_frame(blob: bytes) -> bytes:
    """zlib a raw frame over 512 bytes when that saves at least 10%. Worth it for frames
    stored in DynamoDB items (billed per KB started); frames spilled to S3 are stored raw
    (a PUT costs the same at any size, and zlib costs ~20 ms of CPU per MB). A frame whose
    first 8 KiB do not compress is not tried whole."""
    if blob[0] != FRAME_FORMAT_RAW or len(blob) <= _COMPRESS_OVER:
        return blob
    body = memoryview(blob)[1:]
    if len(body) > COMPRESS_SAMPLE and incompressible(body):
        return blob
    packed = zlib.compress(body, 1)
    if len(packed) < (len(blob) - 1) * 0.9:
        return bytes([FRAME_FORMAT_ZLIB]) + packed
    return blob


def decode_records(blob: bytes, first_seq: int, ts: int) -> list[StoredRecord]:
    if not blob:
        raise ValueError("empty frame blob")
    fmt = blob[0]
    if fmt == FRAME_FORMAT_ZLIB:
        body, pos = zlib.decompress(memoryview(blob)[1:]), 0
    elif fmt == FRAME_FORMAT_RAW:
        body, pos = blob, 1  # read in place: each field is copied once, by its slice
    else:
        raise ValueError(f"unknown frame format {fmt}")
    unpack = _ENTRY.unpack_from
    head = _ENTRY.size
    new, rec = tuple.__new__, StoredRecord  # NamedTuple.__new__ is a Python-level call
    out: list[StoredRecord] = []
    seq = first_seq
    end = len(body)
    while pos < end:
        dlen, mlen, nlen, tlen, size = unpack(body, pos)
        pos += head
        data = body[pos : pos + dlen]
        pos += dlen
        meta = None
        if mlen != _NONE:
            meta = body[pos : pos + mlen]
            pos += mlen
        node = None
        if nlen != _NONE:
            node = body[pos : pos + nlen]
            pos += nlen
        tag = None
        if tlen != _NONE:
            tag = body[pos : pos + tlen]
            pos += tlen
        out.append(new(rec, (seq, ts, data, node, tag, meta, size)))
        seq += 1
    if pos != end:
        raise ValueError("truncated frame")
    return out
