"""The `state-protocol` profile: its `touch` configuration (reference `src/touch/spec.ts`)
and the check of each appended value as a State Protocol change or control message
(reference `ingest.ts`); values are stored unchanged."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final, TypeAlias

from headwater.durable.offsets import OffsetError, decode_offset
from headwater.durable.profiles.common import (
    _RFC3339_RE,
    Profile,
    ProfileError,
    _is_number,
    _object,
    _reject_unknown,
)

# --------------------------------------------------------------------------- touch config

TOUCH_DEFAULTS: Final[Mapping[str, Any]] = {
    "enabled": True,
    "coarseIntervalMs": 100,
    "touchCoalesceWindowMs": 100,
    "onMissingBefore": "coarse",
    "lagDegradeFineTouchesAtSourceOffsets": 5000,
    "lagRecoverFineTouchesAtSourceOffsets": 1000,
    "fineTouchBudgetPerBatch": 2000,
    "fineTokensPerSecond": 200_000,
    "fineBurstTokens": 400_000,
    "lagReservedFineTouchBudgetPerBatch": 200,
    "memory": {
        "bucketMs": 100,
        "filterPow2": 22,
        "k": 4,
        "pendingMaxKeys": 100_000,
        "keyIndexMaxKeys": 32,
        "hotKeyTtlMs": 10_000,
        "hotTemplateTtlMs": 10_000,
        "hotMaxKeys": 1_000_000,
        "hotMaxTemplates": 4096,
    },
    "templates": {
        "defaultInactivityTtlMs": 3_600_000,
        "lastSeenPersistIntervalMs": 300_000,
        "gcIntervalMs": 60_000,
        "maxActiveTemplatesPerEntity": 256,
        "maxActiveTemplatesPerStream": 2048,
        "activationRateLimitPerMinute": 100,
    },
}

# (integer?, lower bound, lower bound inclusive?, upper bound or None)
_Rule: TypeAlias = tuple[bool, int, bool, int | None]
_TOUCH_TOP_RULES: Final[dict[str, _Rule]] = {
    "coarseIntervalMs": (False, 0, False, None),
    "touchCoalesceWindowMs": (False, 0, False, None),
    "lagDegradeFineTouchesAtSourceOffsets": (True, 0, True, None),
    "lagRecoverFineTouchesAtSourceOffsets": (True, 0, True, None),
    "fineTouchBudgetPerBatch": (True, 0, True, None),
    "fineTokensPerSecond": (True, 0, True, None),
    "fineBurstTokens": (True, 0, True, None),
    "lagReservedFineTouchBudgetPerBatch": (True, 0, True, None),
}
_TOUCH_MEMORY_RULES: Final[dict[str, _Rule]] = {
    "bucketMs": (True, 0, False, None),
    "filterPow2": (True, 10, True, 30),
    "k": (True, 1, True, 8),
    "pendingMaxKeys": (True, 0, False, None),
    "keyIndexMaxKeys": (True, 1, True, 1024),
    "hotKeyTtlMs": (True, 0, False, None),
    "hotTemplateTtlMs": (True, 0, False, None),
    "hotMaxKeys": (True, 0, False, None),
    "hotMaxTemplates": (True, 0, False, None),
}
_TOUCH_TEMPLATE_RULES: Final[dict[str, _Rule]] = {
    "defaultInactivityTtlMs": (False, 0, True, None),
    "lastSeenPersistIntervalMs": (False, 0, False, None),
    "gcIntervalMs": (False, 0, False, None),
    "maxActiveTemplatesPerEntity": (False, 0, False, None),
    "maxActiveTemplatesPerStream": (False, 0, False, None),
    "activationRateLimitPerMinute": (False, 0, True, None),
}
_ON_MISSING_BEFORE: Final = ("coarse", "skipBefore", "error")


def _rule_text(rule: _Rule) -> str:
    integer, low, inclusive, high = rule
    kind = "an integer" if integer else "a number"
    if high is not None:
        return f"must be {kind} in [{low},{high}]"
    return f"must be {kind} {'>=' if inclusive else '>'} {low}"


def _check_number(value: object, rule: _Rule, where: str) -> int | float:
    integer, low, inclusive, high = rule
    ok = _is_number(value)
    if ok and integer:
        ok = isinstance(value, int) or float(value).is_integer()  # type: ignore[arg-type]
    if ok:
        num: int | float = value  # type: ignore[assignment]
        ok = (num >= low if inclusive else num > low) and (high is None or num <= high)
    if not ok:
        raise ProfileError(f"{where} {_rule_text(rule)}")
    result: int | float = value  # type: ignore[assignment]
    return int(result) if integer else result


def _check_group(raw: object, rules: Mapping[str, _Rule], where: str) -> dict[str, int | float]:
    obj = _object(raw, where)
    _reject_unknown(obj, tuple(rules), where)
    return {
        key: _check_number(obj[key], rule, f"{where}.{key}")
        for key, rule in rules.items()
        if key in obj
    }


def _parse_touch(raw: object, where: str) -> dict[str, Any]:
    obj = _object(raw, where)
    allowed = ("enabled", "onMissingBefore", "memory", "templates", *_TOUCH_TOP_RULES)
    _reject_unknown(obj, allowed, where)
    enabled = obj.get("enabled", False)
    if not isinstance(enabled, bool):
        raise ProfileError(f"{where}.enabled must be a boolean")
    top = _check_group(
        {k: v for k, v in obj.items() if k in _TOUCH_TOP_RULES}, _TOUCH_TOP_RULES, where
    )
    on_missing = obj.get("onMissingBefore", "coarse")
    if on_missing not in _ON_MISSING_BEFORE:
        raise ProfileError(f"{where}.onMissingBefore must be coarse|skipBefore|error")
    memory = _check_group(obj.get("memory", {}), _TOUCH_MEMORY_RULES, f"{where}.memory")
    templates = _check_group(obj.get("templates", {}), _TOUCH_TEMPLATE_RULES, f"{where}.templates")
    if not enabled:
        return {"enabled": False}
    out: dict[str, Any] = copy.deepcopy(dict(TOUCH_DEFAULTS))
    out.update(top)
    out["onMissingBefore"] = on_missing
    out["memory"].update(memory)
    out["templates"].update(templates)
    return out


def parse(obj: Mapping[str, Any]) -> Profile:
    _reject_unknown(obj, ("kind", "touch"), "profile")
    out: Profile = {"kind": "state-protocol"}
    if "touch" in obj:
        out["touch"] = _parse_touch(obj["touch"], "profile.touch")
    return out


# --------------------------------------------------------------------------- state-protocol

_CHANGE_KEYS: Final = ("type", "key", "value", "old_value", "headers")
_CHANGE_HEADER_KEYS: Final = ("operation", "txid", "timestamp")
_CONTROL_HEADER_KEYS: Final = ("control", "offset")
_OPERATIONS: Final = ("insert", "update", "delete")
_CONTROLS: Final = ("snapshot-start", "snapshot-end", "reset")


def _is_rfc3339(text: str) -> bool:
    match = _RFC3339_RE.fullmatch(text)
    if match is None:
        return False
    zone = match.group(2)
    try:
        datetime.fromisoformat(match.group(1) + ("+00:00" if zone == "Z" else zone))
    except ValueError:
        return False
    return True


def _non_empty(value: object, where: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ProfileError(f"{where} must be a non-empty string")


def check(value: object) -> None:
    """Reference ``ingest.ts``: a change (``headers.operation``) or control message."""
    if not isinstance(value, Mapping):
        raise ProfileError("state-protocol records must be JSON objects")
    headers = value.get("headers")
    if not isinstance(headers, Mapping):
        raise ProfileError("state-protocol record.headers must be an object")
    where = "state-protocol record"
    if "control" in headers and "operation" in headers:
        raise ProfileError(f"{where}.headers cannot mix control and operation")
    if "control" in headers:
        _reject_unknown(value, ("headers",), where)
        _reject_unknown(headers, _CONTROL_HEADER_KEYS, f"{where}.headers")
        if headers["control"] not in _CONTROLS:
            raise ProfileError(
                f"{where}.headers.control must be snapshot-start, snapshot-end, or reset"
            )
        if "offset" in headers:
            offset = headers["offset"]
            try:
                if not isinstance(offset, str):
                    raise OffsetError("not a string")
                decode_offset(offset)
            except OffsetError:
                raise ProfileError(
                    f"{where}.headers.offset must be a valid stream offset string"
                ) from None
        return
    if "operation" not in headers:
        raise ProfileError(f"{where}.headers must contain operation or control")
    _reject_unknown(value, _CHANGE_KEYS, where)
    _reject_unknown(headers, _CHANGE_HEADER_KEYS, f"{where}.headers")
    _non_empty(value.get("type"), f"{where}.type")
    _non_empty(value.get("key"), f"{where}.key")
    operation = headers["operation"]
    if operation not in _OPERATIONS:
        raise ProfileError(f"{where}.headers.operation must be insert, update, or delete")
    if operation != "delete" and "value" not in value:
        raise ProfileError(f"state-protocol {operation} records must include value")
    if "txid" in headers:
        _non_empty(headers["txid"], f"{where}.headers.txid")
    if "timestamp" in headers:
        stamp = headers["timestamp"]
        if not isinstance(stamp, str) or not _is_rfc3339(stamp):
            raise ProfileError(f"{where}.headers.timestamp must be a valid RFC 3339 timestamp")
