"""The immutable S3 segment format: sealed log history packed into one object per segment.

Why this shape: S3 objects are immutable and cheap to range-GET, so a segment is a run of
individually zlib-compressed blocks plus an index (the footer) that maps seq ranges to byte
ranges. A reader that knows the index (kept in the segment's DynamoDB item, or fetched from
the footer with one range GET) fetches only the blocks it needs, coalescing adjacent blocks
into one GET. Record deletes are NOT stored here: an object cannot change after it is
written, so deleted seqs live in the segment's DynamoDB item and readers filter them.

Pure bytes in, bytes out; no I/O. Byte-exact layout: docs/segment-format.md."""

from __future__ import annotations

import struct
import zlib
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from headwater.engine.ports import COMPANION_SUFFIX, LEXICON_RUN_SUFFIX
from headwater.engine.records import COMPRESS_SAMPLE, StoredRecord, incompressible

SEGMENT_VERSION = 1
MAGIC = b"HWSEG\x00"
END_MAGIC = b"HWSEGEND"
INDEX_VERSION = 1
_HEAD = struct.Struct("<6sHHH")  # magic, version, flags, topic length (then topic, epoch)
_EPOCH = struct.Struct("<Q")
_TRAILER = struct.Struct("<QII8s")  # footer offset, footer length, footer crc32, magic
TRAILER_SIZE = _TRAILER.size  # 24
# Per record in a decompressed block: seq, ts, data/meta/node/tag lengths, size; then bytes.
_REC = struct.Struct("<QqIIIII")
_NONE = 0xFFFFFFFF  # length meaning "absent" (meta/node/tag)
_CRC = struct.Struct("<I")


class SegmentFormatError(ValueError):
    """A segment object, block or index is malformed, corrupt or of an unknown version."""


@dataclass(frozen=True, slots=True)
class BlockRef:
    """Where one compressed block of records sits in a segment object, its seq and time
    span, and its checksum."""

    first_seq: int
    last_seq: int
    offset: int  # byte offset of the stored block inside the object
    length: int  # stored (compressed) length in bytes
    records: int
    min_ts: int
    max_ts: int
    crc32: int  # of the stored bytes


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """A sealed segment: its topic incarnation, seq and time span, sizes and blocks."""

    topic: str
    epoch: int
    first_seq: int
    last_seq: int
    record_count: int
    payload_bytes: int  # sum of StoredRecord.size
    min_ts: int
    max_ts: int
    blocks: tuple[BlockRef, ...]


def _encode_header(topic: str, epoch: int) -> bytes:
    name = topic.encode()
    if len(name) > 0xFFFF or not 0 <= epoch < 1 << 64:
        raise SegmentFormatError("topic name too long or epoch out of range")
    return _HEAD.pack(MAGIC, SEGMENT_VERSION, 0, len(name)) + name + _EPOCH.pack(epoch)


def _decode_header(blob: bytes) -> tuple[str, int, int]:
    """(topic, epoch, header length)."""
    if len(blob) < _HEAD.size or blob[:6] != MAGIC:
        raise SegmentFormatError("not a Headwater segment (bad header magic)")
    _, version, _flags, tlen = _HEAD.unpack_from(blob)
    if version != SEGMENT_VERSION:
        raise SegmentFormatError(f"unknown segment version {version} (this reader knows 1)")
    end = _HEAD.size + tlen + _EPOCH.size
    if len(blob) < end:
        raise SegmentFormatError("truncated segment header")
    try:
        topic = blob[_HEAD.size : _HEAD.size + tlen].decode()
    except UnicodeDecodeError as e:
        raise SegmentFormatError("segment topic is not UTF-8") from e
    return topic, _EPOCH.unpack_from(blob, end - _EPOCH.size)[0], end


