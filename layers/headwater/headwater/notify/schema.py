"""Notification schemas in aviso-server's `notification_schema:` YAML format.

A schema names event types; each has a topic (`base`, `key_order`), identifier fields checked by
one of eight handlers, and whether a payload is required. The server loads it once at start
(from a file or an `s3://bucket/key` object) and refuses to start on any error: every
`SchemaError` names the event type, the field and the option at fault.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml

from headwater.errors import ConfigurationError
from headwater.notify.errors import UnknownEventType

#: identifier name aviso reserves for the watch/replay point filter
POINT_FIELD = "point"
DATE_FORMATS = ("%Y%m%d", "%Y-%m-%d")
DEFAULT_DATE_FORMAT = "%Y%m%d"

_EVENT_KEYS = ("payload", "topic", "endpoint", "identifier", "storage_policy", "auth")
_COMMON_OPTIONS = ("type", "required", "description")


class Handler(StrEnum):
    STRING = "StringHandler"
    DATE = "DateHandler"
    ENUM = "EnumHandler"
    EXPVER = "ExpverHandler"
    INT = "IntHandler"
    FLOAT = "FloatHandler"
    TIME = "TimeHandler"
    POLYGON = "PolygonHandler"


#: each handler's own options, in the order aviso serializes them
HANDLER_OPTIONS: dict[Handler, tuple[str, ...]] = {
    Handler.STRING: ("max_length",),
    Handler.DATE: ("canonical_format",),
    Handler.ENUM: ("values",),
    Handler.EXPVER: ("default",),
    Handler.INT: ("range",),
    Handler.FLOAT: ("range",),
    Handler.TIME: (),
    Handler.POLYGON: (),
}


class SchemaError(ConfigurationError):
    """A notification schema the server must not start with."""

    def __init__(
        self,
        problem: str,
        *,
        source: str = "notification schema",
        event_type: str | None = None,
        field: str | None = None,
        option: str | None = None,
    ) -> None:
        where = [source]
        if event_type is not None:
            where.append(f"event type {event_type!r}")
        if field is not None:
            where.append(f"field {field!r}")
        if option is not None:
            where.append(f"option {option!r}")
        super().__init__(f"{', '.join(where)}: {problem}")
        self.problem = problem
        self.event_type = event_type
        self.field = field
        self.option = option


@dataclass(frozen=True, slots=True, kw_only=True)
class FieldRule:
    """One identifier field. Only the options of `handler` are meaningful."""

    name: str
    handler: Handler
    required: bool
    description: str | None = None
    max_length: int | None = None
    canonical_format: str = DEFAULT_DATE_FORMAT
    values: tuple[str, ...] = ()
    default: str | None = None
    int_range: tuple[int, int] | None = None
    float_range: tuple[float, float] | None = None

    def public(self) -> dict[str, Any]:
        """The field as `GET /api/v1/schema` shows it (aviso's flattened serde shape)."""
        out: dict[str, Any] = {}
        if self.description is not None:
            out["description"] = self.description
        out["type"] = self.handler.value
        match self.handler:
            case Handler.STRING:
                out["max_length"] = self.max_length
            case Handler.DATE:
                out["canonical_format"] = self.canonical_format
            case Handler.ENUM:
                out["values"] = list(self.values)
            case Handler.EXPVER:
                out["default"] = self.default
            case Handler.INT:
                out["range"] = None if self.int_range is None else list(self.int_range)
            case Handler.FLOAT:
                out["range"] = None if self.float_range is None else list(self.float_range)
            case _:
                pass
        out["required"] = self.required
        return out


@dataclass(frozen=True, slots=True)
class EventSchema:
    event_type: str
    base: str
    key_order: tuple[str, ...]
    fields: tuple[FieldRule, ...]
    payload_required: bool = False
    #: whether the YAML had a `payload:` block (aviso shows `"payload": null` when not)
    payload_declared: bool = False
    auth: Mapping[str, Any] | None = None
    storage_policy: Mapping[str, Any] | None = None
    _by_name: Mapping[str, FieldRule] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {rule.name: rule for rule in self.fields})

    def rule(self, name: str) -> FieldRule | None:
        return self._by_name.get(name)

    @property
    def polygon_field(self) -> FieldRule | None:
        return next((r for r in self.fields if r.handler is Handler.POLYGON), None)

    def public(self) -> dict[str, Any]:
        payload = {"required": self.payload_required} if self.payload_declared else None
        return {
            "identifier": {rule.name: rule.public() for rule in self.fields},
            "payload": payload,
        }


