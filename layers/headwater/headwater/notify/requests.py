"""The three /api/v1 request bodies: notification, watch and replay.

Steps in aviso's order, each raising an `AvisoError` subclass whose `body(request_id)` is the
wire error:

1. `parse_request_body` — JSON (`INVALID_JSON`), known keys only (`UNKNOWN_FIELD`), the request
   model's shape (`INVALID_REQUEST_SHAPE`);
2. `NotificationSchema.require(event_type)` — `UNKNOWN_EVENT_TYPE`;
3. (authorization, done by the HTTP layer, sits here in aviso);
4. `validate_notification` / `validate_watch` / `validate_replay` —
   `INVALID_{NOTIFICATION,WATCH,REPLAY}_REQUEST`.

`parse_notification`, `parse_watch` and `parse_replay` run all of them for callers with no
authorization step in between.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from headwater.jsondepth import nesting_error
from headwater.notify.constraints import Constraint, parse_constraint
from headwater.notify.errors import (
    FieldError,
    RequestKind,
    RequestParseError,
    RequestValidationError,
)
from headwater.notify.fromdate import FromDateError, parse_from_date
from headwater.notify.handlers import (
    LatLon,
    canonicalize,
    parse_point,
    polygon_coordinates,
    scalar_text,
)
from headwater.notify.numbers import (
    I64_MIN,
    U64_MAX,
    RustParseError,
    parse_rust_int,
    rust_display_f64,
    rust_trim,
)
from headwater.notify.schema import POINT_FIELD, EventSchema, Handler, NotificationSchema
from headwater.notify.topic import WILDCARD, build_topic

REQUEST_FIELDS = ("event_type", "identifier", "from_id", "from_date", "payload")


@dataclass(frozen=True, slots=True)
class RawRequest:
    """A body that parsed into aviso's request model (values not yet validated).
    `payload` is None when omitted or JSON null (aviso cannot tell them apart either)."""

    event_type: str
    identifier: Mapping[str, Any]
    from_id: str | None = None
    from_date: str | None = None
    payload: Any = None


@dataclass(frozen=True, slots=True)
class Notification:
    """A valid notify request: canonical identifier (schema order), payload as sent."""

    event_type: str
    identifier: Mapping[str, str]
    payload: Any
    topic: str
    #: the polygon field's coordinates as (lat, lon) pairs, when the schema has one
    polygon: tuple[LatLon, ...] | None = None


@dataclass(frozen=True, slots=True)
class PolygonFilter:
    coordinates: tuple[LatLon, ...]


@dataclass(frozen=True, slots=True)
class PointFilter:
    lat: float
    lon: float


SpatialFilter = PolygonFilter | PointFilter


@dataclass(frozen=True, slots=True)
class StreamFilter:
    """What a watch/replay selects: exact canonical values (`*` for any), constraint
    objects, and at most one spatial filter over the schema's polygon field."""

    event_type: str
    values: Mapping[str, str]
    constraints: Mapping[str, Constraint]
    spatial: SpatialFilter | None
    polygon_field: str | None
    topic: str


@dataclass(frozen=True, slots=True)
class StreamRequest:
    """A valid watch or replay: the filter and where history starts (both None = live only)."""

    kind: RequestKind
    filter: StreamFilter
    from_id: int | None
    from_date: datetime | None

    @property
    def live_only(self) -> bool:
        return self.from_id is None and self.from_date is None


# --- 1. body ---------------------------------------------------------------------------------

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]", re.ASCII)  # high (D8-DB) or low (DC-DF)
#: The deepest nesting serde_json accepts: it starts with a recursion budget of 128 and fails
#: on the level that spends the last of it.
MAX_DEPTH = 127


