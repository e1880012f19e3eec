"""Deterministic closure snapshots (headwater.flags.tarball)."""

from __future__ import annotations

import gzip
import io
import tarfile

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headwater.flags.closure import closure_hash
from headwater.flags.tarball import build_snapshot, read_snapshot

pytestmark = pytest.mark.unit

FILES = {
    "segments/employees.toml": b"emails = []\n",
    "namespace.toml": b'name = "billing"\n',
    "flags/checkout.toml": b'segment = "employees"\n',
    "flags/a.toml": b"",
}


def test_same_closure_same_bytes() -> None:
    assert build_snapshot(FILES).body == build_snapshot(FILES).body


def test_insertion_order_does_not_matter() -> None:
    reordered = dict(sorted(FILES.items()))
    assert list(reordered) != list(FILES)
    assert build_snapshot(reordered).body == build_snapshot(FILES).body


def test_contents_round_trip_and_hash() -> None:
    snapshot = build_snapshot(FILES)
    files = read_snapshot(snapshot.body)
    assert files == FILES and closure_hash(files) == closure_hash(FILES)


def test_members_are_normalized_and_sorted() -> None:
    snapshot = build_snapshot(FILES)
    tar = gzip.decompress(snapshot.body)
    assert snapshot.tar_size == len(tar)
    with tarfile.open(fileobj=io.BytesIO(tar), mode="r:") as archive:
        members = archive.getmembers()
        assert [m.name for m in members] == [
            "flags/a.toml",
            "flags/checkout.toml",
            "namespace.toml",
            "segments/employees.toml",
        ]
        for member in members:
            assert member.isreg()
            assert (member.mtime, member.uid, member.gid, member.mode) == (0, 0, 0, 0o644)
            assert (member.uname, member.gname) == ("", "")
            stream = archive.extractfile(member)
            assert stream is not None and stream.read() == FILES[member.name]


def test_gzip_header_has_no_mtime_and_no_name() -> None:
    body = build_snapshot(FILES).body
    assert body[:3] == b"\x1f\x8b\x08"
    flags, mtime = body[3], body[4:8]
    assert flags & 0x08 == 0  # FNAME absent
    assert mtime == b"\x00\x00\x00\x00"


def test_empty_closure_is_a_valid_empty_archive() -> None:
    snapshot = build_snapshot({})
    assert read_snapshot(snapshot.body) == {}
    assert snapshot.body == build_snapshot({}).body


def test_different_content_different_bytes() -> None:
    changed = {**FILES, "flags/a.toml": b"x"}
    assert build_snapshot(changed).body != build_snapshot(FILES).body


@given(
    st.dictionaries(
        st.sampled_from(["namespace.toml", "flags/a.toml", "flags/b-c.toml", "segments/s.toml"]),
        st.binary(max_size=64),
    )
)
def test_round_trip_for_any_closure(files: dict[str, bytes]) -> None:
    snapshot = build_snapshot(files)
    assert read_snapshot(snapshot.body) == files
    assert build_snapshot(dict(reversed(list(files.items())))).body == snapshot.body
