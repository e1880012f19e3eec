"""Closures and closure hashes (spec: Closure model, Closure hash canonicalization).

closure(slug, flag_set, C) = {namespace.toml}
                             ∪ {flags/<f>.toml | f ∈ flag_set ∩ flags_in(C)}
                             ∪ {segments/<s>.toml | s ∈ segments_reachable(flag_set, C)}

Reachability is transitive over segment-uses-segment references. A `*` selection is every
flag plus every segment, orphans included; a narrow selection omits orphans. Flag keys that
do not exist are simply absent. `namespace.toml` is in every closure of a tree that has one
(only an empty manifest has none, whose closure is empty).

Hash: sort (path, content) by the path's UTF-8 bytes; for each write a big-endian u32 of the
path's byte length, the path bytes, and the raw 32-byte sha256 of the content; the closure
hash is "sha256:" + lower-case hex of sha256 over that buffer.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from headwater.flags import names
from headwater.flags.lint import Model, build_model

HASH_PREFIX = "sha256:"


@dataclass(frozen=True, slots=True)
class FlagSelection:
    """A subscription's flag list: `*` (wildcard) or a set of flag keys."""

    wildcard: bool
    keys: frozenset[str] = frozenset()

    @classmethod
    def all(cls) -> FlagSelection:
        return cls(wildcard=True)

    @classmethod
    def of(cls, keys: Iterable[str]) -> FlagSelection:
        return cls(wildcard=False, keys=frozenset(keys))

    def canonical(self) -> str:
        """`*`, or the distinct keys sorted by UTF-8 bytes and joined with `,`."""
        if self.wildcard:
            return names.WILDCARD
        return ",".join(sorted(self.keys, key=lambda k: k.encode()))


def reachable_segments(model: Model, roots: Iterable[str]) -> set[str]:
    """Existing segments reachable from `roots` (segment names) through segment references."""
    seen: set[str] = set()
    todo = [s for s in roots if s in model.segments]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(s for s in model.segment_uses.get(name, ()) if s in model.segments)
    return seen


def closure_paths(model: Model, selection: FlagSelection, has_namespace_file: bool) -> set[str]:
    if selection.wildcard:
        flags = set(model.flags)
        segments = set(model.segments)
    else:
        flags = set(selection.keys & model.flags)
        roots = [s for f in flags for s in model.flag_uses.get(f, ())]
        segments = reachable_segments(model, roots)
    paths = {names.flag_path(f) for f in flags} | {names.segment_path(s) for s in segments}
    if has_namespace_file:
        paths.add(names.NAMESPACE_FILE)
    return paths


def closure(
    tree: Mapping[str, bytes], selection: FlagSelection, model: Model | None = None
) -> dict[str, bytes]:
    """The files of `tree` in the closure of `selection` (pass `model` to reuse a parse)."""
    model = build_model(tree) if model is None else model
    paths = closure_paths(model, selection, names.NAMESPACE_FILE in tree)
    return {path: tree[path] for path in paths}


def file_digest(content: bytes) -> bytes:
    return hashlib.sha256(content).digest()


def closure_hash_of_digests(digests: Mapping[str, bytes]) -> str:
    """The closure hash from each path's raw 32-byte content digest (what the server stores
    per version, so old closures hash without their bytes)."""
    buffer = hashlib.sha256()
    for path in sorted(digests, key=lambda p: p.encode("utf-8")):
        raw = path.encode("utf-8")
        digest = digests[path]
        if len(digest) != 32:
            raise ValueError(f"digest of {path!r} is not 32 bytes")
        buffer.update(struct.pack(">I", len(raw)))
        buffer.update(raw)
        buffer.update(digest)
    return HASH_PREFIX + buffer.hexdigest()


def closure_hash(files: Mapping[str, bytes]) -> str:
    return closure_hash_of_digests({path: file_digest(c) for path, c in files.items()})