class _JsonRejected(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise _JsonRejected(f"invalid number {name}")


def _json_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _JsonRejected("number out of range")
    return value


def _json_int(text: str) -> int | float:
    value = int(text)
    if I64_MIN <= value <= U64_MAX:
        return value
    return _json_float(text)  # serde_json keeps larger integers as f64


def _has_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return any("\ud800" <= ch <= "\udfff" for ch in value)
    if isinstance(value, dict):
        return any(_has_surrogate(k) or _has_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_surrogate(v) for v in value)
    return False


def _position(text: str, index: int) -> str:
    """serde_json's `line L column C` of the character at `index`."""
    line = text.count("\n", 0, index) + 1
    column = index - text.rfind("\n", 0, index)
    return f"line {line} column {column}"


def load_json(body: bytes | str) -> Any:
    """JSON as serde_json accepts it: UTF-8 only, no NaN/Infinity, finite numbers, no lone
    surrogates, at most MAX_DEPTH levels of nesting. Raises ValueError with a reason."""
    text = body.decode("utf-8") if isinstance(body, bytes) else body
    deep = nesting_error(text, MAX_DEPTH)  # before json.loads, which recurses per level
    if deep is not None:
        raise _JsonRejected(f"recursion limit exceeded at {_position(text, deep.pos)}")
    value = json.loads(
        text, parse_constant=_reject_constant, parse_float=_json_float, parse_int=_json_int
    )
    if _SURROGATE_ESCAPE.search(text) and _has_surrogate(value):
        raise _JsonRejected("lone surrogate in hex escape")
    return value


def _unexpected(value: Any) -> str:
    """serde's `Unexpected` wording for a JSON value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean `{'true' if value else 'false'}`"
    if isinstance(value, int):
        return f"integer `{value}`"
    if isinstance(value, float):
        text = rust_display_f64(value)
        return f"floating point `{text if '.' in text else text + '.0'}`"
    if isinstance(value, str):
        return f"string {json.dumps(value, ensure_ascii=False)}"
    if isinstance(value, list):
        return "sequence"
    return "map"


def parse_request_body(body: bytes | str, kind: RequestKind) -> RawRequest:
    try:
        document = load_json(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RequestParseError(kind, "INVALID_JSON", f"JSON parsing failed: {exc}") from None
    if isinstance(document, dict):
        for key in sorted(document):
            if key not in REQUEST_FIELDS:
                allowed = ", ".join(f'"{name}"' for name in REQUEST_FIELDS)
                raise RequestParseError(
                    kind,
                    "UNKNOWN_FIELD",
                    f"Request contains unknown fields: Unknown field '{key}' in request. "
                    f"Allowed fields: [{allowed}]",
                )

    def shape(problem: str) -> RequestParseError:
        return RequestParseError(
            kind, "INVALID_REQUEST_SHAPE", f"Request deserialization failed: {problem}"
        )

    if not isinstance(document, dict):
        raise shape(f"invalid type: {_unexpected(document)}, expected struct NotificationRequest")
    # serde visits keys in sorted order and reports missing fields afterwards
    for key in sorted(document):
        value = document[key]
        if key == "event_type" and not isinstance(value, str):
            raise shape(f"invalid type: {_unexpected(value)}, expected a string")
        if key in ("from_id", "from_date") and value is not None and not isinstance(value, str):
            raise shape(f"invalid type: {_unexpected(value)}, expected a string")
        if key == "identifier" and not isinstance(value, dict):
            raise shape(f"invalid type: {_unexpected(value)}, expected a map")
    for key in ("event_type", "identifier"):
        if key not in document:
            raise shape(f"missing field `{key}`")
    return RawRequest(
        event_type=document["event_type"],
        identifier=document["identifier"],
        from_id=document.get("from_id"),
        from_date=document.get("from_date"),
        payload=document.get("payload"),
    )


# --- 4. validation ---------------------------------------------------------------------------


def validate_notification(schema: EventSchema, request: RawRequest) -> Notification:
    kind = RequestKind.NOTIFICATION

    def fail(message: str, details: str | None = None) -> RequestValidationError:
        return RequestValidationError(kind, message, details)

    identifier = request.identifier
    if POINT_FIELD in identifier:
        raise fail(
            "identifier.point is only supported for watch/replay endpoints, not /notification"
        )
    for key in identifier:
        if schema.rule(key) is None:
            raise fail(f"Unknown field '{key}' provided for notify operation")
    canonical: dict[str, str] = {}
    polygon: tuple[LatLon, ...] | None = None
    for rule in schema.fields:
        if rule.name not in identifier:
            raise fail(f"Required field '{rule.name}' missing for notify operation")
        value = identifier[rule.name]
        if isinstance(value, dict):
            raise fail(
                f"Field '{rule.name}' constraint object is not supported for notify operation"
            )
        try:
            canonical[rule.name] = canonicalize(rule, scalar_text(rule.name, value))
        except FieldError as exc:
            raise fail(exc.message, exc.details) from None
        if rule.handler is Handler.POLYGON:
            polygon = polygon_coordinates(rule.name, canonical[rule.name])
    if schema.payload_required and request.payload is None:
        raise fail("Payload is required for notify operation based on schema configuration")
    return Notification(
        event_type=schema.event_type,
        identifier=canonical,
        payload=request.payload,
        topic=build_topic(schema.base, schema.key_order, canonical),
        polygon=polygon,
    )


def _from_id(text: str | None, fail: Any) -> int | None:
    if text is None:
        return None
    if rust_trim(text) == "":
        raise fail("from_id cannot be empty. Provide a valid sequence number or omit the field")
    try:
        return parse_rust_int(text, signed=False, bits=64)
    except RustParseError:
        raise fail(
            f"from_id must be a valid positive integer. Got: '{text}'. "
            "Valid examples: '1', '123', '9999'"
        ) from None


def _from_date(text: str | None, fail: Any) -> datetime | None:
    if text is None:
        return None
    if rust_trim(text) == "":
        raise fail(
            "from_date cannot be empty. Provide a valid datetime/timestamp or omit the field"
        )
    try:
        return parse_from_date(text)
    except FromDateError as exc:
        raise fail(
            f"from_date must be a valid datetime/timestamp. Got: '{text}'. Error: {exc}. "
            "Valid examples: '2025-06-09T13:15:00Z', '2025-06-09 13:15:00+00:00', "
            "'2025-06-09 13:15:00', '1740509903', '1740509903710'"
        ) from None


def _validate_stream(schema: EventSchema, request: RawRequest, kind: RequestKind) -> StreamRequest:
    def fail(message: str, details: str | None = None) -> RequestValidationError:
        return RequestValidationError(kind, message, details)

    identifier = request.identifier
    polygon_rule = schema.polygon_field
    polygon_key = polygon_rule.name if polygon_rule is not None else "polygon"

    # spatial rules first, then the start point, then the identifier (aviso's order)
    point: LatLon | None = None
    if polygon_key in identifier and POINT_FIELD in identifier:
        raise fail(
            f"Cannot specify both identifier.{polygon_key} and identifier.point. "
            "Provide only one spatial filter."
        )
    if POINT_FIELD in identifier:
        try:
            point_text = scalar_text(POINT_FIELD, identifier[POINT_FIELD])
        except FieldError as exc:
            raise fail(f"identifier.point must be a scalar value: {exc.message}") from None
        try:
            point = parse_point(point_text)
        except FieldError as exc:
            raise fail(
                f"identifier.point must be a valid 'lat,lon' coordinate pair: {exc.message}"
            ) from None

    from_id = _from_id(request.from_id, fail)
    from_date = _from_date(request.from_date, fail)
    if from_id is not None and from_date is not None:
        raise fail(
            "Cannot specify both from_id and from_date. Please provide only one replay "
            "parameter. Use from_id for sequence-based replay or from_date for time-based replay."
        )
    if kind is RequestKind.REPLAY and from_id is None and from_date is None:
        raise fail(
            "Replay endpoint requires either from_id or from_date parameter. Use from_id for "
            "sequence-based replay or from_date for time-based replay."
        )

    values: dict[str, str] = {}
    constraints: dict[str, Constraint] = {}
    spatial: SpatialFilter | None = None if point is None else PointFilter(*point)
    for rule in schema.fields:
        if rule.name not in identifier:
            if rule.required and not (rule is polygon_rule and point is not None):
                raise fail(f"Required field '{rule.name}' missing for {kind.value} operation")
            values[rule.name] = WILDCARD
            continue
        value = identifier[rule.name]
        try:
            if isinstance(value, dict):
                constraints[rule.name] = parse_constraint(rule, value)
                values[rule.name] = WILDCARD
                continue
            values[rule.name] = canonicalize(rule, scalar_text(rule.name, value))
        except FieldError as exc:
            raise fail(exc.message, exc.details) from None
        if rule is polygon_rule:
            spatial = PolygonFilter(polygon_coordinates(rule.name, values[rule.name]))
    return StreamRequest(
        kind=kind,
        filter=StreamFilter(
            event_type=schema.event_type,
            values=values,
            constraints=constraints,
            spatial=spatial,
            polygon_field=None if polygon_rule is None else polygon_rule.name,
            topic=build_topic(schema.base, schema.key_order, values),
        ),
        from_id=from_id,
        from_date=from_date,
    )


def validate_watch(schema: EventSchema, request: RawRequest) -> StreamRequest:
    return _validate_stream(schema, request, RequestKind.WATCH)


def validate_replay(schema: EventSchema, request: RawRequest) -> StreamRequest:
    return _validate_stream(schema, request, RequestKind.REPLAY)


# --- all steps at once ------------------------------------------------------------------------


def parse_notification(registry: NotificationSchema, body: bytes | str) -> Notification:
    raw = parse_request_body(body, RequestKind.NOTIFICATION)
    return validate_notification(registry.require(raw.event_type), raw)


def parse_watch(registry: NotificationSchema, body: bytes | str) -> StreamRequest:
    raw = parse_request_body(body, RequestKind.WATCH)
    return validate_watch(registry.require(raw.event_type), raw)


def parse_replay(registry: NotificationSchema, body: bytes | str) -> StreamRequest:
    raw = parse_request_body(body, RequestKind.REPLAY)
    return validate_replay(registry.require(raw.event_type), raw)
