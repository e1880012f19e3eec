"""Property tests for the codecs: frames, list cursors, S3 key components."""

from __future__ import annotations

import json
import random
import string
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.engine import records as records_module
from headwater.engine.records import (
    COMPRESS_SAMPLE,
    FRAME_FORMAT_ZLIB,
    NewRecord,
    compress_frame,
    decode_records,
    encode_records,
)
from headwater.errors import InvalidRequest
from headwater.names import is_valid_topic_name, object_key_component
from headwater.v0.parse import decode_cursor, encode_cursor

pytestmark = pytest.mark.unit

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=20,
)
records = st.builds(
    NewRecord,
    data=json_values,
    node=st.none() | st.text(max_size=16),
    tag=st.none() | st.text(max_size=16),
    meta=st.none() | st.dictionaries(st.text(max_size=8), json_values, max_size=4),
    size=st.integers(min_value=0, max_value=1 << 20),
)


@given(st.lists(records, min_size=1, max_size=30), st.integers(1, 2**53), st.integers(0, 2**45))
@settings(max_examples=150, deadline=None)
def test_frame_round_trips_any_records(recs: list[NewRecord], first: int, ts: int) -> None:
    decoded = decode_records(encode_records(recs), first, ts)
    assert [d.seq for d in decoded] == list(range(first, first + len(recs)))
    for new, got in zip(recs, decoded, strict=True):
        assert (got.data, got.node, got.tag, got.meta, got.size, got.ts) == (
            new.data,
            new.node,
            new.tag,
            new.meta,
            new.size,
            ts,
        )


def test_large_frames_are_compressed_and_still_round_trip() -> None:
    recs = [NewRecord({"blob": "x" * 5000, "i": i}, size=5016) for i in range(50)]
    blob = compress_frame(encode_records(recs))
    assert blob[0] == FRAME_FORMAT_ZLIB
    assert len(blob) < 50 * 5000 // 10
    assert [r.data["i"] for r in decode_records(blob, 7, 1)] == list(range(50))


def test_a_one_kb_record_frame_is_deflated_under_one_write_unit() -> None:
    """One 1 KB JSON record (random text: ~6 bits a character) is one frame of one record on
    standard Lambda: deflated, its item fits one DynamoDB write unit (1,024 bytes) with the
    ~100 bytes of attributes the adapter adds, where the raw frame alone is over it."""
    rng = random.Random(1)
    text = "".join(
        rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
        for _ in range(980)
    )
    data = json.dumps({"id": 12345, "payload": text}).encode()
    raw = encode_records([NewRecord(None, data_raw=data, size=len(data) + 16)])
    assert len(raw) > 1024
    blob = compress_frame(raw)
    assert blob[0] == FRAME_FORMAT_ZLIB and len(blob) + 128 <= 1024
    assert decode_records(blob, 1, 1)[0].data_raw == data
    # a small frame stays raw (deflating it saves nothing worth its CPU)
    small = encode_records([NewRecord({"i": 1}, size=24)])
    assert compress_frame(small) is small


def test_a_frame_that_does_not_compress_is_not_deflated_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A large frame of already-compressed bytes: zlib tries a sample, not the whole frame
    (~16 ms of CPU per MiB for nothing), and the frame stays raw."""
    noise = random.Random(3).randbytes(200_000)
    blob = encode_records([NewRecord(None, data_raw=noise, size=len(noise))])
    tried: list[int] = []
    real = zlib.compress

    def compress(data: bytes, level: int = -1) -> bytes:
        tried.append(len(data))
        return real(data, level)

    monkeypatch.setattr(records_module.zlib, "compress", compress)
    assert compress_frame(blob) is blob
    assert tried and max(tried) <= COMPRESS_SAMPLE
    # a compressible frame of the same size is tried whole, and compressed
    text = json.dumps([{"i": i} for i in range(30_000)]).encode()[:200_000]
    packed = compress_frame(encode_records([NewRecord(None, data_raw=text, size=len(text))]))
    assert packed[0] == FRAME_FORMAT_ZLIB and max(tried) > COMPRESS_SAMPLE
    assert decode_records(packed, 1, 1)[0].data_raw == text


def test_unknown_frame_format_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown frame format"):
        decode_records(b"\x09{}", 1, 1)


topic_names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,254}", fullmatch=True)


@given(topic_names)
def test_cursor_round_trips_every_topic_name(name: str) -> None:
    assert decode_cursor(encode_cursor(name)) == name


@pytest.mark.parametrize("bad", ["%%%", "bm90IGpzb24", "eyJhZnRlciI6IDF9", "e30"])
def test_corrupt_cursor_is_invalid_request(bad: str) -> None:
    with pytest.raises(InvalidRequest):
        decode_cursor(bad)


@given(topic_names)
def test_object_key_component_never_contains_path_characters(name: str) -> None:
    comp = object_key_component(name)
    assert set(comp) <= set(string.ascii_lowercase + "234567")
    assert comp  # never empty


@given(topic_names, topic_names)
def test_object_key_component_is_injective(a: str, b: str) -> None:
    assert (object_key_component(a) == object_key_component(b)) == (a == b)


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("a", True),
        ("render-queue:tenantA", True),
        ("a" * 255, True),
        ("a" * 256, False),
        (".hidden", False),
        ("-x", False),
        ("a/b", False),
        ("a b", False),
        ("", False),
        ("é", False),
        ("a>b", False),
    ],
)
def test_topic_name_rule(name: str, ok: bool) -> None:
    assert is_valid_topic_name(name) is ok
