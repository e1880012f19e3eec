"""Stream profiles of Durable Streams (protocol §2.3, §7A): ``GET``/``POST /_profile``.

Pure and storage-free. A profile is a plain JSON ``dict`` (what ``GET /_profile`` returns under
``"profile"``); every function takes it and returns new values. The design follows the reference
Bun + TypeScript server (``prisma/streams``: ``docs/stream-profiles.md``,
``docs/profile-{generic,evlog,metrics,state-protocol}.md``, ``src/profiles/**``,
``src/touch/spec.ts``): profile = semantics, schema = structure.

Public API:

* ``parse_profile_update(body, content_type)``: validate a ``POST /_profile`` body
  ``{"apiVersion": PROFILE_API_VERSION (optional), "profile": {"kind": ..., ...}}`` against the
  stream's content type; return the canonical profile to store. Client errors raise
  ``ProfileError`` (HTTP 400).
* ``check_install(profile, *, current_kind, stream_is_empty)``: may this profile be installed on
  the stream now, and must the schema registry be (re)written? (see "Installing" below)
* ``install(profile, stream)``: the ``schema.apply_update`` body the install writes, or ``None``.
* ``normalize(profile, value, *, now_ms=None)``: one JSON append value -> the value to store.
* ``derived_routing_key(profile, value)``: the profile's routing key for a *normalized* value;
  callers use it only when the schema registry has no ``routingKey``.
* ``resource(profile)``, ``touch_config(profile)``, ``DEFAULT_PROFILE``, ``KINDS``.

Kinds (``otel-traces`` of the reference is not supported):

* ``generic`` ``{"kind": "generic"}``: no options, no registry, appends unchanged.
* ``evlog`` ``{"kind": "evlog", "redactKeys": [str], "correlation": {"requestIdFields": [str],
  "traceContextFields": [str], "parseTraceparent": bool}, "observability": {"request":
  {"tracesStream": str}}}``, all optional. Canonically ``redactKeys`` are trimmed, lower-cased and
  de-duplicated (max 64), correlation lists trimmed and de-duplicated (max 64); empty
  ``correlation``/``observability`` objects are dropped.
* ``metrics`` ``{"kind": "metrics"}``: no options.
* ``state-protocol`` ``{"kind": "state-protocol", "touch": {...}}``: ``touch`` optional. With
  ``enabled: true`` the canonical ``touch`` carries every option with the reference defaults
  (``TOUCH_DEFAULTS``); otherwise it is ``{"enabled": false}``. The ``/touch/*`` routes exist
  only when ``touch.enabled`` (``touch_config``).

evlog, metrics and state-protocol need an ``application/json`` stream (media type compared
without parameters, case-insensitive); the message says ``"... requires application/json stream
content-type"`` as in the reference.

Installing (reference ``persistProfileResult`` + ``replaceRegistryResult``):

* evlog/metrics *replace* the stream's registry with a fresh one: apply ``install()`` to
  ``schema.empty_registry(stream)`` (never to the existing registry) with
  ``stream_is_empty=True``; the boundary lands at the empty stream's ``end_offset``. evlog installs
  schema v1 + its ``search`` (fields, aliases, defaultFields, no rollups: the reference's
  ``EVLOG_DEFAULT_SEARCH_CONFIG`` has none although its doc mentions them); metrics installs
  schema v1 + ``routingKey /seriesKey (required)`` + ``search`` with the ``metrics`` rollup. The
  internal ``__stream_metrics__`` stream gets the lean registry (schema only), as in the
  reference.
* generic/state-protocol never touch the registry (switching evlog -> generic keeps the evlog
  registry, as in the reference).
* Non-empty streams: the reference rejects a *new* evlog install ("must be installed before
  appending data"). We reject a new metrics install on a non-empty stream too (the reference
  silently replaces the registry with a boundary at offset 0, which would leave earlier entries
  unvalidated and unpromotable; our ``schema.apply_update`` refuses a first schema on a non-empty
  stream anyway). Re-installing the *same* kind on a non-empty stream is allowed but keeps the
  existing registry (the reference resets it to the defaults, discarding any evolution).

Normalization (append time; errors raise ``ProfileError``, HTTP 400):

* evlog: the value must be an object. Output has exactly the keys of ``EVLOG_ENVELOPE_FIELDS``
  (all present, ``null`` when unknown): strings are trimmed (empty -> ``null``); ``status`` an
  integer (numeric strings accepted), ``duration`` a number; ``timestamp`` any non-empty string
  as given, else ``now`` as ``YYYY-MM-DDTHH:MM:SS.mmmZ``; ``level`` one of
  debug/info/warn/error, else derived (``why``/``fix``/``link`` -> error, status >= 500 -> error,
  >= 400 -> warn, else info); ``requestId`` from ``correlation.requestIdFields`` (default
  ``requestId``, ``context.requestId``; dotted paths); ``traceId``/``spanId`` from the field,
  ``traceContext.<field>``, configured ``traceContextFields``, then a W3C ``traceparent`` (in
  ``traceparent``, ``traceContext.traceparent``, ``context.traceparent``,
  ``headers.traceparent``) unless ``parseTraceparent`` is false; ``sampling`` copied if present;
  every non-reserved key is moved into ``context`` (merged over an object ``context``; a non-object
  ``context`` is kept as ``context.context``); keys of ``context`` matching ``redactKeys`` or the
  defaults (password, token, secret, authorization, cookie, apikey; case-insensitive, at any
  depth) become ``"[REDACTED]"`` and their dotted paths are listed in ``redaction.keys``.
* metrics: the canonical interval envelope (``METRICS_ENVELOPE_FIELDS``; rules in
  ``_normalize_metrics``).
  ``seriesKey`` is ``metricKind|temporality|metric|unit|stream|instance|dimensionKey`` with
  ``dimensionKey`` the sorted ``k=v`` attribute pairs joined by NUL (``null`` without
  attributes). Attribute keys and pairs are sorted by code point (the reference uses
  ``localeCompare``).
* state-protocol: the value is validated as a State Protocol change or control message
  (reference ``ingest.ts``) and returned unchanged.
* generic: identity.
"""