@dataclass(frozen=True, slots=True)
class NotificationSchema:
    """Every configured event type. `configured=False` means no schema was given at all."""

    events: Mapping[str, EventSchema]
    configured: bool = True

    @classmethod
    def unconfigured(cls) -> NotificationSchema:
        return cls(events={}, configured=False)

    @property
    def event_types(self) -> list[str]:
        return sorted(self.events)

    def get(self, event_type: str) -> EventSchema | None:
        return self.events.get(event_type)

    def require(self, event_type: str) -> EventSchema:
        """The schema of `event_type`, or aviso's `UNKNOWN_EVENT_TYPE` (strict mode)."""
        schema = self.events.get(event_type)
        if schema is None:
            raise UnknownEventType(event_type, self.event_types)
        return schema

    def list_body(self) -> dict[str, Any]:
        """Body of `GET /api/v1/schema` (always 200)."""
        if not self.configured:
            return {
                "event_types": [],
                "message": "No notification schema configured",
                "schema": {},
                "status": "success",
                "total_schemas": 0,
            }
        return {
            "event_types": self.event_types,
            "schema": {name: self.events[name].public() for name in self.event_types},
            "status": "success",
            "total_schemas": len(self.events),
        }

    def event_body(self, event_type: str, request_id: str) -> tuple[int, dict[str, Any]]:
        """Status and body of `GET /api/v1/schema/{event_type}`."""
        if not self.configured:
            return 404, {
                "message": "No notification schema configured",
                "request_id": request_id,
                "status": "error",
            }
        schema = self.events.get(event_type)
        if schema is None:
            return 404, {
                "available_types": self.event_types,
                "message": f"Event type '{event_type}' not found",
                "request_id": request_id,
                "status": "error",
            }
        return 200, {"event_type": event_type, "schema": schema.public(), "status": "success"}


# --- loading ---------------------------------------------------------------------------------

S3Fetch = Callable[[str, str], bytes]


def split_s3_uri(uri: str) -> tuple[str, str]:
    rest = uri[len("s3://") :]
    bucket, _, key = rest.partition("/")
    if not bucket or not key:
        raise SchemaError(f"{uri!r} is not an s3://bucket/key URI", source=uri)
    return bucket, key


def load_schema(location: str, *, fetch_s3: S3Fetch | None = None) -> NotificationSchema:
    """Load from a file path or `s3://bucket/key` (read through `fetch_s3(bucket, key)`)."""
    if location.startswith("s3://"):
        bucket, key = split_s3_uri(location)
        if fetch_s3 is None:
            raise SchemaError("an s3:// schema needs an S3 reader", source=location)
        try:
            raw = fetch_s3(bucket, key)
        except Exception as exc:  # the reader's own error type is the adapter's business
            raise SchemaError(f"cannot read the object: {exc}", source=location) from exc
    else:
        try:
            raw = Path(location).read_bytes()
        except OSError as exc:
            raise SchemaError(f"cannot read the file: {exc.strerror}", source=location) from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SchemaError("the file is not UTF-8 text", source=location) from exc
    return load_schema_text(text, source=location)


def load_schema_text(text: str, *, source: str = "notification schema") -> NotificationSchema:
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SchemaError(f"not valid YAML: {exc}", source=source) from exc
    return parse_schema_document(document, source=source)


def parse_schema_document(
    document: Any, *, source: str = "notification schema"
) -> NotificationSchema:
    """Validate a parsed document with a top-level `notification_schema:` mapping (the other
    top-level keys of an aviso config file are ignored)."""
    if not isinstance(document, dict) or "notification_schema" not in document:
        raise SchemaError(
            "expected a mapping with a top-level 'notification_schema' key", source=source
        )
    entries = document["notification_schema"]
    if entries is None:
        entries = {}
    if not isinstance(entries, dict):
        raise SchemaError("'notification_schema' must map event types to schemas", source=source)
    events: dict[str, EventSchema] = {}
    owners: dict[str, str] = {}
    for event_type, spec in entries.items():
        if not isinstance(event_type, str) or not event_type:
            raise SchemaError(
                f"event type names must be non-empty strings, got {event_type!r}", source=source
            )
        schema = _event_schema(event_type, spec, source)
        base_key = schema.base.lower()
        if base_key in owners:
            raise SchemaError(
                f"Schemas '{owners[base_key]}' and '{event_type}' both define topic base "
                f"'{schema.base}'",
                source=source,
                event_type=event_type,
                option="topic.base",
            )
        owners[base_key] = event_type
        events[event_type] = schema
    return NotificationSchema(events=events)


