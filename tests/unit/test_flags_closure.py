"""Closure model and closure hash (headwater.flags.closure). Every hash vector is built here
from the spec's canonical byte layout, never by calling the code under test."""

from __future__ import annotations

import hashlib
import itertools
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headwater.flags.closure import (
    FlagSelection,
    closure,
    closure_hash,
    closure_hash_of_digests,
)
from headwater.flags.lint import lint

pytestmark = pytest.mark.unit

NS = b'name = "billing"\n'

TREE = {
    "namespace.toml": NS,
    "flags/checkout.toml": b'[[rules]]\nsegment = "employees"\n',
    "flags/banner.toml": b"enabled = true\n",
    "flags/quiz.toml": b'[variants.b]\nsegments = ["beta", "employees"]\n',
    "segments/employees.toml": b'[[match]]\nsegment = "staff"\n',
    "segments/staff.toml": b'emails = ["a@example.com"]\n',
    "segments/beta.toml": b"percent = 5\n",
    "segments/orphan.toml": b"percent = 1\n",
}


def hand_hash(pairs: list[tuple[bytes, bytes]]) -> str:
    """The spec's buffer, written out: pairs must already be in path byte order."""
    buffer = b""
    for path, content in pairs:
        buffer += struct.pack(">I", len(path)) + path + hashlib.sha256(content).digest()
    return "sha256:" + hashlib.sha256(buffer).hexdigest()


# -- hash vectors ---------------------------------------------------------------------------


def test_empty_closure_hashes_to_sha256_of_nothing() -> None:
    expected = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert closure_hash({}) == expected


def test_reference_vector_computed_with_shell_tools() -> None:
    # printf '\0\0\0\x0cflags/a.toml' + sha256('x') raw + '\0\0\0\x0enamespace.toml' +
    # sha256('name = "billing"\n') raw | sha256sum  (coreutils, outside Python)
    files = {"namespace.toml": NS, "flags/a.toml": b"x"}
    expected = "sha256:31746554c3aafab35cb61727b4a803b8478b4c2bb90f62e5b4898098949a5da1"
    assert closure_hash(files) == expected


def test_single_file_buffer_layout() -> None:
    buffer = (
        b"\x00\x00\x00\x0e"
        + b"namespace.toml"
        + bytes.fromhex("6145688fbdafc4e8da4098335df0ccf52b849c0337c724e420fee1efed4c2429")
    )
    assert closure_hash({"namespace.toml": NS}) == "sha256:" + hashlib.sha256(buffer).hexdigest()


def test_sorted_by_path_bytes_whatever_the_insertion_order() -> None:
    files = {
        "segments/a.toml": b"s",
        "namespace.toml": b"n",
        "flags/b.toml": b"b",
        "flags/a_b.toml": b"u",  # '_' 0x5f sorts after '.' 0x2e
        "flags/a.toml": b"a",
        "flags/a-b.toml": b"d",  # '-' 0x2d sorts before '.' 0x2e
    }
    expected = hand_hash(
        [
            (b"flags/a-b.toml", b"d"),
            (b"flags/a.toml", b"a"),
            (b"flags/a_b.toml", b"u"),
            (b"flags/b.toml", b"b"),
            (b"namespace.toml", b"n"),
            (b"segments/a.toml", b"s"),
        ]
    )
    assert closure_hash(files) == expected
    assert closure_hash(dict(reversed(list(files.items())))) == expected


def test_length_prefix_is_a_big_endian_u32_of_utf8_bytes() -> None:
    long_path = "flags/" + "é" * 150 + ".toml"  # 300 UTF-8 bytes for 150 characters
    raw = long_path.encode()
    assert len(raw) == 6 + 300 + 5
    buffer = b"\x00\x00\x01\x37" + raw + hashlib.sha256(b"").digest()
    assert closure_hash({long_path: b""}) == "sha256:" + hashlib.sha256(buffer).hexdigest()


def test_content_bytes_are_hashed_without_normalization() -> None:
    crlf = closure_hash({"namespace.toml": b"a = 1\r\n"})
    lf = closure_hash({"namespace.toml": b"a = 1\n"})
    assert crlf != lf
    assert crlf == hand_hash([(b"namespace.toml", b"a = 1\r\n")])


def test_digest_form_matches_content_form() -> None:
    digests = {p: hashlib.sha256(c).digest() for p, c in TREE.items()}
    assert closure_hash_of_digests(digests) == closure_hash(TREE)
    with pytest.raises(ValueError):
        closure_hash_of_digests({"namespace.toml": b"short"})


PATHS = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=20)


@given(st.dictionaries(PATHS, st.binary(max_size=40), max_size=8))
def test_hash_matches_hand_layout_for_any_closure(files: dict[str, bytes]) -> None:
    pairs = sorted((p.encode(), c) for p, c in files.items())
    assert closure_hash(files) == hand_hash(pairs)


# -- closure model --------------------------------------------------------------------------


def paths(selection: FlagSelection) -> set[str]:
    return set(closure(TREE, selection))


def test_narrow_selection_takes_transitive_segments_and_namespace_toml() -> None:
    assert paths(FlagSelection.of(["checkout"])) == {
        "namespace.toml",
        "flags/checkout.toml",
        "segments/employees.toml",
        "segments/staff.toml",  # reached through employees
    }


def test_flag_without_segments() -> None:
    assert paths(FlagSelection.of(["banner"])) == {"namespace.toml", "flags/banner.toml"}


def test_union_of_flags() -> None:
    assert paths(FlagSelection.of(["quiz", "banner"])) == {
        "namespace.toml",
        "flags/banner.toml",
        "flags/quiz.toml",
        "segments/beta.toml",
        "segments/employees.toml",
        "segments/staff.toml",
    }


def test_unknown_flags_are_simply_absent() -> None:
    assert paths(FlagSelection.of(["ghost"])) == {"namespace.toml"}
    assert paths(FlagSelection.of(["banner", "ghost"])) == {"namespace.toml", "flags/banner.toml"}


def test_wildcard_takes_everything_including_orphan_segments() -> None:
    assert paths(FlagSelection.all()) == set(TREE)
    assert "segments/orphan.toml" not in paths(FlagSelection.of(["checkout", "quiz", "banner"]))


def test_closure_keeps_exact_bytes() -> None:
    assert closure(TREE, FlagSelection.of(["banner"]))["flags/banner.toml"] == b"enabled = true\n"


def test_empty_manifest_has_an_empty_closure() -> None:
    assert closure({}, FlagSelection.all()) == {}
    assert closure({}, FlagSelection.of(["a"])) == {}


def test_every_closure_of_a_valid_namespace_is_a_valid_namespace() -> None:
    assert lint(TREE) == []
    keys = ["checkout", "banner", "quiz", "ghost"]
    for size in range(len(keys) + 1):
        for chosen in itertools.combinations(keys, size):
            assert lint(closure(TREE, FlagSelection.of(chosen))) == [], chosen
    assert lint(closure(TREE, FlagSelection.all())) == []


def test_canonical_flag_list() -> None:
    assert FlagSelection.all().canonical() == "*"
    assert FlagSelection.of(["quiz", "banner", "quiz"]).canonical() == "banner,quiz"
    assert FlagSelection.of(["a_b", "a-b", "a"]).canonical() == "a,a-b,a_b"
