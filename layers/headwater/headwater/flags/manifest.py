"""A namespace tree (path -> exact bytes) from either publish body.

`application/gzip`: a tar.gz of the tree. Only regular files become entries; directory
members are skipped (`tar czf` writes them) and a leading `./` is dropped. Anything that
could escape the tree or hide content is refused outright, before lint: absolute names,
`..`, empty components, NUL or non-UTF-8 names, symlinks and hard links, devices, FIFOs,
sparse or unknown member types, and the same path twice. Sizes are capped (`TreeLimits`)
while decompressing, so a gzip bomb stops at the cap.

`application/json`: exactly `{"files": {"<path>": "<text>", ...}}`; each text is stored as
its UTF-8 bytes.

Paths are not judged here beyond safety: `lint` reports paths outside the three allowed
kinds, non-UTF-8 content and invalid TOML, all at once (422 `lint_failed`).
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from headwater.flags.errors import InvalidRequest, PayloadTooLarge
from headwater.jsondepth import nesting_error

Tree = Mapping[str, bytes]


@dataclass(frozen=True, slots=True)
class TreeLimits:
    """Caps on one published tree (docs/flags.md). The archive cap bounds decompression."""

    max_files: int = 5000
    max_file_bytes: int = 1024 * 1024
    max_tree_bytes: int = 16 * 1024 * 1024
    max_archive_bytes: int = 32 * 1024 * 1024


DEFAULT_LIMITS = TreeLimits()

_FILE_TYPES = (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE)
_LINK_TYPES = (tarfile.SYMTYPE, tarfile.LNKTYPE)


def _refuse(message: str, path: str | None = None) -> InvalidRequest:
    return InvalidRequest(message, details={"path": path} if path is not None else None)


def safe_member_path(name: str, *, directory: bool = False) -> str:
    """The tree path of a tar member name, or InvalidRequest if it could escape the tree.
    A directory member may be the root itself (`./`), whose path is ""."""
    if "\x00" in name:
        raise _refuse("archive member name holds a NUL byte", name)
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # tarfile keeps undecodable bytes as surrogate escapes
        raise _refuse("archive member name is not UTF-8", name) from None
    if name.startswith("/") or "\\" in name:
        raise _refuse(f"archive member {name!r} has an absolute or non-POSIX path", name)
    parts = name.split("/")
    while parts and parts[0] == ".":
        parts.pop(0)
    if parts and parts[-1] == "":  # a directory written as `flags/`
        parts.pop()
    if directory and not parts:
        return ""
    if not parts or any(part in ("", ".", "..") for part in parts):
        raise _refuse(f"archive member {name!r} has an empty, '.' or '..' path component", name)
    return "/".join(parts)


def _decompress(body: bytes, limits: TreeLimits) -> bytes:
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(body), mode="rb") as stream:
            raw = stream.read(limits.max_archive_bytes + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise _refuse(f"body is not valid gzip: {exc}") from exc
    if len(raw) > limits.max_archive_bytes:
        raise PayloadTooLarge(
            f"archive expands past {limits.max_archive_bytes} bytes",
            details={"limit": limits.max_archive_bytes},
        )
    return raw


class _TreeBuilder:
    def __init__(self, limits: TreeLimits) -> None:
        self.limits = limits
        self.files: dict[str, bytes] = {}
        self.total = 0

    def check_size(self, path: str, size: int) -> None:
        if size > self.limits.max_file_bytes:
            raise PayloadTooLarge(
                f"{path}: {size} bytes is over the {self.limits.max_file_bytes}-byte file cap",
                details={"path": path, "limit": self.limits.max_file_bytes},
            )
        if self.total + size > self.limits.max_tree_bytes:
            raise PayloadTooLarge(
                f"tree is over the {self.limits.max_tree_bytes}-byte cap",
                details={"limit": self.limits.max_tree_bytes},
            )
        if len(self.files) + 1 > self.limits.max_files:
            raise PayloadTooLarge(
                f"tree has more than {self.limits.max_files} files",
                details={"limit": self.limits.max_files},
            )

    def add(self, path: str, content: bytes) -> None:
        if path in self.files:
            raise _refuse(f"path {path!r} appears twice", path)
        self.check_size(path, len(content))
        self.files[path] = content
        self.total += len(content)


def parse_tarball(body: bytes, limits: TreeLimits = DEFAULT_LIMITS) -> dict[str, bytes]:
    """The tree inside a tar.gz publish body (module docstring for what is refused)."""
    raw = _decompress(body, limits)
    builder = _TreeBuilder(limits)
    try:
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as archive:
            for member in archive:
                _take_member(archive, member, builder)
    except tarfile.TarError as exc:
        raise _refuse(f"body is not a valid tar archive: {exc}") from exc
    return builder.files


def _take_member(archive: tarfile.TarFile, member: tarfile.TarInfo, builder: _TreeBuilder) -> None:
    name = member.name
    if member.type in _LINK_TYPES:
        raise _refuse(f"archive member {name!r} is a link; only regular files are accepted", name)
    if member.type == tarfile.DIRTYPE:
        safe_member_path(name, directory=True)
        return
    if member.type not in _FILE_TYPES:
        raise _refuse(
            f"archive member {name!r} is not a regular file (device, FIFO or other type)", name
        )
    path = safe_member_path(name)
    if path in builder.files:
        raise _refuse(f"path {path!r} appears twice", path)
    builder.check_size(path, member.size)
    stream = archive.extractfile(member)
    if stream is None:  # pragma: no cover - regular members always have a stream
        raise _refuse(f"archive member {name!r} has no content", name)
    with stream:
        builder.add(path, stream.read())


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"key {key!r} appears twice")
        result[key] = value
    return result


def parse_json_body(body: bytes | str, limits: TreeLimits = DEFAULT_LIMITS) -> dict[str, bytes]:
    """The tree of a `{"files": {path: text}}` publish body."""
    try:
        text = (
            body
            if isinstance(body, str)
            else body.decode(json.detect_encoding(body), "surrogatepass")
        )  # as json.loads decodes
        if nesting_error(text, 2) is not None:  # never a valid body; json.loads recurses
            raise _refuse('body must be exactly {"files": {"<path>": "<text>", ...}}')
        document: Any = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _refuse(f"body is not valid JSON: {exc}") from exc
    if not isinstance(document, dict) or set(document) != {"files"}:
        raise _refuse('body must be exactly {"files": {"<path>": "<text>", ...}}')
    files = document["files"]
    if not isinstance(files, dict):
        raise _refuse('"files" must be an object of path -> text')
    builder = _TreeBuilder(limits)
    for path, text in files.items():
        if not isinstance(text, str):
            raise _refuse(f"files[{path!r}] must be a string", path)
        try:
            content = text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate escape such as "\ud800"
            raise _refuse(f"files[{path!r}] is not valid Unicode text", path) from None
        builder.add(path, content)
    return builder.files
