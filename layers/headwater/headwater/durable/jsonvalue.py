"""JSON values as Durable Streams reads them: RFC 6901 pointers into a decoded entry (MISSING
when one does not resolve, distinct from null), array flattening, and the date forms the
filter language, aggregates and index families accept (RFC 3339 with a zone, or a day)."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta, timezone
from enum import Enum
from typing import Final

__all__ = [
    "MISSING",
    "JsonPointerError",
    "flatten",
    "json_pointer_get",
    "json_type_name",
    "parse_date_ms",
    "parse_json_pointer",
]

_DATE_RE: Final = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})"
    r"(?:[Tt ]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]+))?"
    r"(?:([Zz])|([+-])([0-9]{2}):([0-9]{2})))?"
)
_ARRAY_INDEX_RE: Final = re.compile(r"0|[1-9][0-9]*")
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


class JsonPointerError(ValueError):
    """A string is not a valid RFC 6901 JSON pointer."""


class _Missing(Enum):
    MISSING = "MISSING"

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing.MISSING
"""Returned by ``json_pointer_get`` when the pointer does not resolve (distinct from JSON null)."""


@functools.lru_cache(maxsize=1024)
def parse_json_pointer(pointer: str) -> tuple[str, ...]:
    """Split an RFC 6901 pointer into unescaped reference tokens (``""`` is the whole doc)."""
    if not isinstance(pointer, str):
        raise JsonPointerError(f"JSON pointer must be a string, got {type(pointer).__name__}")
    if pointer == "":
        return ()
    if not pointer.startswith("/"):
        raise JsonPointerError(f"JSON pointer {pointer!r} must be empty or start with '/'")
    if re.search(r"~(?![01])", pointer):
        raise JsonPointerError(f"JSON pointer {pointer!r} has '~' not followed by 0 or 1")
    return tuple(t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/"))


def json_pointer_get(doc: object, pointer: str) -> object:
    """The value at ``pointer`` in ``doc`` or ``MISSING``; a bad pointer raises JsonPointerError.

    Array tokens must be canonical indexes (``0`` or no leading zero); ``-`` never resolves.
    """
    current = doc
    for token in parse_json_pointer(pointer):
        if type(current) is dict or isinstance(current, Mapping):  # dict first: the ABC is slow
            if token not in current:
                return MISSING
            current = current[token]
        elif isinstance(current, list | tuple):
            if not _ARRAY_INDEX_RE.fullmatch(token) or int(token) >= len(current):
                return MISSING
            current = current[int(token)]
        else:
            return MISSING
    return current


def flatten(value: object) -> Iterator[object]:
    if isinstance(value, list | tuple):
        for item in value:
            yield from flatten(item)
    else:
        yield value


def parse_date_ms(text: str) -> int | None:
    """RFC 3339 (zone required) or ``YYYY-MM-DD`` as UTC, to epoch milliseconds (floored)."""
    m = _DATE_RE.fullmatch(text)
    if m is None:
        return None
    year, month, day, hour, minute, second, frac, zulu, sign, off_h, off_m = m.groups()
    try:
        if hour is None:
            moment = datetime(int(year), int(month), int(day), tzinfo=UTC)
        else:
            offset = timedelta(0)
            if zulu is None:
                offset = timedelta(hours=int(off_h), minutes=int(off_m))
                offset = -offset if sign == "-" else offset
            micros = int((frac or "").ljust(6, "0")[:6])
            moment = datetime(
                int(year),
                int(month),
                int(day),
                int(hour),
                int(minute),
                int(second),
                micros,
                tzinfo=timezone(offset),
            )
    except ValueError:
        return None
    return (moment - _EPOCH) // timedelta(milliseconds=1)


def json_type_name(value: object, *, integer: bool = False) -> str:
    """The JSON type of a decoded value, as error messages name it: "null", "boolean",
    "number", "string", "array" or "object" (with `integer`, JSON Schema's "integer" for an
    int); a value JSON cannot hold is named by its Python type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) and integer:
        return "integer"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__