def _event_schema(event_type: str, spec: Any, source: str) -> EventSchema:
    def fail(problem: str, *, field: str | None = None, option: str | None = None) -> SchemaError:
        return SchemaError(
            problem, source=source, event_type=event_type, field=field, option=option
        )

    if not isinstance(spec, dict):
        raise fail("must be a mapping")
    unknown = [str(k) for k in spec if k not in _EVENT_KEYS]
    if unknown:
        raise fail(f"unknown key(s): {', '.join(unknown)} (allowed: {', '.join(_EVENT_KEYS)})")
    identifier = spec.get("identifier")
    if "identifier" not in spec:
        raise fail("missing 'identifier' (a mapping of field names to handlers)")
    if identifier is None:
        identifier = {}
    if not isinstance(identifier, dict):
        raise fail("'identifier' must map field names to handler specs")
    rules: list[FieldRule] = []
    for name, field_spec in identifier.items():
        if not isinstance(name, str) or not name:
            raise fail(f"identifier names must be non-empty strings, got {name!r}")
        if name == POINT_FIELD:
            raise fail("'point' is reserved for the watch/replay point filter", field=name)
        rules.append(_field_rule(name, field_spec, fail))
    polygons = [r.name for r in rules if r.handler is Handler.POLYGON]
    if len(polygons) > 1:
        raise fail(f"at most one PolygonHandler field is supported, got {', '.join(polygons)}")

    payload_required, payload_declared = _payload(spec.get("payload"), fail)
    base, key_order = _topic(event_type, spec.get("topic"), [r.name for r in rules], fail)
    return EventSchema(
        event_type=event_type,
        base=base,
        key_order=key_order,
        fields=tuple(rules),
        payload_required=payload_required,
        payload_declared=payload_declared,
        auth=_auth(spec.get("auth"), fail),
        storage_policy=_storage_policy(spec.get("storage_policy"), fail),
    )


Fail = Callable[..., SchemaError]


def _payload(spec: Any, fail: Fail) -> tuple[bool, bool]:
    if spec is None:
        return False, False
    if not isinstance(spec, dict):
        raise fail("'payload' must be a mapping like {required: true}", option="payload")
    unknown = [str(k) for k in spec if k != "required"]
    if unknown:
        raise fail(f"unknown key(s): {', '.join(unknown)}", option="payload")
    if "required" not in spec:
        raise fail("missing 'required' (true or false)", option="payload.required")
    if not isinstance(spec["required"], bool):
        raise fail(f"must be true or false, got {spec['required']!r}", option="payload.required")
    return spec["required"], True


def _topic(event_type: str, spec: Any, names: list[str], fail: Fail) -> tuple[str, tuple[str, ...]]:
    if spec is None:
        # aviso falls back to the event type and every value sorted by key; same subject here
        return event_type, tuple(sorted(names))
    if not isinstance(spec, dict):
        raise fail("'topic' must be a mapping with 'base' and 'key_order'", option="topic")
    unknown = [str(k) for k in spec if k not in ("base", "key_order")]
    if unknown:
        raise fail(f"unknown key(s): {', '.join(unknown)}", option="topic")
    base = spec.get("base")
    if not isinstance(base, str) or not base:
        raise fail(f"must be a non-empty string, got {base!r}", option="topic.base")
    key_order = spec.get("key_order")
    if not isinstance(key_order, list) or not all(isinstance(k, str) for k in key_order):
        raise fail(f"must be a list of field names, got {key_order!r}", option="topic.key_order")
    seen: set[str] = set()
    for key in key_order:
        if key in seen:
            raise fail(f"{key!r} is listed twice", option="topic.key_order")
        if key not in names:
            raise fail(
                f"{key!r} is not an identifier field (declared: {', '.join(names) or 'none'})",
                option="topic.key_order",
            )
        seen.add(key)
    return base, tuple(key_order)