def _encode_record(r: StoredRecord) -> bytes:
    meta, node, tag = r.meta_raw, r.node_json, r.tag_json
    try:
        head = _REC.pack(
            r.seq,
            r.ts,
            len(r.data_raw),
            _NONE if meta is None else len(meta),
            _NONE if node is None else len(node),
            _NONE if tag is None else len(tag),
            r.size,
        )
    except struct.error as e:
        raise SegmentFormatError(f"record {r.seq}: field out of range ({e})") from e
    return b"".join([head, r.data_raw, meta or b"", node or b"", tag or b""])


def _deflate(raw: bytes) -> bytes:
    """A block's stored bytes: zlib level 6, or level 0 (zlib's stored blocks: a copy and a
    checksum, ~0.4 ms per MiB) when the block is larger than the sample and its first 8 KiB
    do not compress: sealing 1 MiB of already-compressed data cost ~17 ms of CPU to save
    nothing. Both are zlib streams; readers cannot tell them apart."""
    level = 0 if len(raw) > COMPRESS_SAMPLE and incompressible(raw) else 6
    return zlib.compress(raw, level)


def encode_segment(
    topic: str, epoch: int, records: Sequence[StoredRecord], *, block_bytes: int = 64 * 1024
) -> tuple[bytes, SegmentInfo]:
    """The whole object and its index. `records`: non-empty, strictly ascending seq (gaps
    allowed; ts arbitrary). A block closes once its raw size reaches `block_bytes`; a record
    at least `block_bytes` long gets a block of its own. Blocks are zlib level 6 each (level 0
    when they do not compress: _deflate)."""
    if not records:
        raise SegmentFormatError("a segment needs at least one record")
    if block_bytes < 1:
        raise SegmentFormatError("block_bytes must be positive")
    for a, b in pairwise(records):
        if b.seq <= a.seq:
            raise SegmentFormatError(f"seqs must be strictly ascending ({b.seq} after {a.seq})")
    chunks = [_encode_record(r) for r in records]
    cuts: list[tuple[int, int]] = []  # [start, end) record indexes of each block
    start = raw = 0
    for i, chunk in enumerate(chunks):
        if i > start and len(chunk) >= block_bytes:  # a big record gets its own block
            cuts.append((start, i))
            start, raw = i, 0
        raw += len(chunk)
        if raw >= block_bytes:
            cuts.append((start, i + 1))
            start, raw = i + 1, 0
    if start < len(chunks):
        cuts.append((start, len(chunks)))
    parts = [_encode_header(topic, epoch)]
    offset = len(parts[0])
    blocks: list[BlockRef] = []
    for lo, hi in cuts:
        stored = _deflate(b"".join(chunks[lo:hi]))
        ts = [r.ts for r in records[lo:hi]]
        first, last = records[lo].seq, records[hi - 1].seq
        crc = zlib.crc32(stored)
        blocks.append(BlockRef(first, last, offset, len(stored), hi - lo, min(ts), max(ts), crc))
        parts.append(stored)
        offset += len(stored)
    info = SegmentInfo(
        topic,
        epoch,
        records[0].seq,
        records[-1].seq,
        len(records),
        sum(r.size for r in records),
        min(b.min_ts for b in blocks),
        max(b.max_ts for b in blocks),
        tuple(blocks),
    )
    footer = encode_index(info)
    parts.append(footer)
    parts.append(_TRAILER.pack(offset, len(footer), zlib.crc32(footer), END_MAGIC))
    return b"".join(parts), info


def _put(out: bytearray, n: int) -> None:
    if n < 0:
        raise SegmentFormatError(f"negative value {n} where the index needs an unsigned one")
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _zz(n: int) -> int:
    return n * 2 if n >= 0 else -n * 2 - 1


