"""Name rules of the flag surface. The spec names no character set, so we pick a conservative
one (docs/flags.md): lower-case ASCII so paths never collide on case-insensitive filesystems,
no `,` `:` `/` `.` so names survive the `ns=<slug>:<a>,<b>` syntax and `flags/<key>.toml`.

- flag keys and segment names: `[a-z0-9][a-z0-9_-]{0,63}` (1-64 characters)
- namespace slugs and tenants: `[a-z0-9][a-z0-9-]{0,62}` (1-63 characters)
"""

from __future__ import annotations

import re

KEY_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
SLUG_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")

NAMESPACE_FILE = "namespace.toml"
FLAGS_DIR = "flags/"
SEGMENTS_DIR = "segments/"
SUFFIX = ".toml"

WILDCARD = "*"


def is_key(name: str) -> bool:
    """A valid flag key or segment name."""
    return KEY_RE.fullmatch(name) is not None


def is_slug(name: str) -> bool:
    """A valid namespace slug or tenant id."""
    return SLUG_RE.fullmatch(name) is not None


def flag_path(key: str) -> str:
    return f"{FLAGS_DIR}{key}{SUFFIX}"


def segment_path(name: str) -> str:
    return f"{SEGMENTS_DIR}{name}{SUFFIX}"


def _named(path: str, prefix: str) -> str | None:
    if path.startswith(prefix) and path.endswith(SUFFIX):
        name = path[len(prefix) : -len(SUFFIX)]
        if is_key(name):
            return name
    return None


def flag_key_of(path: str) -> str | None:
    """`checkout` for `flags/checkout.toml`; None for any other path."""
    return _named(path, FLAGS_DIR)


def segment_name_of(path: str) -> str | None:
    """`employees` for `segments/employees.toml`; None for any other path."""
    return _named(path, SEGMENTS_DIR)


def is_manifest_path(path: str) -> bool:
    """One of the three kinds of path a namespace tree may hold."""
    return (
        path == NAMESPACE_FILE
        or flag_key_of(path) is not None
        or (segment_name_of(path) is not None)
    )
