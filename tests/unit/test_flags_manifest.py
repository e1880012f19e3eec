"""Publish bodies -> namespace trees, and the publish-time lint (headwater.flags.manifest,
headwater.flags.lint)."""

from __future__ import annotations

import gzip
import io
import json
import tarfile

import pytest

from headwater.flags.errors import InvalidRequest, LintFailed, PayloadTooLarge
from headwater.flags.lint import build_model, check, find_cycles, lint
from headwater.flags.manifest import TreeLimits, parse_json_body, parse_tarball

pytestmark = pytest.mark.unit

NS = b'name = "billing"\n'


def tgz(*members: tarfile.TarInfo | tuple[str, bytes]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as archive:
        for member in members:
            if isinstance(member, tarfile.TarInfo):
                archive.addfile(member)
            else:
                name, content = member
                info = tarfile.TarInfo(name)
                info.size = len(content)
                archive.addfile(info, io.BytesIO(content))
    return gzip.compress(raw.getvalue())


def special(name: str, kind: bytes, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info


def codes(tree: dict[str, bytes]) -> list[tuple[str, str]]:
    return [(f.path, f.code) for f in lint(tree)]


# -- tar.gz ---------------------------------------------------------------------------------


def test_tarball_gives_the_tree_skipping_directories_and_dot_slash() -> None:
    body = tgz(
        special("./", tarfile.DIRTYPE),
        ("./namespace.toml", NS),
        special("flags/", tarfile.DIRTYPE),
        ("flags/a.toml", b"enabled = true\n"),
    )
    assert parse_tarball(body) == {"namespace.toml": NS, "flags/a.toml": b"enabled = true\n"}


@pytest.mark.parametrize(
    "member",
    [
        ("/etc/passwd", b"x"),
        ("../escape.toml", b"x"),
        ("flags/../../escape.toml", b"x"),
        ("flags//a.toml", b"x"),
        ("flags\\a.toml", b"x"),
        special("flags/a.toml", tarfile.SYMTYPE, "/etc/passwd"),
        special("flags/a.toml", tarfile.LNKTYPE, "namespace.toml"),
        special("dev", tarfile.CHRTYPE),
        special("disk", tarfile.BLKTYPE),
        special("pipe", tarfile.FIFOTYPE),
    ],
    ids=["absolute", "dotdot", "nested-dotdot", "empty-part", "backslash", "symlink",
         "hardlink", "chardev", "blockdev", "fifo"],
)  # fmt: skip
def test_tarball_refuses_malicious_members(member: tarfile.TarInfo | tuple[str, bytes]) -> None:
    with pytest.raises(InvalidRequest):
        parse_tarball(tgz(("namespace.toml", NS), member))


def test_tarball_refuses_a_path_twice_even_spelled_differently() -> None:
    with pytest.raises(InvalidRequest, match="twice"):
        parse_tarball(tgz(("namespace.toml", NS), ("./namespace.toml", NS)))


def test_tarball_refuses_non_utf8_member_names() -> None:
    info = tarfile.TarInfo("flags/\udcff.toml")  # surrogate escape = raw byte 0xff
    raw = io.BytesIO()
    with tarfile.open(
        fileobj=raw, mode="w", format=tarfile.GNU_FORMAT, errors="surrogateescape"
    ) as archive:
        archive.addfile(info, io.BytesIO(b""))
    with pytest.raises(InvalidRequest, match="UTF-8"):
        parse_tarball(gzip.compress(raw.getvalue()))


@pytest.mark.parametrize(
    "body",
    [b"", b"not gzip", gzip.compress(b"not a tar" * 100, mtime=0)],
    ids=["empty", "not-gzip", "gzip-not-tar"],
)
def test_tarball_refuses_garbage(body: bytes) -> None:
    with pytest.raises(InvalidRequest):
        parse_tarball(body)


def test_tarball_size_caps() -> None:
    small = TreeLimits(max_files=2, max_file_bytes=10, max_tree_bytes=15, max_archive_bytes=10_240)
    with pytest.raises(PayloadTooLarge, match="file cap"):
        parse_tarball(tgz(("namespace.toml", b"x" * 11)), small)
    with pytest.raises(PayloadTooLarge, match="tree"):
        parse_tarball(tgz(("namespace.toml", b"x" * 8), ("flags/a.toml", b"y" * 8)), small)
    with pytest.raises(PayloadTooLarge, match="more than 2 files"):
        parse_tarball(tgz(("a", b""), ("b", b""), ("c", b"")), small)


def test_gzip_bomb_stops_at_the_archive_cap() -> None:
    bomb = tgz(("namespace.toml", b"\0" * 5_000_000))
    assert len(bomb) < 20_000
    with pytest.raises(PayloadTooLarge, match="expands"):
        parse_tarball(bomb, TreeLimits(max_archive_bytes=1_000_000))


# -- JSON -----------------------------------------------------------------------------------


def test_json_body_gives_utf8_bytes() -> None:
    body = json.dumps({"files": {"namespace.toml": 'name = "ü"\n'}})
    assert parse_json_body(body) == {"namespace.toml": 'name = "ü"\n'.encode()}


@pytest.mark.parametrize(
    "body",
    [
        b"{",
        b"[]",
        b'{"files": {}, "extra": 1}',
        b'{"files": []}',
        b'{"files": {"namespace.toml": 1}}',
        b'{"files": {"namespace.toml": "\\ud800"}}',
        b'{"files": {"namespace.toml": "a", "namespace.toml": "b"}}',
    ],
)
def test_json_body_shape_errors(body: bytes) -> None:
    with pytest.raises(InvalidRequest):
        parse_json_body(body)


def test_json_body_size_caps() -> None:
    with pytest.raises(PayloadTooLarge):
        parse_json_body(
            json.dumps({"files": {"namespace.toml": "x" * 11}}), TreeLimits(max_file_bytes=10)
        )


# -- lint -----------------------------------------------------------------------------------


def test_a_valid_tree_lints_clean() -> None:
    tree = {
        "namespace.toml": NS,
        "flags/checkout.toml": b'[[rules]]\nsegment = "employees"\n',
        "segments/employees.toml": b'segments = ["staff"]\n',
        "segments/staff.toml": b"emails = []\n",
    }
    assert lint(tree) == []
    assert check(tree).flags == frozenset({"checkout"})


def test_missing_namespace_toml() -> None:
    assert codes({"flags/a.toml": b""}) == [("namespace.toml", "missing_namespace")]
    assert codes({}) == [("namespace.toml", "missing_namespace")]


@pytest.mark.parametrize(
    "path",
    ["README.md", "flags/a.json", "flags/sub/a.toml", "flags/A.toml", "flags/a.b.toml",
     "segments/.toml", "other/a.toml", "flags/" + "a" * 65 + ".toml", "namespace.TOML"],
)  # fmt: skip
def test_invalid_paths(path: str) -> None:
    assert codes({"namespace.toml": NS, path: b""}) == [(path, "invalid_path")]


def test_invalid_utf8_and_toml() -> None:
    tree = {"namespace.toml": b"name = \xff\n", "flags/a.toml": b"= broken"}
    assert codes(tree) == [("flags/a.toml", "invalid_toml"), ("namespace.toml", "invalid_utf8")]


def test_unknown_segment_from_flag_and_from_segment_at_any_depth() -> None:
    tree = {
        "namespace.toml": NS,
        "flags/a.toml": b'[variants.on.when]\nsegment = "ghost"\n',
        "segments/s.toml": b'[[rules]]\n[[rules.match]]\nsegments = ["phantom"]\n',
    }
    assert codes(tree) == [
        ("flags/a.toml", "unknown_segment"),
        ("segments/s.toml", "unknown_segment"),
    ]
    messages = [f.message for f in lint(tree)]
    assert "'ghost'" in messages[0] and "'phantom'" in messages[1]


def test_references_in_namespace_toml_are_not_references() -> None:
    assert lint({"namespace.toml": b'segment = "ghost"\n'}) == []


@pytest.mark.parametrize(
    "content", [b"segment = 1\n", b'segment = ["a"]\n', b'segments = "a"\n', b"segments = [1]\n",
                b"[segments]\na = 1\n"],
)  # fmt: skip
def test_invalid_segment_reference_types(content: bytes) -> None:
    assert codes({"namespace.toml": NS, "flags/a.toml": content}) == [
        ("flags/a.toml", "invalid_segment_reference")
    ]


def test_self_reference_is_a_cycle() -> None:
    tree = {"namespace.toml": NS, "segments/a.toml": b'segment = "a"\n'}
    assert codes(tree) == [("segments/a.toml", "segment_cycle")]
    assert "a -> a" in lint(tree)[0].message


def test_longer_cycle_reported_once_from_its_smallest_member() -> None:
    tree = {
        "namespace.toml": NS,
        "flags/f.toml": b'segment = "c"\n',
        "segments/a.toml": b'segments = ["b"]\n',
        "segments/b.toml": b'[x]\nsegment = "c"\n',
        "segments/c.toml": b'[[y]]\nsegments = ["a", "d"]\n',
        "segments/d.toml": b"",
    }
    findings = lint(tree)
    assert [(f.path, f.code) for f in findings] == [("segments/a.toml", "segment_cycle")]
    assert findings[0].message == "segment cycle: a -> b -> c -> a"


def test_find_cycles_reports_every_cycle_group() -> None:
    uses = {
        "a": frozenset({"b"}),
        "b": frozenset({"a"}),
        "c": frozenset({"d"}),
        "d": frozenset({"c", "missing"}),
        "e": frozenset({"a"}),
    }
    assert find_cycles(uses) == [["a", "b"], ["c", "d"]]


def test_lint_returns_all_findings_and_check_raises_422_with_them() -> None:
    tree = {"flags/a.toml": b'segment = "x"\n', "junk.txt": b"", "segments/b.toml": b"= ="}
    with pytest.raises(LintFailed) as info:
        check(tree)
    error = info.value
    assert error.status == 422 and error.code == "lint_failed"
    envelope = error.envelope()
    assert envelope is not None
    details = envelope["error"]["details"]
    assert [(d["path"], d["code"]) for d in details] == [
        ("flags/a.toml", "unknown_segment"),
        ("junk.txt", "invalid_path"),
        ("namespace.toml", "missing_namespace"),
        ("segments/b.toml", "invalid_toml"),
    ]
    assert all(set(d) == {"path", "code", "message"} and d["message"] for d in details)


def test_model_of_an_unlinted_tree_ignores_unparseable_files() -> None:
    model = build_model({"flags/a.toml": b"= =", "segments/s.toml": b'segment = "t"\n'})
    assert model.flags == frozenset({"a"}) and model.flag_uses["a"] == frozenset()
    assert model.segment_uses["s"] == frozenset({"t"})