def encode_index(info: SegmentInfo) -> bytes:
    """Compact footer / DynamoDB form of `info`: varints, seqs and ts as deltas. Layout in
    docs/segment-format.md."""
    out = bytearray([INDEX_VERSION])
    name = info.topic.encode()
    _put(out, len(name))
    out += name
    for v in (info.epoch, info.first_seq, info.last_seq - info.first_seq, info.record_count):
        _put(out, v)
    _put(out, info.payload_bytes)
    _put(out, _zz(info.min_ts))
    _put(out, info.max_ts - info.min_ts)
    _put(out, len(info.blocks))
    prev_last, prev_end = info.first_seq, 0
    for b in info.blocks:
        _put(out, b.first_seq - prev_last)
        _put(out, b.last_seq - b.first_seq)
        _put(out, b.offset - prev_end)
        _put(out, b.length)
        _put(out, b.records)
        _put(out, b.min_ts - info.min_ts)
        _put(out, b.max_ts - b.min_ts)
        out += _CRC.pack(b.crc32)
        prev_last, prev_end = b.last_seq, b.offset + b.length
    return bytes(out)


def decode_index(raw: bytes) -> SegmentInfo:
    pos = 1

    def get() -> int:
        nonlocal pos
        n = shift = 0
        while True:
            byte = raw[pos]
            pos += 1
            n |= (byte & 0x7F) << shift
            if byte < 0x80:
                return n
            shift += 7

    try:
        if raw[0] != INDEX_VERSION:
            raise SegmentFormatError(f"unknown segment index version {raw[0]}")
        tlen = get()
        if pos + tlen > len(raw):
            raise SegmentFormatError("truncated segment index")
        topic = raw[pos : pos + tlen].decode()
        pos += tlen
        epoch, first, span, count, payload = get(), get(), get(), get(), get()
        zmin = get()
        min_ts = zmin >> 1 if not zmin & 1 else -((zmin + 1) >> 1)
        max_ts = min_ts + get()
        blocks: list[BlockRef] = []
        prev_last, prev_end = first, 0
        for _ in range(get()):
            f = prev_last + get()
            last, off = f + get(), prev_end + get()
            length, nrec = get(), get()
            bmin = min_ts + get()
            bmax = bmin + get()
            (crc,) = _CRC.unpack_from(raw, pos)
            pos += 4
            blocks.append(BlockRef(f, last, off, length, nrec, bmin, bmax, crc))
            prev_last, prev_end = last, off + length
    except (IndexError, struct.error, UnicodeDecodeError) as e:
        raise SegmentFormatError(f"truncated or corrupt segment index: {e}") from e
    if pos != len(raw):
        raise SegmentFormatError("trailing bytes after segment index")
    return SegmentInfo(
        topic, epoch, first, first + span, count, payload, min_ts, max_ts, tuple(blocks)
    )


def read_trailer(tail: bytes) -> tuple[int, int]:
    """(footer_offset, footer_length) from the last TRAILER_SIZE bytes of `tail`."""
    if len(tail) < TRAILER_SIZE:
        raise SegmentFormatError(f"segment trailer needs {TRAILER_SIZE} bytes, got {len(tail)}")
    off, length, _crc, magic = _TRAILER.unpack_from(tail, len(tail) - TRAILER_SIZE)
    if magic != END_MAGIC:
        raise SegmentFormatError("not a Headwater segment (bad trailer magic)")
    return off, length


def decode_segment(blob: bytes) -> tuple[SegmentInfo, list[StoredRecord]]:
    """Decode a whole object, verifying the footer and every block crc (the Glue job)."""
    topic, epoch, head_len = _decode_header(blob)
    off, length = read_trailer(blob)
    if off + length + TRAILER_SIZE != len(blob) or off < head_len:
        raise SegmentFormatError("segment truncated or trailer offsets inconsistent")
    footer = blob[off : off + length]
    if zlib.crc32(footer) != _TRAILER.unpack_from(blob, len(blob) - TRAILER_SIZE)[2]:
        raise SegmentFormatError("segment footer crc mismatch")
    info = decode_index(footer)
    if (info.topic, info.epoch) != (topic, epoch):
        raise SegmentFormatError("segment header and footer disagree on topic/epoch")
    expect = head_len
    for b in info.blocks:
        if b.offset != expect:
            raise SegmentFormatError("segment blocks are not back to back")
        expect += b.length
    if expect != off:
        raise SegmentFormatError("segment blocks do not end at the footer")
    records = decode_blocks(blob, 0, info.blocks)
    if len(records) != info.record_count or not records:
        raise SegmentFormatError("segment record count disagrees with its index")
    return info, records