from __future__ import annotations

import copy
import math
import re
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final, TypeAlias

from headwater.durable.offsets import OffsetError, decode_offset
from headwater.durable.schema import REGISTRY_API_VERSION

__all__ = [
    "DEFAULT_PROFILE",
    "EVLOG_ENVELOPE_FIELDS",
    "INTERNAL_METRICS_STREAM",
    "KINDS",
    "METRICS_API_VERSION",
    "METRICS_ENVELOPE_FIELDS",
    "PROFILE_API_VERSION",
    "TOUCH_DEFAULTS",
    "Profile",
    "ProfileError",
    "check_install",
    "derived_routing_key",
    "install",
    "normalize",
    "parse_profile_update",
    "resource",
    "touch_config",
]

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


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


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


# --------------------------------------------------------------------------- profile updates


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


def _parse_evlog(obj: Mapping[str, Any]) -> Profile:
    _reject_unknown(obj, ("kind", "redactKeys", "correlation", "observability"), "profile")
    out: Profile = {"kind": "evlog"}
    if "redactKeys" in obj:
        out["redactKeys"] = _string_list(obj["redactKeys"], "profile.redactKeys", lower=True)
    if "correlation" in obj:
        where = "profile.correlation"
        raw = _object(obj["correlation"], where)
        _reject_unknown(raw, ("requestIdFields", "traceContextFields", "parseTraceparent"), where)
        corr: dict[str, Any] = {}
        for key in ("requestIdFields", "traceContextFields"):
            if key in raw:
                corr[key] = _string_list(raw[key], f"{where}.{key}", lower=False)
        if "parseTraceparent" in raw:
            if not isinstance(raw["parseTraceparent"], bool):
                raise ProfileError(f"{where}.parseTraceparent must be a boolean")
            corr["parseTraceparent"] = raw["parseTraceparent"]
        if corr:
            out["correlation"] = corr
    if "observability" in obj:
        where = "profile.observability"
        raw = _object(obj["observability"], where)
        _reject_unknown(raw, ("request",), where)
        if "request" in raw:
            request = _object(raw["request"], f"{where}.request")
            _reject_unknown(request, ("tracesStream",), f"{where}.request")
            if "tracesStream" in request:
                traces = request["tracesStream"]
                if not isinstance(traces, str):
                    raise ProfileError(f"{where}.request.tracesStream must be a string")
                if not traces.strip():
                    raise ProfileError(f"{where}.request.tracesStream must not be empty")
                out["observability"] = {"request": {"tracesStream": traces.strip()}}
    return out


