"""The `evlog` profile: its options (redaction, correlation, observability), the schema and
`search` it installs, and the normalization of each appended log event (redacted keys,
correlation ids, trace context, level, timestamp)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Final

from headwater.durable.jsonvalue import json_type_name
from headwater.durable.profiles.common import (
    _COLUMN_FLAGS,
    _KEYWORD_FLAGS,
    _TRACEPARENT_RE,
    Profile,
    ProfileError,
    _dotted,
    _field,
    _integer,
    _iso_ms,
    _nullable,
    _number,
    _object,
    _reject_unknown,
    _string_list,
    _text,
)


def parse(obj: Mapping[str, Any]) -> Profile:
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

SCHEMA: Final[Mapping[str, Any]] = {
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

SEARCH: Final[Mapping[str, Any]] = {
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


def normalize(profile: Mapping[str, Any], value: object, now_ms: int) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ProfileError(f"evlog record must be an object, got {json_type_name(value)}")
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
