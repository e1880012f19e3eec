"""What the registry's parts share: the API versions, the errors, and the small checks of
update bodies (types, pointers, unknown keys, RFC 3339 times)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final, Literal, TypeAlias

from headwater.durable.jsonvalue import (
    JsonPointerError,
    json_type_name,
    parse_json_pointer,
)

REGISTRY_API_VERSION: Final = "durable.streams/schema-registry/v1"
LENS_API_VERSION: Final = "durable.lens/v1"
UPDATE_FIELDS: Final = ("apiVersion", "schema", "lens", "routingKey", "search")

Registry: TypeAlias = dict[str, Any]
JsonType: TypeAlias = Literal["string", "number", "integer", "boolean", "null", "object", "array"]

_JSON_TYPES: Final[frozenset[str]] = frozenset(
    {"string", "number", "integer", "boolean", "null", "object", "array"}
)
_BUILTINS: Final[frozenset[str]] = frozenset(
    {
        "lowercase",
        "uppercase",
        "string_to_int",
        "int_to_string",
        "rfc3339_to_unix_millis",
        "unix_millis_to_rfc3339",
    }
)
_MAX_LENS_DEPTH: Final = 16
_MAX_MESSAGE: Final = 300
_INDEX_RE: Final = re.compile(r"0|[1-9][0-9]*")
_INT_TEXT_RE: Final = re.compile(r"[+-]?[0-9]+")
_DURATION_RE: Final = re.compile(r"([0-9]+)(ms|s|m|h|d)")
_RFC3339_RE: Final = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?"
    r"(?:[Zz]|[+-][0-9]{2}:[0-9]{2})"
)


class SchemaError(ValueError):
    """A rejected schema update, append value or routing key; ``str(err)`` is client facing."""


class SchemaVersionConflict(SchemaError):
    """A lens whose ``from``/``to`` do not match the registry (the reference answers 409)."""


class LensApplyError(ValueError):
    """A stored value cannot be promoted through the lens chain (a server-side failure)."""


# --------------------------------------------------------------------------- small helpers


def _truncate(text: str) -> str:
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."


def _type_name(value: object) -> str:
    """JSON Schema's name for the value's type (ints are "integer")."""
    return json_type_name(value, integer=True)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _pointer(raw: object, where: str) -> tuple[str, ...]:
    if not isinstance(raw, str):
        raise SchemaError(f"{where} must be a JSON pointer string, got {_type_name(raw)}")
    try:
        return parse_json_pointer(raw)
    except JsonPointerError as exc:
        raise SchemaError(f"{where}: {exc}") from None


def _reject_unknown(raw: Mapping[str, object], allowed: Sequence[str], where: str) -> None:
    for key in raw:
        if key not in allowed:
            raise SchemaError(f"{where}.{key} is not supported")


def _require_keys(raw: Mapping[str, object], required: Sequence[str], where: str) -> None:
    for key in required:
        if key not in raw:
            raise SchemaError(f"{where}.{key} is required")


def _is_rfc3339(text: str) -> bool:
    if not _RFC3339_RE.fullmatch(text):
        return False
    try:
        _parse_rfc3339_ms(text)
    except ValueError:
        return False
    return True


def _parse_rfc3339_ms(text: str) -> int:
    if not _RFC3339_RE.fullmatch(text):
        raise ValueError(f"not an RFC 3339 timestamp: {text!r}")
    head, frac = text[:19], ""
    rest = text[19:]
    if rest.startswith("."):
        digits = re.match(r"\.([0-9]+)", rest)
        assert digits is not None
        frac, rest = digits.group(1), rest[digits.end() :]
    zone = "+00:00" if rest in ("Z", "z") else rest
    dt = datetime.fromisoformat(head.replace("t", "T") + zone)
    millis = int((frac + "000")[:3])
    return int(dt.timestamp()) * 1000 + millis
