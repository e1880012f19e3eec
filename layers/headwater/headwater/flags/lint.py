"""The typed model of a namespace tree and the publish-time lint.

Segment references: in `flags/*.toml` and `segments/*.toml`, every key named `segment` (a
string) or `segments` (an array of strings), at any depth (inside tables and arrays of
tables), names a segment. References in `namespace.toml` are not references.

Lint returns every finding at once, sorted by (path, code, message):

| code | when |
|---|---|
| `missing_namespace` | no `namespace.toml` |
| `invalid_path` | a path other than `namespace.toml`, `flags/<key>.toml`, `segments/<name>.toml` |
| `invalid_utf8` | a file's bytes are not UTF-8 |
| `invalid_toml` | a file is not valid TOML |
| `invalid_segment_reference` | `segment` is not a string or `segments` not an array of strings |
| `unknown_segment` | a referenced segment has no `segments/<name>.toml` |
| `segment_cycle` | segments reference each other in a cycle (one finding per cycle) |
"""

from __future__ import annotations

import hashlib
import threading
import tomllib
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from headwater.flags import names
from headwater.flags.errors import LintFailed


@dataclass(frozen=True, slots=True)
class Finding:
    path: str
    code: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "code": self.code, "message": self.message}


@dataclass(frozen=True, slots=True)
class Model:
    """What closures need from a tree: its flags and the segment references of each file.
    `uses` maps a flag key or segment name to the segment names it references (existing or
    not); files that do not parse reference nothing."""

    flags: frozenset[str]
    segments: frozenset[str]
    flag_uses: Mapping[str, frozenset[str]]
    segment_uses: Mapping[str, frozenset[str]]


@dataclass(frozen=True, slots=True)
class _Parsed:
    model: Model
    findings: list[Finding]