def _field_rule(name: str, spec: Any, fail: Fail) -> FieldRule:
    if not isinstance(spec, dict):
        raise fail("must be a mapping with 'type' and 'required'", field=name)
    kind = spec.get("type")
    try:
        handler = Handler(str(kind))
    except ValueError:
        allowed = ", ".join(h.value for h in Handler)
        raise fail(
            f"unknown handler {kind!r} (expected one of {allowed})", field=name, option="type"
        ) from None
    allowed_keys = _COMMON_OPTIONS + HANDLER_OPTIONS[handler]
    unknown = [str(k) for k in spec if k not in allowed_keys]
    if unknown:
        raise fail(
            f"unknown option(s) for {handler.value}: {', '.join(unknown)} "
            f"(allowed: {', '.join(allowed_keys)})",
            field=name,
        )
    if "required" not in spec:
        raise fail("missing (true or false)", field=name, option="required")
    required = spec["required"]
    if not isinstance(required, bool):
        raise fail(f"must be true or false, got {required!r}", field=name, option="required")
    description = spec.get("description")
    if description is not None and not isinstance(description, str):
        raise fail(f"must be a string, got {description!r}", field=name, option="description")

    def option_fail(option: str, problem: str) -> SchemaError:
        return fail(problem, field=name, option=option)

    rule = FieldRule(name=name, handler=handler, required=required, description=description)
    match handler:
        case Handler.STRING:
            max_length = spec.get("max_length")
            if max_length is not None and (not _is_int(max_length) or max_length < 0):
                raise option_fail(
                    "max_length", f"must be a non-negative integer, got {max_length!r}"
                )
            return _replace(rule, max_length=max_length)
        case Handler.DATE:
            fmt = spec.get("canonical_format", DEFAULT_DATE_FORMAT)
            if fmt not in DATE_FORMATS:
                raise option_fail(
                    "canonical_format", f"must be one of {', '.join(DATE_FORMATS)}, got {fmt!r}"
                )
            return _replace(rule, canonical_format=fmt)
        case Handler.ENUM:
            if "values" not in spec:
                raise option_fail("values", "missing (a non-empty list of strings)")
            values = spec["values"]
            if (
                not isinstance(values, list)
                or not values
                or not all(isinstance(v, str) for v in values)
            ):
                raise option_fail("values", f"must be a non-empty list of strings, got {values!r}")
            return _replace(rule, values=tuple(values))
        case Handler.EXPVER:
            default = spec.get("default")
            if default is not None and not isinstance(default, str):
                raise option_fail("default", f"must be a string, got {default!r}")
            return _replace(rule, default=default)
        case Handler.INT:
            bounds = spec.get("range")
            if bounds is None:
                return rule
            if not (isinstance(bounds, list) and len(bounds) == 2 and all(map(_is_int, bounds))):
                raise option_fail("range", f"must be [min, max] integers, got {bounds!r}")
            lo, hi = int(bounds[0]), int(bounds[1])
            if not -(2**63) <= lo <= hi <= 2**63 - 1:
                raise option_fail(
                    "range", f"needs min <= max within 64-bit integers, got {bounds!r}"
                )
            return _replace(rule, int_range=(lo, hi))
        case Handler.FLOAT:
            bounds = spec.get("range")
            if bounds is None:
                return rule
            if not (isinstance(bounds, list) and len(bounds) == 2 and all(map(_is_number, bounds))):
                raise option_fail("range", f"must be [min, max] numbers, got {bounds!r}")
            flo, fhi = float(bounds[0]), float(bounds[1])
            if not (math.isfinite(flo) and math.isfinite(fhi) and flo <= fhi):
                raise option_fail("range", f"needs finite min <= max, got {bounds!r}")
            return _replace(rule, float_range=(flo, fhi))
        case _:
            return rule


def _replace(rule: FieldRule, **changes: Any) -> FieldRule:
    return replace(rule, **changes)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _auth(spec: Any, fail: Fail) -> Mapping[str, Any] | None:
    if spec is None:
        return None
    allowed = ("required", "read_roles", "write_roles", "plugins")
    if not isinstance(spec, dict):
        raise fail("'auth' must be a mapping", option="auth")
    unknown = [str(k) for k in spec if k not in allowed]
    if unknown:
        raise fail(f"unknown key(s): {', '.join(unknown)}", option="auth")
    if not isinstance(spec.get("required"), bool):
        raise fail("must be set to true or false", option="auth.required")
    for key in ("read_roles", "write_roles"):
        roles = spec.get(key)
        if roles is None:
            continue
        if not isinstance(roles, dict) or not all(
            isinstance(realm, str)
            and isinstance(names, list)
            and all(isinstance(n, str) for n in names)
            for realm, names in roles.items()
        ):
            raise fail("must map realm names to lists of role names", option=f"auth.{key}")
    return dict(spec)


def _storage_policy(spec: Any, fail: Fail) -> Mapping[str, Any] | None:
    if spec is None:
        return None
    allowed = ("retention_time", "max_messages", "max_size", "allow_duplicates", "compression")
    if not isinstance(spec, dict):
        raise fail("'storage_policy' must be a mapping", option="storage_policy")
    unknown = [str(k) for k in spec if k not in allowed]
    if unknown:
        raise fail(f"unknown key(s): {', '.join(unknown)}", option="storage_policy")
    return dict(spec)


def load_notification_schema(location: str, fetch_s3: S3Fetch | None) -> NotificationSchema:
    """The configured schema; no location means none configured (every event type is
    unknown). Raises `SchemaError` (a ConfigurationError: the server refuses to start)."""
    if not location:
        return NotificationSchema.unconfigured()
    return load_schema(location, fetch_s3=fetch_s3)