def _parse_state_protocol(obj: Mapping[str, Any]) -> Profile:
    _reject_unknown(obj, ("kind", "touch"), "profile")
    out: Profile = {"kind": "state-protocol"}
    if "touch" in obj:
        out["touch"] = _parse_touch(obj["touch"], "profile.touch")
    return out


def parse_profile_update(body: object, content_type: str | None) -> Profile:
    """Validate a ``POST /_profile`` body for a stream of ``content_type``; the canonical profile.

    Raises ``ProfileError`` for a malformed body, an unknown kind or option, a wrong
    ``apiVersion`` (it may be omitted) or a kind that needs an ``application/json`` stream.
    """
    if not isinstance(body, Mapping):
        raise ProfileError("profile update must be a JSON object")
    for key in body:
        if key not in ("apiVersion", "profile"):
            raise ProfileError(
                f"profile update field {key!r} is not supported; accepted fields: "
                "apiVersion, profile"
            )
    if "apiVersion" in body and body["apiVersion"] != PROFILE_API_VERSION:
        raise ProfileError(f"apiVersion must be {PROFILE_API_VERSION!r}")
    if "profile" not in body:
        raise ProfileError("profile is required")
    obj = _object(body["profile"], "profile")
    kind = obj.get("kind")
    if not isinstance(kind, str) or not kind.strip():
        raise ProfileError("profile.kind must be a non-empty string")
    if kind not in KINDS:
        raise ProfileError(f"profile.kind must be {'|'.join(KINDS)}")
    profile: Profile
    if kind == "generic":
        _reject_unknown(obj, ("kind",), "profile")
        profile = {"kind": "generic"}
    elif kind == "metrics":
        _reject_unknown(obj, ("kind",), "profile")
        profile = {"kind": "metrics"}
    elif kind == "evlog":
        profile = _parse_evlog(obj)
    else:
        profile = _parse_state_protocol(obj)
    if kind in _JSON_KINDS and _media_type(content_type) != "application/json":
        raise ProfileError(f"{kind} profile requires application/json stream content-type")
    return profile