def _references(value: Any, where: str, refs: set[str], bad: list[str]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            here = f"{where}.{key}" if where else key
            if key == "segment":
                if isinstance(item, str):
                    refs.add(item)
                else:
                    bad.append(f"{here} must be a string naming a segment")
                    continue
            elif key == "segments":
                if isinstance(item, list) and all(isinstance(s, str) for s in item):
                    refs.update(item)
                else:
                    bad.append(f"{here} must be an array of strings naming segments")
                    continue
            _references(item, here, refs, bad)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _references(item, f"{where}[{index}]", refs, bad)


def _load(path: str, content: bytes, findings: list[Finding]) -> dict[str, Any] | None:
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as exc:
        findings.append(
            Finding(path, "invalid_utf8", f"not UTF-8: {exc.reason} at byte {exc.start}")
        )
        return None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        findings.append(Finding(path, "invalid_toml", f"invalid TOML: {exc}"))
    except RecursionError:  # tomllib recurses per nesting level: a few hundred exhaust it
        findings.append(Finding(path, "invalid_toml", "invalid TOML: nested too deeply"))
    return None


# What one file contributes (its segment references and its own findings) depends only on
# its path and bytes: publishes that change one file of a large namespace parse one file.
_FILE_CACHE: OrderedDict[tuple[str, bytes], tuple[frozenset[str], tuple[Finding, ...]]] = (
    OrderedDict()
)
_FILE_CACHE_MAX = 20_000
_FILE_CACHE_LOCK = threading.Lock()


def _file(path: str, content: bytes) -> tuple[frozenset[str], tuple[Finding, ...]]:
    key = (path, hashlib.sha256(content).digest())
    with _FILE_CACHE_LOCK:
        hit = _FILE_CACHE.get(key)
        if hit is not None:
            _FILE_CACHE.move_to_end(key)
            return hit
    findings: list[Finding] = []
    document = _load(path, content, findings)
    refs: set[str] = set()
    if document is not None and path != names.NAMESPACE_FILE:
        bad: list[str] = []
        _references(document, "", refs, bad)
        findings.extend(Finding(path, "invalid_segment_reference", m) for m in bad)
    result = (frozenset(refs), tuple(findings))
    with _FILE_CACHE_LOCK:
        _FILE_CACHE[key] = result
        while len(_FILE_CACHE) > _FILE_CACHE_MAX:
            _FILE_CACHE.popitem(last=False)
    return result


def _parse(tree: Mapping[str, bytes]) -> _Parsed:
    findings: list[Finding] = []
    flag_uses: dict[str, frozenset[str]] = {}
    segment_uses: dict[str, frozenset[str]] = {}
    if names.NAMESPACE_FILE not in tree:
        findings.append(
            Finding(names.NAMESPACE_FILE, "missing_namespace", "namespace.toml is required")
        )
    for path in sorted(tree):
        flag, segment = names.flag_key_of(path), names.segment_name_of(path)
        if path != names.NAMESPACE_FILE and flag is None and segment is None:
            findings.append(
                Finding(
                    path,
                    "invalid_path",
                    "only namespace.toml, flags/<key>.toml and segments/<name>.toml are "
                    "allowed; keys and names match [a-z0-9][a-z0-9_-]{0,63}",
                )
            )
            continue
        refs, file_findings = _file(path, tree[path])
        findings.extend(file_findings)
        if flag is not None:
            flag_uses[flag] = frozenset(refs)
        elif segment is not None:
            segment_uses[segment] = frozenset(refs)
    model = Model(
        flags=frozenset(flag_uses),
        segments=frozenset(segment_uses),
        flag_uses=flag_uses,
        segment_uses=segment_uses,
    )
    return _Parsed(model, findings)


def build_model(tree: Mapping[str, bytes]) -> Model:
    """The model of any tree, linted or not (unparseable files reference nothing)."""
    return _parse(tree).model


def _unknown_segments(model: Model) -> Iterator[Finding]:
    users = [(names.flag_path(k), v) for k, v in model.flag_uses.items()] + [
        (names.segment_path(k), v) for k, v in model.segment_uses.items()
    ]
    for path, uses in users:
        for name in sorted(uses - model.segments):
            yield Finding(
                path,
                "unknown_segment",
                f"references segment {name!r} but {names.segment_path(name)!r} does not exist",
            )


def find_cycles(segment_uses: Mapping[str, frozenset[str]]) -> list[list[str]]:
    """The cycles a depth-first walk meets (at least one for every group of segments that
    reach each other), once each, rotated so the smallest name comes first: `["a", "b"]` is
    a -> b -> a, `["a"]` a self-reference. Only references to existing segments count."""
    cycles: set[tuple[str, ...]] = set()
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(segment_uses.get(node, frozenset())):
            if nxt not in segment_uses:
                continue
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt) :]
                low = cycle.index(min(cycle))
                cycles.add(tuple(cycle[low:] + cycle[:low]))
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for start in sorted(segment_uses):
        if start not in state:
            visit(start)
    return [list(c) for c in sorted(cycles)]


def lint(tree: Mapping[str, bytes]) -> list[Finding]:
    """Every finding for `tree`; empty when it may be committed."""
    return _lint(_parse(tree))


def _lint(parsed: _Parsed) -> list[Finding]:
    findings = parsed.findings + list(_unknown_segments(parsed.model))
    for cycle in find_cycles(parsed.model.segment_uses):
        chain = " -> ".join([*cycle, cycle[0]])
        findings.append(
            Finding(names.segment_path(cycle[0]), "segment_cycle", f"segment cycle: {chain}")
        )
    return sorted(findings, key=lambda f: (f.path, f.code, f.message))


def check(tree: Mapping[str, bytes]) -> Model:
    """The model of a tree that passes lint, or LintFailed (422) carrying every finding."""
    parsed = _parse(tree)
    findings = _lint(parsed)
    if findings:
        raise LintFailed(
            f"manifest failed lint with {len(findings)} finding(s)",
            details=[f.as_dict() for f in findings],
        )
    return parsed.model
