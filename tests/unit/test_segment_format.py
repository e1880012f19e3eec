"""Property and corruption tests for the immutable S3 segment codec."""

from __future__ import annotations

import json
import random
import struct
import zlib
from itertools import accumulate

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.engine.records import StoredRecord
from headwater.engine.segment import (
    TRAILER_SIZE,
    SegmentFormatError,
    SegmentInfo,
    blocks_between,
    byte_ranges,
    decode_blocks,
    decode_index,
    decode_segment,
    encode_index,
    encode_segment,
    read_trailer,
)

pytestmark = pytest.mark.unit

small_data = (
    st.binary(max_size=300)
    | st.text(max_size=60).map(lambda t: json.dumps({"t": t}).encode())
    | st.just(b"")
    | st.binary(max_size=4).map(lambda b: b"\xff\xfe" + b)  # never UTF-8
)
big_data = st.integers(0, 2**32).map(lambda seed: random.Random(seed).randbytes(200_000))
# About one record in 40 is ~200 KB of incompressible bytes.
data_bytes = st.integers(0, 39).flatmap(lambda k: big_data if k == 0 else small_data)
optional = st.none() | st.just(b"") | st.binary(max_size=40)
seq_gaps = st.integers(1, 3) | st.integers(1, 2**40)


@st.composite
def record_lists(draw: st.DrawFn) -> list[StoredRecord]:
    n = draw(st.integers(1, 40))
    first = draw(st.integers(0, 2**50))
    gaps = draw(st.lists(seq_gaps, min_size=n - 1, max_size=n - 1))
    seqs = list(accumulate(gaps, initial=first))
    return [
        StoredRecord(
            seq,
            draw(st.integers(-(2**40), 2**50)),
            draw(data_bytes),
            draw(optional),
            draw(optional),
            draw(optional),
            draw(st.integers(0, 2**32 - 1)),
        )
        for seq in seqs
    ]


def expected_info(recs: list[StoredRecord]) -> tuple[int, int, int, int, int, int]:
    ts = [r.ts for r in recs]
    return (
        recs[0].seq,
        recs[-1].seq,
        len(recs),
        sum(r.size for r in recs),
        min(ts),
        max(ts),
    )


def fields(info: SegmentInfo) -> tuple[int, int, int, int, int, int]:
    return (
        info.first_seq,
        info.last_seq,
        info.record_count,
        info.payload_bytes,
        info.min_ts,
        info.max_ts,
    )


@given(
    recs=record_lists(),
    topic=st.text(max_size=30),
    epoch=st.integers(0, 2**64 - 1),
    block_bytes=st.integers(1, 100_000),
    data=st.data(),
)
@settings(max_examples=100, deadline=None)
def test_segment_round_trips_and_serves_any_window(
    recs: list[StoredRecord], topic: str, epoch: int, block_bytes: int, data: st.DataObject
) -> None:
    blob, info = encode_segment(topic, epoch, recs, block_bytes=block_bytes)

    # Whole object and index.
    assert decode_segment(blob) == (info, recs)
    assert decode_index(encode_index(info)) == info
    assert (info.topic, info.epoch) == (topic, epoch)
    assert fields(info) == expected_info(recs)
    assert sum(b.records for b in info.blocks) == len(recs)
    for b in info.blocks:
        assert b.first_seq <= b.last_seq and b.min_ts <= b.max_ts

    # Range-GET reader: trailer, footer, then only the blocks a window needs.
    off, length = read_trailer(blob[-data.draw(st.integers(TRAILER_SIZE, len(blob))) :])
    assert decode_index(blob[off : off + length]) == info
    for _ in range(3):
        after = data.draw(st.integers(recs[0].seq - 2, recs[-1].seq + 1))
        upto = data.draw(st.integers(after, recs[-1].seq + 2))
        max_gap = data.draw(st.sampled_from([0, 0, 1, 10_000]))
        wanted = blocks_between(info, after, upto)
        got: list[StoredRecord] = []
        for start, end, group in byte_ranges(wanted, max_gap):
            assert group and start == group[0].offset
            assert end == group[-1].offset + group[-1].length
            got += decode_blocks(blob[start:end], start, group)
        assert [r for r in got if after < r.seq <= upto] == [
            r for r in recs if after < r.seq <= upto
        ]
        assert [b for b in info.blocks if b not in wanted and b.first_seq <= upto] == [
            b for b in info.blocks if b.last_seq <= after
        ]


def rec(seq: int, ts: int, data: bytes = b"{}", size: int = 10) -> StoredRecord:
    return StoredRecord(seq, ts, data, None, None, None, size)


def test_info_fields_and_block_cuts() -> None:
    recs = [rec(5, 300), rec(9, 100, b"x" * 500, 7), rec(10, 200), rec(40, 50)]
    blob, info = encode_segment("orders", 3, recs, block_bytes=200)
    assert fields(info) == (5, 40, 4, 37, 50, 300)
    # the 500-byte record closes the first block early and sits alone
    assert [(b.first_seq, b.last_seq, b.records) for b in info.blocks] == [
        (5, 5, 1),
        (9, 9, 1),
        (10, 40, 2),
    ]
    assert [(b.min_ts, b.max_ts) for b in info.blocks] == [(300, 300), (100, 100), (50, 200)]
    assert blob[:6] == b"HWSEG\x00" and blob[-8:] == b"HWSEGEND"
    assert blocks_between(info, 9, 10) == [info.blocks[2]]
    assert blocks_between(info, 40, 100) == [] and blocks_between(info, 0, 4) == []
    assert len(byte_ranges(info.blocks)) == 1
    assert len(byte_ranges([info.blocks[0], info.blocks[2]])) == 2