def resource(profile: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``GET /_profile`` body; ``None`` (nothing stored) means ``generic``."""
    chosen = profile if profile is not None else DEFAULT_PROFILE
    return {"apiVersion": PROFILE_API_VERSION, "profile": copy.deepcopy(dict(chosen))}


def touch_config(profile: Mapping[str, Any]) -> dict[str, Any] | None:
    """The enabled touch config of a state-protocol profile, else ``None`` (no ``/touch/*``)."""
    if profile.get("kind") != "state-protocol":
        return None
    touch = profile.get("touch")
    if not isinstance(touch, Mapping) or touch.get("enabled") is not True:
        return None
    return copy.deepcopy(dict(touch))


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


EVLOG_ENVELOPE_FIELDS: Final = (
    "timestamp",
    "level",
    "service",
    "environment",
    "version",
    "region",
    "requestId",
    "traceId",
    "spanId",
    "method",
    "path",
    "status",
    "duration",
    "message",
    "why",
    "fix",
    "link",
    "sampling",
    "redaction",
    "context",
)
_EVLOG_STRING_FIELDS: Final = (
    "service",
    "environment",
    "version",
    "region",
    "requestId",
    "traceId",
    "spanId",
    "method",
    "path",
    "message",
    "why",
    "fix",
    "link",
)

_EVLOG_SCHEMA: Final[Mapping[str, Any]] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "timestamp": {"type": "string"},
        "level": {"type": "string", "enum": ["debug", "info", "warn", "error"]},
        **{name: _nullable("string") for name in _EVLOG_STRING_FIELDS},
        "status": _nullable("integer"),
        "duration": _nullable("number"),
        "sampling": {"type": ["object", "null"], "additionalProperties": True},
        "redaction": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"keys": {"type": "array", "items": {"type": "string"}}},
            "required": ["keys"],
        },
        "context": {"type": "object", "additionalProperties": True},
    },
    "required": list(EVLOG_ENVELOPE_FIELDS),
}

_LOWER_KEYWORD: Final[Mapping[str, Any]] = {
    "normalizer": "lowercase_v1",
    **_KEYWORD_FLAGS,
    "aggregatable": True,
}
_TEXT: Final[Mapping[str, Any]] = {"analyzer": "unicode_word_v1", "exists": True, "positions": True}

_EVLOG_SEARCH: Final[Mapping[str, Any]] = {
    "profile": "evlog",
    "primaryTimestampField": "timestamp",
    "aliases": {
        "env": "environment",
        "msg": "message",
        "req": "requestId",
        "span": "spanId",
        "time": "timestamp",
        "trace": "traceId",
        "ts": "timestamp",
    },
    "defaultFields": [
        {"field": "message", "boost": 2},
        {"field": "why", "boost": 1.5},
        {"field": "fix", "boost": 1.25},
        {"field": "error.message", "boost": 2},
    ],
    "fields": {
        "timestamp": _field("date", "/timestamp", **_COLUMN_FLAGS, aggregatable=True),
        "level": _field("keyword", "/level", **_LOWER_KEYWORD),
        "service": _field("keyword", "/service", **_LOWER_KEYWORD),
        "environment": _field("keyword", "/environment", **_LOWER_KEYWORD),
        "requestId": _field("keyword", "/requestId", **_KEYWORD_FLAGS),
        "traceId": _field("keyword", "/traceId", **_KEYWORD_FLAGS),
        "spanId": _field("keyword", "/spanId", **_KEYWORD_FLAGS),
        "path": _field("keyword", "/path", **_KEYWORD_FLAGS, aggregatable=True),
        "method": _field("keyword", "/method", **_LOWER_KEYWORD),
        "status": _field("integer", "/status", **_COLUMN_FLAGS, aggregatable=True),
        "duration": _field("float", "/duration", **_COLUMN_FLAGS, aggregatable=True),
        "message": _field("text", "/message", **_TEXT),
        "why": _field("text", "/why", **_TEXT),
        "fix": _field("text", "/fix", **_TEXT),
        "error.message": _field("text", "/context/error/message", **_TEXT),
    },
}

METRICS_ENVELOPE_FIELDS: Final = (
    "apiVersion",
    "kind",
    "metric",
    "unit",
    "metricKind",
    "temporality",
    "windowStart",
    "windowEnd",
    "intervalMs",
    "instance",
    "stream",
    "tags",
    "attributes",
    "dimensionPairs",
    "dimensionKey",
    "seriesKey",
    "count",
    "sum",
    "min",
    "max",
    "avg",
    "p50",
    "p95",
    "p99",
    "buckets",
    "summary",
)
_STRING_MAP: Final[Mapping[str, Any]] = {
    "type": "object",
    "additionalProperties": {"type": "string"},
}
_NUMBER_MAP: Final[Mapping[str, Any]] = {
    "type": "object",
    "additionalProperties": {"type": "number"},
}

_METRICS_SCHEMA: Final[Mapping[str, Any]] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"type": "string", "const": METRICS_API_VERSION},
        "kind": {"type": "string", "const": "interval"},
        "metric": {"type": "string"},
        "unit": {"type": "string"},
        "metricKind": {"type": "string"},
        "temporality": {"type": "string"},
        "windowStart": {"type": "integer"},
        "windowEnd": {"type": "integer"},
        "intervalMs": {"type": "integer"},
        "instance": _nullable("string"),
        "stream": _nullable("string"),
        "tags": _STRING_MAP,
        "attributes": _STRING_MAP,
        "dimensionPairs": {"type": "array", "items": {"type": "string"}},
        "dimensionKey": _nullable("string"),
        "seriesKey": {"type": "string"},
        "count": {"type": "number"},
        "sum": {"type": "number"},
        "min": _nullable("number"),
        "max": _nullable("number"),
        "avg": {"type": "number"},
        "p50": {"type": "number"},
        "p95": {"type": "number"},
        "p99": {"type": "number"},
        "buckets": _NUMBER_MAP,
        "summary": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "count": {"type": "number"},
                "sum": {"type": "number"},
                "min": _nullable("number"),
                "max": _nullable("number"),
                "histogram": _NUMBER_MAP,
            },
            "required": ["count", "sum", "min", "max", "histogram"],
        },
    },
    "required": list(METRICS_ENVELOPE_FIELDS),
}

_AGG_COLUMN: Final[Mapping[str, Any]] = {**_COLUMN_FLAGS, "aggregatable": True}
_AGG_KEYWORD: Final[Mapping[str, Any]] = {
    "normalizer": "lowercase_v1",
    "exact": True,
    "prefix": True,
    "exists": True,
    "aggregatable": True,
}

_METRICS_SEARCH: Final[Mapping[str, Any]] = {
    "profile": "metrics",
    "primaryTimestampField": "windowStart",
    "aliases": {
        "ts": "windowStart",
        "time": "windowStart",
        "name": "metric",
        "dims": "dimensionKey",
        "series": "seriesKey",
    },
    "defaultFields": [
        {"field": "metric", "boost": 2},
        {"field": "stream", "boost": 1.25},
        {"field": "dimensionPairs", "boost": 1},
    ],
    "fields": {
        "windowStart": _field("date", "/windowStart", **_AGG_COLUMN),
        "windowEnd": _field("date", "/windowEnd", **_COLUMN_FLAGS),
        "intervalMs": _field("integer", "/intervalMs", **_AGG_COLUMN),
        "metric": _field("keyword", "/metric", **_AGG_KEYWORD, sortable=True),
        "unit": _field("keyword", "/unit", **_AGG_KEYWORD),
        "metricKind": _field("keyword", "/metricKind", **_AGG_KEYWORD),
        "temporality": _field("keyword", "/temporality", **_AGG_KEYWORD),
        "stream": _field("keyword", "/stream", **_AGG_KEYWORD, sortable=True),
        "instance": _field("keyword", "/instance", **_KEYWORD_FLAGS, aggregatable=True),
        "seriesKey": _field("keyword", "/seriesKey", exact=True, exists=True, sortable=True),
        "dimensionKey": _field("keyword", "/dimensionKey", **_KEYWORD_FLAGS, aggregatable=True),
        "dimensionPairs": _field(
            "keyword", "/dimensionPairs", exact=True, prefix=True, exists=True
        ),
        "count": _field("integer", "/count", **_AGG_COLUMN),
        "sum": _field("float", "/sum", **_AGG_COLUMN),
        "min": _field("float", "/min", **_COLUMN_FLAGS),
        "max": _field("float", "/max", **_COLUMN_FLAGS),
        "avg": _field("float", "/avg", **_COLUMN_FLAGS),
        "p95": _field("float", "/p95", **_COLUMN_FLAGS),
        "p99": _field("float", "/p99", **_COLUMN_FLAGS),
    },
    "rollups": {
        "metrics": {
            "timestampField": "windowStart",
            "dimensions": [
                "metric",
                "unit",
                "stream",
                "instance",
                "dimensionKey",
                "metricKind",
                "temporality",
            ],
            "intervals": ["10s", "1m", "5m", "1h"],
            "measures": {
                "value": {
                    "kind": "summary_parts",
                    "countJsonPointer": "/count",
                    "sumJsonPointer": "/sum",
                    "minJsonPointer": "/min",
                    "maxJsonPointer": "/max",
                    "histogramJsonPointer": "/buckets",
                }
            },
        }
    },
}


def check_install(profile: Mapping[str, Any], *, current_kind: str, stream_is_empty: bool) -> bool:
    """May ``profile`` be installed now; must the caller (re)write the schema registry?

    ``current_kind`` is the stream's current profile kind (``"generic"`` if none is stored).
    Returns ``True`` when the caller must replace the registry with
    ``schema.apply_update(schema.empty_registry(stream), install(profile, stream),
    stream_is_empty=True, end_offset=<tail>)``, ``False`` when the registry stays as it is.
    Raises ``ProfileError`` for an evlog/metrics install on a stream that already holds data
    under another profile.
    """
    kind = _kind(profile)
    if kind not in _REGISTRY_KINDS:
        return False
    if stream_is_empty:
        return True
    if current_kind == kind:
        return False
    raise ProfileError(f"{kind} profile must be installed before appending data")


def install(profile: Mapping[str, Any], stream: str) -> dict[str, Any] | None:
    """The ``schema.apply_update`` body installing ``profile`` writes, or ``None`` (no registry).

    Apply it to ``schema.empty_registry(stream)``: the install replaces the registry.
    """
    kind = _kind(profile)
    if kind == "evlog":
        return {
            "apiVersion": REGISTRY_API_VERSION,
            "schema": copy.deepcopy(dict(_EVLOG_SCHEMA)),
            "search": copy.deepcopy(dict(_EVLOG_SEARCH)),
        }
    if kind == "metrics":
        body: dict[str, Any] = {
            "apiVersion": REGISTRY_API_VERSION,
            "schema": copy.deepcopy(dict(_METRICS_SCHEMA)),
        }
        if stream != INTERNAL_METRICS_STREAM:
            body["routingKey"] = {"jsonPointer": "/seriesKey", "required": True}
            body["search"] = copy.deepcopy(dict(_METRICS_SEARCH))
        return body
    return None


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


# --------------------------------------------------------------------------- evlog

_DEFAULT_REDACT_KEYS: Final = ("password", "token", "secret", "authorization", "cookie", "apikey")
_REDACTED: Final = "[REDACTED]"
_DEFAULT_REQUEST_ID_FIELDS: Final = ("requestId", "context.requestId")
_TRACEPARENT_FIELDS: Final = (
    "traceparent",
    "traceContext.traceparent",
    "context.traceparent",
    "headers.traceparent",
)
_LEVELS: Final = ("debug", "info", "warn", "error")


def _redact(value: object, keys: frozenset[str], path: str, found: list[str]) -> object:
    if isinstance(value, list):
        return [
            _redact(item, keys, f"{path}.{i}" if path else str(i), found)
            for i, item in enumerate(value)
        ]
    if not isinstance(value, Mapping):
        return copy.deepcopy(value)
    out: dict[str, object] = {}
    for key, item in value.items():
        key_path = f"{path}.{key}" if path else key
        if key.lower() in keys:
            out[key] = _REDACTED
            found.append(key_path)
        else:
            out[key] = _redact(item, keys, key_path, found)
    return out


def _trace_field(data: Mapping[str, Any], profile: Mapping[str, Any], field: str) -> str | None:
    configured = profile.get("correlation", {}).get("traceContextFields")
    for path in configured or ():
        if path == field or path.endswith(f".{field}"):
            found = _dotted(data, path)
            if found:
                return found
    direct = _text(data.get(field))
    if direct:
        return direct
    context = data.get("traceContext")
    return _text(context.get(field)) if isinstance(context, Mapping) else None


def _traceparent(data: Mapping[str, Any]) -> tuple[str, str] | None:
    for path in _TRACEPARENT_FIELDS:
        text = _dotted(data, path)
        match = _TRACEPARENT_RE.fullmatch(text) if text else None
        if match is None:
            continue
        trace_id, span_id = match.group(2).lower(), match.group(3).lower()
        if set(trace_id) == {"0"} or set(span_id) == {"0"}:
            continue
        return trace_id, span_id
    return None


def _level(data: Mapping[str, Any], status: int | None) -> str:
    direct = _text(data.get("level"))
    if direct and direct.lower() in _LEVELS:
        return direct.lower()
    if any(_text(data.get(key)) for key in ("why", "fix", "link")):
        return "error"
    if status is not None and status >= 500:
        return "error"
    if status is not None and status >= 400:
        return "warn"
    return "info"


def _normalize_evlog(profile: Mapping[str, Any], value: object, now_ms: int) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ProfileError(f"evlog record must be an object, got {_type_name(value)}")
    status = _integer(value.get("status"))
    request_fields = profile.get("correlation", {}).get("requestIdFields")
    request_id = None
    for path in request_fields if request_fields is not None else _DEFAULT_REQUEST_ID_FIELDS:
        request_id = _dotted(value, path)
        if request_id:
            break
    parse_tp = profile.get("correlation", {}).get("parseTraceparent", True)
    parsed = _traceparent(value) if parse_tp else None
    trace_id = _trace_field(value, profile, "traceId") or (parsed[0] if parsed else None)
    span_id = _trace_field(value, profile, "spanId") or (parsed[1] if parsed else None)

    raw_context = value.get("context")
    context: dict[str, Any] = dict(raw_context) if isinstance(raw_context, Mapping) else {}
    for key, item in value.items():
        if key not in EVLOG_ENVELOPE_FIELDS:
            context[key] = item
    if "context" in value and not isinstance(raw_context, Mapping):
        context["context"] = raw_context
    redact_keys = frozenset((*_DEFAULT_REDACT_KEYS, *profile.get("redactKeys", ())))
    redacted_paths: list[str] = []
    redacted = _redact(context, redact_keys, "", redacted_paths)

    out: dict[str, Any] = {
        "timestamp": _text(value.get("timestamp")) or _iso_ms(now_ms),
        "level": _level(value, status),
    }
    for name in ("service", "environment", "version", "region"):
        out[name] = _text(value.get(name))
    out.update(requestId=request_id, traceId=trace_id, spanId=span_id)
    out.update(method=_text(value.get("method")), path=_text(value.get("path")))
    out.update(status=status, duration=_number(value.get("duration")))
    for name in ("message", "why", "fix", "link"):
        out[name] = _text(value.get(name))
    out["sampling"] = copy.deepcopy(value["sampling"]) if "sampling" in value else None
    out["redaction"] = {"keys": redacted_paths}
    out["context"] = redacted
    return out


# --------------------------------------------------------------------------- metrics


def _js_number_text(value: int | float) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return str(value)


def _attributes(raw: object) -> dict[str, str]:
    if not isinstance(raw, Mapping):
        return {}
    out: dict[str, str] = {}
    for key in sorted(raw):
        item = raw[key]
        if isinstance(item, bool):
            out[key] = "true" if item else "false"
        elif isinstance(item, str):
            out[key] = item
        elif _is_number(item):
            out[key] = _js_number_text(item)
    return out


def _histogram(raw: object) -> dict[str, int | float] | None:
    if not isinstance(raw, Mapping):
        return None
    out: dict[str, int | float] = {}
    for bucket, count in raw.items():
        num = _number(count)
        if num is None or num <= 0:
            continue
        out[str(bucket)] = out.get(str(bucket), 0) + num
    return out or None


def _percentile(histogram: Mapping[str, int | float] | None, fraction: float) -> int | float | None:
    if not histogram:
        return None
    entries: list[tuple[int | float, int | float]] = []
    for bucket, count in histogram.items():
        position = _number(bucket)
        if position is not None and count > 0:
            entries.append((position, count))
    if not entries:
        return None
    entries.sort(key=lambda entry: entry[0])
    threshold = sum(count for _, count in entries) * fraction
    seen: int | float = 0
    for position, count in entries:
        seen += count
        if seen >= threshold:
            return position
    return entries[-1][0]  # pragma: no cover - float rounding only


def _first_number(*values: object) -> int | float | None:
    for item in values:
        num = _number(item)
        if num is not None:
            return num
    return None


def _normalize_metrics(value: object) -> dict[str, Any]:
    """The canonical interval envelope (keys ``METRICS_ENVELOPE_FIELDS``).

    Required: ``metric`` and ``unit`` (non-empty strings), integer ``windowStart`` <=
    ``windowEnd`` (epoch ms; numeric strings accepted, fractions truncated), ``count`` >= 0 and
    ``sum`` (top level or under ``summary``). Defaults: ``kind`` ``interval`` (any other string is
    rejected), ``intervalMs`` ``windowEnd - windowStart``, ``metricKind`` ``summary``,
    ``temporality`` ``delta``, ``stream``/``instance`` ``null``; ``attributes`` (else ``tags``)
    keep string/number/boolean values as strings and are copied to ``tags``; ``buckets`` (else
    ``summary.histogram``) keep positive counts; ``min``/``max`` are ``null`` when ``count`` is 0,
    else default 0; ``avg`` ``sum/count`` (0 if no count); ``p50``/``p95``/``p99`` from the
    histogram (first bucket whose cumulative count reaches the fraction), else 0.
    """
    if not isinstance(value, Mapping):
        raise ProfileError(f"metrics record must be an object, got {_type_name(value)}")
    kind = _text(value.get("kind")) or "interval"
    if kind != "interval":
        raise ProfileError("metrics record.kind must be interval")
    metric = _text(value.get("metric"))
    if not metric:
        raise ProfileError("metrics record.metric must be a non-empty string")
    unit = _text(value.get("unit"))
    if not unit:
        raise ProfileError("metrics record.unit must be a non-empty string")
    start, end = _truncated(value.get("windowStart")), _truncated(value.get("windowEnd"))
    if start is None or end is None:
        raise ProfileError("metrics record.windowStart and windowEnd must be integers")
    if end < start:
        raise ProfileError("metrics record.windowEnd must be >= windowStart")
    interval = _truncated(value.get("intervalMs"))
    interval = end - start if interval is None else interval
    if interval < 0:
        raise ProfileError("metrics record.intervalMs must be >= 0")
    metric_kind = _text(value.get("metricKind")) or "summary"
    temporality = _text(value.get("temporality")) or "delta"
    stream, instance = _text(value.get("stream")), _text(value.get("instance"))
    raw_attributes = value.get("attributes")
    attributes = _attributes(value.get("tags") if raw_attributes is None else raw_attributes)
    pairs = sorted(f"{key}={item}" for key, item in attributes.items())
    dimension_key = "\x00".join(pairs) if pairs else None
    series_key = "|".join(
        (metric_kind, temporality, metric, unit, stream or "", instance or "", dimension_key or "")
    )

    summary_raw = value.get("summary")
    summary: Mapping[str, Any] = summary_raw if isinstance(summary_raw, Mapping) else {}
    histogram = _histogram(value.get("buckets")) or _histogram(summary.get("histogram"))
    count = _first_number(value.get("count"), summary.get("count"))
    total = _first_number(value.get("sum"), summary.get("sum"))
    if count is None or count < 0:
        raise ProfileError("metrics interval requires count")
    if total is None:
        raise ProfileError("metrics interval requires sum")
    low = _first_number(value.get("min"), summary.get("min"))
    high = _first_number(value.get("max"), summary.get("max"))
    low = None if count == 0 else (0 if low is None else low)
    high = None if count == 0 else (0 if high is None else high)
    avg = _number(value.get("avg"))
    if avg is None:
        avg = total / count if count > 0 else 0
    percentiles = {}
    for name, fraction in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99)):
        given = _number(value.get(name))
        computed = _percentile(histogram, fraction)
        if given is None:
            given = 0 if computed is None else computed
        percentiles[name] = given
    buckets = histogram or {}
    return {
        "apiVersion": METRICS_API_VERSION,
        "kind": "interval",
        "metric": metric,
        "unit": unit,
        "metricKind": metric_kind,
        "temporality": temporality,
        "windowStart": start,
        "windowEnd": end,
        "intervalMs": interval,
        "instance": instance,
        "stream": stream,
        "tags": dict(attributes),
        "attributes": dict(attributes),
        "dimensionPairs": pairs,
        "dimensionKey": dimension_key,
        "seriesKey": series_key,
        "count": count,
        "sum": total,
        "min": low,
        "max": high,
        "avg": avg,
        **percentiles,
        "buckets": dict(buckets),
        "summary": {
            "count": count,
            "sum": total,
            "min": low,
            "max": high,
            "histogram": dict(buckets),
        },
    }


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


def _check_state_protocol(value: object) -> None:
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


# --------------------------------------------------------------------------- append path


def normalize(profile: Mapping[str, Any], value: object, *, now_ms: int | None = None) -> object:
    """The value to store for one JSON append ``value`` (validate it with the schema after).

    ``now_ms`` (epoch ms, default: the wall clock) fills a missing evlog ``timestamp``. The
    input is not modified. Raises ``ProfileError`` for a value the profile cannot accept.
    """
    kind = _kind(profile)
    if kind == "evlog":
        return _normalize_evlog(
            profile, value, time.time_ns() // 1_000_000 if now_ms is None else now_ms
        )
    if kind == "metrics":
        return _normalize_metrics(value)
    if kind == "state-protocol":
        _check_state_protocol(value)
    return value


def derived_routing_key(profile: Mapping[str, Any], value: object) -> str | None:
    """The profile's routing key for a *normalized* value (``None`` if it has none).

    evlog: ``requestId``, else ``traceId``; metrics: ``seriesKey``; others: ``None``. Use it only
    when the schema registry has no ``routingKey``.
    """
    kind = _kind(profile)
    if not isinstance(value, Mapping):
        return None
    candidates = {"evlog": ("requestId", "traceId"), "metrics": ("seriesKey",)}.get(kind, ())
    for name in candidates:
        found = value.get(name)
        if isinstance(found, str) and found:
            return found
    return None
