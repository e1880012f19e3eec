"""How deep a JSON text nests, without parsing it: the cheap pre-check for parsers that
recurse (the stdlib's, per level). Standard library only, so the pure modules the Python
client shares (flags.manifest, through flags.tarball) need no orjson; jsoncodec raises the
same error when a value nests past its cap."""

from __future__ import annotations

import re


class NestingTooDeep(ValueError):
    """Arrays and objects nested deeper than the limit; `pos` is where it was exceeded."""

    def __init__(self, limit: int, pos: int) -> None:
        super().__init__(f"JSON nested deeper than {limit} levels (at char {pos})")
        self.limit = limit
        self.pos = pos


# A whole string (skipped, so brackets inside it do not count) or one bracket.
_STRUCTURE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)


def nesting_error(text: str, limit: int) -> NestingTooDeep | None:
    """The error for JSON `text` nesting arrays/objects deeper than `limit`, or None. A cheap
    pre-check for parsers that recurse: strings are skipped whole, so brackets inside them do
    not count. (Meant for valid-looking JSON: a malformed text gets an approximate answer.)"""
    if text.count("[") + text.count("{") <= limit:
        return None
    depth = 0
    for m in _STRUCTURE.finditer(text):
        ch = m.group()
        if ch in "[{":
            depth += 1
            if depth > limit:
                return NestingTooDeep(limit, m.start())
        elif ch in "]}":
            depth -= 1
    return None