def test_blocks_that_do_not_compress_are_stored_not_deflated() -> None:
    """An already-compressed payload's block is zlib level 0 (stored: a copy, not ~17 ms of
    CPU per MiB deflating for nothing); a compressible one is level 6 as before. Both read back
    through the same decoder."""
    noise = random.Random(7).randbytes(300_000)
    text = json.dumps([{"id": i, "name": f"user{i}"} for i in range(20_000)]).encode()[:300_000]
    recs = [rec(1, 10, noise, len(noise)), rec(2, 11, text, len(text))]
    blob, info = encode_segment("media", 1, recs, block_bytes=64 * 1024)
    assert [(b.first_seq, b.records) for b in info.blocks] == [(1, 1), (2, 1)]
    stored = [blob[b.offset : b.offset + b.length] for b in info.blocks]
    raws = [b"".join(_raw_record(r)) for r in recs]
    assert stored[0] == zlib.compress(raws[0], 0)
    assert stored[1] == zlib.compress(raws[1], 6) and len(stored[1]) < len(text) // 4
    assert [r.data_raw for r in decode_segment(blob)[1]] == [noise, text]


def _raw_record(r: StoredRecord) -> list[bytes]:
    head = struct.pack(
        "<QqIIIII", r.seq, r.ts, len(r.data_raw), 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, r.size
    )
    return [head, r.data_raw]


def test_absent_is_distinct_from_empty() -> None:
    recs = [StoredRecord(1, 0, b"", b"", None, b"", 0), StoredRecord(2, 0, b"", None, b"", None, 0)]
    assert decode_segment(encode_segment("t", 0, recs)[0])[1] == recs


@pytest.fixture
def segment() -> tuple[bytes, SegmentInfo]:
    recs = [rec(s, s * 10, json.dumps({"n": s}).encode()) for s in range(1, 200)]
    return encode_segment("t", 1, recs, block_bytes=500)


def test_bad_header_magic(segment: tuple[bytes, SegmentInfo]) -> None:
    with pytest.raises(SegmentFormatError, match="header magic"):
        decode_segment(b"XWSEG\x00" + segment[0][6:])


def test_unknown_version(segment: tuple[bytes, SegmentInfo]) -> None:
    blob = segment[0]
    with pytest.raises(SegmentFormatError, match="unknown segment version 2"):
        decode_segment(blob[:6] + struct.pack("<H", 2) + blob[8:])


@pytest.mark.parametrize("cut", [1, 10, TRAILER_SIZE, 100, 10_000])
def test_truncated_object(segment: tuple[bytes, SegmentInfo], cut: int) -> None:
    with pytest.raises(SegmentFormatError):
        decode_segment(segment[0][:-cut])


def test_flipped_byte_in_block(segment: tuple[bytes, SegmentInfo]) -> None:
    blob, info = segment
    b = info.blocks[3]
    bad = bytearray(blob)
    bad[b.offset + b.length // 2] ^= 0x40
    with pytest.raises(SegmentFormatError, match="crc32"):
        decode_segment(bytes(bad))
    with pytest.raises(SegmentFormatError, match="crc32"):
        decode_blocks(bytes(bad[b.offset : b.offset + b.length]), b.offset, [b])


def test_bad_trailer_magic(segment: tuple[bytes, SegmentInfo]) -> None:
    blob = segment[0]
    with pytest.raises(SegmentFormatError, match="trailer magic"):
        decode_segment(blob[:-1] + b"X")
    with pytest.raises(SegmentFormatError, match="trailer magic"):
        read_trailer(blob[-TRAILER_SIZE:-1] + b"X")
    with pytest.raises(SegmentFormatError):
        read_trailer(blob[-5:])


def test_corrupt_footer_and_index(segment: tuple[bytes, SegmentInfo]) -> None:
    blob, info = segment
    off, _ = read_trailer(blob)
    bad = bytearray(blob)
    bad[off + 3] ^= 1
    with pytest.raises(SegmentFormatError, match="footer crc"):
        decode_segment(bytes(bad))
    raw = encode_index(info)
    for broken in (b"", b"\x09" + raw[1:], raw[:-1], raw + b"\x00"):
        with pytest.raises(SegmentFormatError):
            decode_index(broken)


def test_fetched_range_must_cover_blocks(segment: tuple[bytes, SegmentInfo]) -> None:
    blob, info = segment
    b = info.blocks[1]
    with pytest.raises(SegmentFormatError, match="outside"):
        decode_blocks(blob[b.offset : b.offset + b.length - 1], b.offset, [b])


def test_encode_rejects_bad_input() -> None:
    with pytest.raises(SegmentFormatError):
        encode_segment("t", 1, [])
    with pytest.raises(SegmentFormatError, match="ascending"):
        encode_segment("t", 1, [rec(2, 0), rec(2, 0)])