def blocks_between(info: SegmentInfo, after_seq: int, upto_seq: int) -> list[BlockRef]:
    """Blocks whose seq range meets (after_seq, upto_seq]. With seq gaps a returned block may
    hold no seq of the window itself; callers filter decoded records by seq."""
    blocks = info.blocks
    lo = bisect_right(blocks, after_seq, key=lambda b: b.last_seq)
    hi = bisect_right(blocks, upto_seq, key=lambda b: b.first_seq)
    return list(blocks[lo:hi])


def byte_ranges(
    blocks: Sequence[BlockRef], max_gap: int = 0
) -> list[tuple[int, int, list[BlockRef]]]:
    """Coalesce ascending blocks into (start, end exclusive, blocks) ranges: one range GET
    each. Blocks at most `max_gap` bytes apart share a range (the gap is fetched too)."""
    out: list[tuple[int, int, list[BlockRef]]] = []
    for b in blocks:
        if out and b.offset - out[-1][1] <= max_gap:
            start, _, group = out[-1]
            group.append(b)
            out[-1] = (start, b.offset + b.length, group)
        else:
            out.append((b.offset, b.offset + b.length, [b]))
    return out


def decode_blocks(data: bytes, base_offset: int, blocks: Sequence[BlockRef]) -> list[StoredRecord]:
    """Records of `blocks`, in order. `data` holds object bytes from `base_offset` on."""
    unpack = _REC.unpack_from
    head = _REC.size
    none = _NONE
    new, rec = tuple.__new__, StoredRecord  # NamedTuple.__new__ is a Python-level call
    out: list[StoredRecord] = []
    view = memoryview(data)
    for b in blocks:
        start = b.offset - base_offset
        if start < 0 or start + b.length > len(data):
            raise SegmentFormatError(f"block at offset {b.offset} is outside the fetched range")
        stored = view[start : start + b.length]
        if zlib.crc32(stored) != b.crc32:
            raise SegmentFormatError(f"block at offset {b.offset} fails its crc32")
        try:
            body = zlib.decompress(stored)
        except zlib.error as e:
            raise SegmentFormatError(f"block at offset {b.offset} does not inflate: {e}") from e
        pos, end, first = 0, len(body), len(out)
        try:
            while pos < end:
                seq, ts, dl, ml, nl, tl, size = unpack(body, pos)
                pos += head
                data_raw = body[pos : pos + dl]
                pos += dl
                meta = node = tag = None
                if ml != none:
                    meta = body[pos : pos + ml]
                    pos += ml
                if nl != none:
                    node = body[pos : pos + nl]
                    pos += nl
                if tl != none:
                    tag = body[pos : pos + tl]
                    pos += tl
                out.append(new(rec, (seq, ts, data_raw, node, tag, meta, size)))
        except struct.error as e:
            raise SegmentFormatError(f"block at offset {b.offset} is truncated") from e
        if (
            pos != end
            or len(out) - first != b.records
            or not b.records
            or out[first].seq != b.first_seq
            or out[-1].seq != b.last_seq
        ):
            raise SegmentFormatError(f"block at offset {b.offset} disagrees with its index entry")
    return out


def companion_key(segment_key: str) -> str:
    """The S3 key of a segment's index companion (headwater.index): next to the segment, so
    whatever deletes a segment deletes its companion with it."""
    return segment_key + COMPANION_SUFFIX


def lexicon_run_key(segment_key: str) -> str:
    """The S3 key of the routing-key lexicon run ending with this segment (headwater.index
    .runs), if one was built."""
    return segment_key + LEXICON_RUN_SUFFIX


def object_keys(segment_key: str) -> tuple[str, str, str]:
    """Every object a sealed segment may have: itself, its companion, the lexicon run ending
    with it (deleting an absent key is harmless)."""
    return segment_key, companion_key(segment_key), lexicon_run_key(segment_key)
