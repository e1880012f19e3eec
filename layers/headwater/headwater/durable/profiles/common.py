"""What the profiles share: their constants, `ProfileError`, and the small checks and value
readings every kind uses (objects, unknown keys, string lists, numbers in JSON or text)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final, TypeAlias

PROFILE_API_VERSION: Final = "durable.streams/profile/v1"
METRICS_API_VERSION: Final = "durable.streams/metrics/v1"
INTERNAL_METRICS_STREAM: Final = "__stream_metrics__"
KINDS: Final = ("evlog", "generic", "metrics", "state-protocol")
DEFAULT_PROFILE: Final[Mapping[str, str]] = {"kind": "generic"}

Profile: TypeAlias = dict[str, Any]

_JSON_KINDS: Final = frozenset({"evlog", "metrics", "state-protocol"})
_REGISTRY_KINDS: Final = frozenset({"evlog", "metrics"})
_MAX_LIST: Final = 64
_MAX_INT_DIGITS: Final = 400  # longer digit runs parse as float (inf -> rejected)
_NUMBER_RE: Final = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_INT_TEXT_RE: Final = re.compile(r"[+-]?[0-9]+")
_TRACEPARENT_RE: Final = re.compile(
    r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(?:-.+)?", re.IGNORECASE
)
_RFC3339_RE: Final = re.compile(
    r"([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2})(?:\.[0-9]{1,9})?"
    r"(Z|[+-][0-9]{2}:[0-9]{2})"
)


class ProfileError(ValueError):
    """A rejected profile update or append value; ``str(err)`` is client facing (HTTP 400)."""


# --------------------------------------------------------------------------- small helpers


def _object(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ProfileError(f"{where} must be an object")
    return value


def _reject_unknown(raw: Mapping[str, Any], allowed: Sequence[str], where: str) -> None:
    for key in raw:
        if key not in allowed:
            raise ProfileError(f"{where}.{key} is not supported")


def _media_type(content_type: str | None) -> str | None:
    if not content_type:
        return None
    base = content_type.split(";", 1)[0].strip().lower()
    return base or None


def _is_number(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and (isinstance(value, int) or math.isfinite(value))
    )


def _string_list(raw: object, where: str, *, lower: bool) -> list[str]:
    if not isinstance(raw, list):
        raise ProfileError(f"{where} must be an array of strings")
    if len(raw) > _MAX_LIST:
        raise ProfileError(f"{where} too large (max {_MAX_LIST})")
    out: list[str] = []
    for item in raw:
        if not isinstance(item, str):
            raise ProfileError(f"{where} must be an array of strings")
        text = item.strip().lower() if lower else item.strip()
        if not text:
            raise ProfileError(f"{where} must not contain empty strings")
        if text not in out:
            out.append(text)
    return out


def _kind(profile: Mapping[str, Any]) -> str:
    kind = profile.get("kind")
    if kind not in KINDS:
        raise ValueError(f"not a canonical profile: kind {kind!r}")
    return str(kind)


# --------------------------------------------------------------------------- install

_KEYWORD_FLAGS: Final[Mapping[str, bool]] = {
    "exact": True,
    "prefix": True,
    "exists": True,
    "sortable": True,
}
_COLUMN_FLAGS: Final[Mapping[str, bool]] = {
    "exact": True,
    "column": True,
    "exists": True,
    "sortable": True,
}


def _field(kind: str, pointer: str, **flags: object) -> dict[str, Any]:
    return {"kind": kind, "bindings": [{"version": 1, "jsonPointer": pointer}], **flags}


def _nullable(json_type: str | list[str]) -> dict[str, Any]:
    types = json_type if isinstance(json_type, list) else [json_type]
    return {"type": [*types, "null"]}


# --------------------------------------------------------------------------- value helpers


def _text(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    stripped = value.strip()
    return stripped or None


def _number(value: object) -> int | float | None:
    """A finite JSON number, or a numeric string (reference ``Number(value)``), else ``None``."""
    if _is_number(value):
        return value  # type: ignore[return-value]
    if isinstance(value, str):
        stripped = value.strip()
        if _INT_TEXT_RE.fullmatch(stripped) and len(stripped) <= _MAX_INT_DIGITS:
            return int(stripped)
        if _NUMBER_RE.fullmatch(stripped):
            parsed = float(stripped)
            return parsed if math.isfinite(parsed) else None
    return None


def _integer(value: object) -> int | None:
    """An integral number or numeric string (``200`` or ``"200"``, not ``200.5``)."""
    num = _number(value)
    if num is None or (isinstance(num, float) and not num.is_integer()):
        return None
    return int(num)


def _truncated(value: object) -> int | None:
    num = _number(value)
    return None if num is None else math.trunc(num)


def _dotted(value: Mapping[str, Any], path: str) -> str | None:
    current: object = value
    for part in path.split("."):
        if not isinstance(current, Mapping):
            return None
        current = current.get(part)
    return _text(current)


def _iso_ms(now_ms: int) -> str:
    moment = datetime.fromtimestamp(now_ms / 1000, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now_ms % 1000:03d}Z"
