"""The per-stream schema registry of Durable Streams (protocol §2.2, §3.1, §7.2, §12).

Pure and storage-free: every function takes the registry as a plain JSON ``dict`` (what
``GET /_schema`` returns and what storage persists) and returns new values; nothing is mutated.
Treat registries as immutable values (compiled validators are cached by object identity).

Registry shape (reference ``docs/schemas.md`` of the Bun + TypeScript server)::

    {"apiVersion": "durable.streams/schema-registry/v1",
     "schema": "<stream name>",
     "currentVersion": 2,                                   # 0: no schema installed yet
     "routingKey": {"jsonPointer": "/user/id", "required": true},      # key omitted when unset
     "search": {"primaryTimestampField": "ts", "fields": {...}, ...},  # key omitted when unset
     "boundaries": [{"offset": "<offset>", "version": 1}, {"offset": "<offset>", "version": 2}],
     "schemas": {"1": <JSON Schema>, "2": <JSON Schema>},
     "lenses": {"1": <lens 1 -> 2>}}

``POST /_schema`` bodies (``apply_update``) may carry only ``schema``, ``lens``, ``routingKey``,
``search`` and an optional ``apiVersion`` equal to ``REGISTRY_API_VERSION``. The three parts are
applied independently, in the order schema, routingKey, search:

* ``schema``: a JSON Schema object (the ``$schema`` dialect if given, else Draft 2020-12). The
  first schema needs an empty stream and becomes version 1; any later schema needs a ``lens``
  ``v -> v+1`` and becomes version ``v+1``. Both record a boundary at ``end_offset``.
  ``$ref`` must resolve inside the schema (no remote retrieval); ``$dynamicRef`` and
  ``$recursiveRef`` are rejected. Of the ``format`` keywords only ``date-time`` (RFC 3339 with a
  zone) is asserted, as in the reference; the others are annotations.
* ``lens``: only with ``schema``. On the first install a lens, if sent, must be ``0 -> 1`` and is
  validated but not stored (reference behaviour).
* ``routingKey``: ``{"jsonPointer": <RFC 6901>, "required": bool}`` sets, ``null`` clears.
  Allowed with or without a schema (reference: routing-key extraction does not use the schema).
  It only affects later appends; stored entries keep the key they were written with.
* ``search``: the reference ``search`` object (``fields`` with ``kind``, per-version
  ``bindings`` and capability bits, ``primaryTimestampField`` (required), ``aliases``,
  ``defaultFields``, ``containsDefaultFields``, ``rollups``, ``profile``); ``null`` clears.
  Needs a schema version (already installed or installed by the same request); binding
  versions may not exceed it. Field rules are those of ``filter.fields_from_config``.

Boundaries: offsets are opaque strings that sort in stream order (``offsets.py``). A boundary
``{"offset": B, "version": v}`` means "entries at positions after B are version v";
``end_offset`` is the stream tail when the update is applied, so every later entry sorts after
it. (The reference stores the numeric first offset of the version instead; same meaning.)

Lens shape (reference ``docs/durable-lens-v1-schema.md``)::

    {"apiVersion": "durable.lens/v1", "schema": "<stream name>", "from": 1, "to": 2,
     "description": "...", "ops": [<op>, ...]}

Ops (pointers are RFC 6901; inside ``in``/``map`` they are relative to the nested value):

* ``{"op": "rename", "from": P, "to": Q}``, ``{"op": "copy", "from": P, "to": Q}``
* ``{"op": "add", "path": P, "schema": S, "default": d}``: set P to ``d`` when P is missing.
  Without ``default`` the install fills one in from ``S.default``, else from the new schema's
  ``default`` at P, else ``{}``/``[]`` for object/array types; otherwise the lens is rejected.
* ``{"op": "remove", "path": P, "schema": S}``
* ``{"op": "hoist", "host": H, "name": n, "to": Q, "removeFromHost": true}``: move ``H/n`` to Q
* ``{"op": "plunge", "from": P, "host": H, "name": n, "createHost": true,
  "removeFromSource": true}``: move P to ``H/n``
* ``{"op": "wrap", "path": P, "mode": "singleton"}`` (x -> [x]); ``{"op": "head", "path": P}``
  ([x, ...] -> x)
* ``{"op": "convert", "path": P, "fromType": t, "toType": t, "forward": T, "backward": T}``
  where ``T`` is ``{"map": {str: scalar}, "default": scalar}`` or ``{"builtin": name}``
  (``lowercase``, ``uppercase``, ``string_to_int``, ``int_to_string``,
  ``rfc3339_to_unix_millis``, ``unix_millis_to_rfc3339``); only ``forward`` runs on reads.
* ``{"op": "in", "path": P, "ops": [...]}`` (object at P), ``{"op": "map", "path": P,
  "ops": [...]}`` (each element of the array at P)

Choices where the reference is stricter or silent:

* Install-time lens checks are structural only: exact op shapes, pointer syntax, embedded
  schemas, ``add`` defaults valid under their ``schema``, ``from``/``to`` = ``v``/``v+1`` (a
  mismatch raises ``SchemaVersionConflict``, 409 in the reference), ``lens.schema`` = the stream
  name. The reference also proves the lens against the old/new schemas; we do not.
* On reads an op whose source path is missing is a no-op (the field may be optional in the old
  schema); a value of the wrong type for the op raises ``LensApplyError`` (server-side: the
  stored data cannot be promoted, not the reader's fault).
* Routing keys must be JSON strings (reference parity): numbers, booleans, ``null``, objects and
  arrays raise ``SchemaError``; a missing key is an error only when ``required``.
"""

from __future__ import annotations

import copy
import json
import math
import re
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, Final, Literal, Protocol, TypeAlias, TypeVar, cast, overload
from urllib.parse import urljoin

import jsonschema
import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema.exceptions import SchemaError as _JsonSchemaError
from jsonschema.exceptions import best_match
from jsonschema.protocols import Validator

from headwater.durable.filter import (
    MISSING,
    FieldSpec,
    FilterError,
    JsonPointerError,
    fields_from_config,
    json_pointer_get,
    parse_json_pointer,
)

__all__ = [
    "LENS_API_VERSION",
    "REGISTRY_API_VERSION",
    "UPDATE_FIELDS",
    "FieldSpec",
    "LensApplyError",
    "Registry",
    "SchemaError",
    "SchemaVersionConflict",
    "apply_update",
    "empty_registry",
    "promote",
    "routing_key",
    "search_fields",
    "validate",
    "version_at",
]

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
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


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


# --------------------------------------------------------------------------- JSON Schema


_DIALECTS: Final[dict[str, type[Validator]]] = {
    str(cls.META_SCHEMA.get("$id", cls.META_SCHEMA.get("id", ""))).rstrip("#"): cls
    for cls in (
        jsonschema.Draft4Validator,
        jsonschema.Draft6Validator,
        jsonschema.Draft7Validator,
        jsonschema.Draft201909Validator,
        jsonschema.Draft202012Validator,
    )
}
_DEFAULT_DIALECT: Final[type[Validator]] = jsonschema.Draft202012Validator
_DATA_KEYWORDS: Final = frozenset({"const", "enum", "default", "examples"})
_FORMAT_CHECKER: Final = jsonschema.FormatChecker(formats=())


def _check_date_time(instance: object) -> bool:
    return not isinstance(instance, str) or _is_rfc3339(instance)


_FORMAT_CHECKER.checks("date-time")(_check_date_time)


def _dialect(schema: Mapping[str, Any], where: str) -> type[Validator]:
    declared = schema.get("$schema")
    if declared is None:
        return _DEFAULT_DIALECT
    if not isinstance(declared, str) or declared.rstrip("#") not in _DIALECTS:
        raise SchemaError(f"{where}.$schema {declared!r} is not a supported JSON Schema dialect")
    return _DIALECTS[declared.rstrip("#")]


def _collect_refs(node: object, base: str, out: list[tuple[str, str]], where: str) -> None:
    """Gather ``(absolute ref, keyword path)``; values of data keywords are not schemas."""
    if isinstance(node, list):
        for item in node:
            _collect_refs(item, base, out, where)
        return
    if not isinstance(node, Mapping):
        return
    node_id = node.get("$id")
    if isinstance(node_id, str):
        base = urljoin(base, node_id)
    for key in ("$dynamicRef", "$recursiveRef"):
        if key in node:
            raise SchemaError(f"{where}: {key} is not supported")
    ref = node.get("$ref")
    if ref is not None:
        if not isinstance(ref, str):
            raise SchemaError(f"{where}: $ref must be a string")
        out.append((urljoin(base, ref), ref))
    for key, value in node.items():
        if key not in _DATA_KEYWORDS:
            _collect_refs(value, base, out, where)


def _check_json_schema(schema: object, where: str) -> None:
    """Raise ``SchemaError`` unless ``schema`` is a valid, self-contained JSON Schema object."""
    if not isinstance(schema, Mapping):
        raise SchemaError(f"{where} must be a JSON Schema object, got {_type_name(schema)}")
    cls = _dialect(schema, where)
    try:
        cls.check_schema(schema)
    except RecursionError:  # jsonschema recurses per level of the schema
        raise SchemaError(f"{where} is nested too deeply to check") from None
    except _JsonSchemaError as exc:
        location = "/".join(str(p) for p in exc.path)
        at = f" at /{location}" if location else ""
        message = f"{where} is not a valid JSON Schema{at}: {exc.message}"
        raise SchemaError(_truncate(message)) from None
    refs: list[tuple[str, str]] = []
    root_id = schema.get("$id")
    root = root_id if isinstance(root_id, str) else ""
    _collect_refs(schema, root, refs, where)
    if not refs:
        return
    resource = referencing.Resource.from_contents(
        schema, default_specification=referencing.jsonschema.DRAFT202012
    )
    registry: referencing.Registry[Any] = referencing.Registry().with_resource(root, resource)
    try:
        resolver = registry.crawl().resolver(base_uri=root)
    except referencing.exceptions.Unresolvable as exc:  # pragma: no cover - defensive
        raise SchemaError(f"{where}: {exc}") from None
    for absolute, ref in refs:
        try:
            resolver.lookup(absolute)
        except referencing.exceptions.Unresolvable:
            raise SchemaError(
                _truncate(
                    f"{where}: $ref {ref!r} does not resolve inside the schema "
                    "(external references are not supported)"
                )
            ) from None


_VALIDATOR_CACHE: Final[OrderedDict[int, tuple[object, Validator]]] = OrderedDict()
_VALIDATOR_CACHE_SIZE: Final = 256


@lru_cache(maxsize=_VALIDATOR_CACHE_SIZE)
def _validator_for_text(text: str) -> Validator:
    schema = json.loads(text)
    cls = _dialect(schema, "schema")
    return cls(schema, format_checker=_FORMAT_CHECKER)


def _validator(schema: Mapping[str, Any]) -> Validator:
    """Compiled validator; identity cache first, then one keyed by canonical JSON text."""
    hit = _VALIDATOR_CACHE.get(id(schema))
    if hit is not None and hit[0] is schema:
        _VALIDATOR_CACHE.move_to_end(id(schema))
        return hit[1]
    validator = _validator_for_text(json.dumps(schema, sort_keys=True, separators=(",", ":")))
    _VALIDATOR_CACHE[id(schema)] = (schema, validator)
    if len(_VALIDATOR_CACHE) > _VALIDATOR_CACHE_SIZE:
        _VALIDATOR_CACHE.popitem(last=False)
    return validator


# --------------------------------------------------------------------------- lenses


@dataclass(frozen=True, slots=True)
class _Op:
    """One compiled lens op; unused pointer fields are empty tuples."""

    op: str
    path: tuple[str, ...] = ()
    src: tuple[str, ...] = ()
    dst: tuple[str, ...] = ()
    name: str = ""
    default: Any = None
    flag: bool = True
    create: bool = True
    from_type: str = ""
    to_type: str = ""
    transform: Mapping[str, Any] | None = None
    ops: tuple[_Op, ...] = ()


def _check_bool(raw: Mapping[str, Any], key: str, where: str) -> bool:
    value = raw.get(key, True)
    if not isinstance(value, bool):
        raise SchemaError(f"{where}.{key} must be a boolean")
    return value


def _check_name(raw: Mapping[str, Any], where: str) -> str:
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise SchemaError(f"{where}.name must be a non-empty string")
    return name


def _check_transform(raw: object, where: str) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise SchemaError(f"{where} must be an object")
    if "builtin" in raw:
        _reject_unknown(raw, ("builtin",), where)
        if raw["builtin"] not in _BUILTINS:
            known = ", ".join(sorted(_BUILTINS))
            raise SchemaError(f"{where}.builtin must be one of {known}, got {raw['builtin']!r}")
        return raw
    _reject_unknown(raw, ("map", "default"), where)
    table = raw.get("map")
    if not isinstance(table, Mapping):
        raise SchemaError(f"{where} must have a map object or a builtin name")
    scalars = (str, int, float, bool, type(None))
    for key, value in table.items():
        if not isinstance(value, scalars):
            raise SchemaError(f"{where}.map.{key} must be a JSON scalar")
    if "default" in raw and not isinstance(raw["default"], scalars):
        raise SchemaError(f"{where}.default must be a JSON scalar")
    return raw


def _nonroot(path: tuple[str, ...], where: str) -> tuple[str, ...]:
    if not path:
        raise SchemaError(f"{where} must not be the document root")
    return path


_OP_KEYS: Final[dict[str, tuple[tuple[str, ...], tuple[str, ...]]]] = {
    # op: (required keys, optional keys), "op" itself excluded
    "rename": (("from", "to"), ()),
    "copy": (("from", "to"), ()),
    "add": (("path", "schema"), ("default",)),
    "remove": (("path", "schema"), ("default",)),
    "hoist": (("host", "name", "to"), ("removeFromHost",)),
    "plunge": (("from", "host", "name"), ("createHost", "removeFromSource")),
    "wrap": (("path", "mode"), ("reverseMode",)),
    "head": (("path",), ("reverseMode",)),
    "convert": (("path", "fromType", "toType", "forward", "backward"), ()),
    "in": (("path", "ops"), ()),
    "map": (("path", "ops"), ()),
}


def _compile_ops(raw: object, where: str, depth: int) -> tuple[_Op, ...]:
    if depth > _MAX_LENS_DEPTH:
        raise SchemaError(f"{where}: ops are nested deeper than {_MAX_LENS_DEPTH}")
    if not isinstance(raw, list) or not raw:
        raise SchemaError(f"{where} must be a non-empty array")
    return tuple(_compile_op(item, f"{where}[{i}]", depth) for i, item in enumerate(raw))


def _compile_op(raw: object, where: str, depth: int) -> _Op:
    if not isinstance(raw, Mapping):
        raise SchemaError(f"{where} must be an object")
    kind = raw.get("op")
    if not isinstance(kind, str) or kind not in _OP_KEYS:
        raise SchemaError(f"{where}.op must be one of {', '.join(_OP_KEYS)}, got {kind!r}")
    required, optional = _OP_KEYS[kind]
    _reject_unknown(raw, ("op", *required, *optional), where)
    _require_keys(raw, required, where)
    if kind in ("rename", "copy"):
        src = _pointer(raw["from"], f"{where}.from")
        dst = _nonroot(_pointer(raw["to"], f"{where}.to"), f"{where}.to")
        if kind == "rename":
            _nonroot(src, f"{where}.from")
        return _Op(kind, src=src, dst=dst)
    if kind in ("add", "remove"):
        path = _nonroot(_pointer(raw["path"], f"{where}.path"), f"{where}.path")
        op_schema = raw["schema"]
        if isinstance(op_schema, bool):
            op_schema = {} if op_schema else {"not": {}}
        _check_json_schema(op_schema, f"{where}.schema")
        if kind == "add" and "default" in raw:
            errors = best_match(_validator(op_schema).iter_errors(raw["default"]))
            if errors is not None:
                raise SchemaError(
                    _truncate(f"{where}.default does not match {where}.schema: {errors.message}")
                )
        return _Op(kind, path=path, default=copy.deepcopy(raw.get("default")))
    if kind == "hoist":
        host = _pointer(raw["host"], f"{where}.host")
        dst = _nonroot(_pointer(raw["to"], f"{where}.to"), f"{where}.to")
        flag = _check_bool(raw, "removeFromHost", where)
        return _Op(kind, path=host, dst=dst, name=_check_name(raw, where), flag=flag)
    if kind == "plunge":
        src = _nonroot(_pointer(raw["from"], f"{where}.from"), f"{where}.from")
        host = _pointer(raw["host"], f"{where}.host")
        name = _check_name(raw, where)
        create = _check_bool(raw, "createHost", where)
        remove = _check_bool(raw, "removeFromSource", where)
        return _Op(kind, path=host, src=src, name=name, flag=remove, create=create)
    if kind in ("wrap", "head"):
        if kind == "wrap" and raw["mode"] != "singleton":
            raise SchemaError(f"{where}.mode must be singleton")
        reverse = "first" if kind == "wrap" else "singleton"
        if raw.get("reverseMode", reverse) != reverse:
            raise SchemaError(f"{where}.reverseMode must be {reverse}")
        return _Op(kind, path=_pointer(raw["path"], f"{where}.path"))
    if kind == "convert":
        for key in ("fromType", "toType"):
            if raw[key] not in _JSON_TYPES:
                types = ", ".join(sorted(_JSON_TYPES))
                raise SchemaError(f"{where}.{key} must be one of {types}, got {raw[key]!r}")
        forward = _check_transform(raw["forward"], f"{where}.forward")
        _check_transform(raw["backward"], f"{where}.backward")
        return _Op(
            kind,
            path=_pointer(raw["path"], f"{where}.path"),
            from_type=raw["fromType"],
            to_type=raw["toType"],
            transform=copy.deepcopy(forward),
        )
    # in / map
    path = _pointer(raw["path"], f"{where}.path")
    return _Op(kind, path=path, ops=_compile_ops(raw["ops"], f"{where}.ops", depth + 1))


def _check_lens_envelope(lens: object, stream: str) -> Mapping[str, Any]:
    if not isinstance(lens, Mapping):
        raise SchemaError("lens must be an object")
    _reject_unknown(lens, ("apiVersion", "schema", "from", "to", "description", "ops"), "lens")
    _require_keys(lens, ("apiVersion", "schema", "from", "to", "ops"), "lens")
    if lens["apiVersion"] != LENS_API_VERSION:
        raise SchemaError(f"lens.apiVersion must be {LENS_API_VERSION!r}")
    if not isinstance(lens["schema"], str) or not lens["schema"]:
        raise SchemaError("lens.schema must be a non-empty string")
    for key in ("from", "to"):
        if not _is_int(lens[key]) or lens[key] < 0:
            raise SchemaError(f"lens.{key} must be a non-negative integer")
    if "description" in lens and not isinstance(lens["description"], str):
        raise SchemaError("lens.description must be a string")
    if lens["schema"] != stream:
        raise SchemaError(f"lens.schema must be {stream!r} (the stream's schema name)")
    return lens


def _derive_default(subschema: object) -> tuple[bool, Any]:
    if not isinstance(subschema, Mapping):
        return False, None
    if "default" in subschema:
        return True, copy.deepcopy(subschema["default"])
    types = subschema.get("type")
    type_set = (
        {types} if isinstance(types, str) else set(types) if isinstance(types, list) else set()
    )
    if "object" in type_set:
        return True, {}
    if "array" in type_set:
        return True, []
    return False, None


def _schema_at(schema: object, path: Sequence[str]) -> object:
    """The subschema of ``properties``/``items`` along ``path`` (``None`` if not declared)."""
    node = schema
    for token in path:
        if not isinstance(node, Mapping):
            return None
        props = node.get("properties")
        if isinstance(props, Mapping) and token in props:
            node = props[token]
        elif _INDEX_RE.fullmatch(token) and isinstance(node.get("items"), Mapping):
            node = node["items"]
        else:
            return None
    return node


def _fill_defaults(ops: list[Any], new_schema: object, prefix: list[str], where: str) -> None:
    """Give every ``add`` without ``default`` one derived from its schemas (mutates ``ops``)."""
    for i, op in enumerate(ops):
        if op["op"] == "add" and "default" not in op:
            path = list(parse_json_pointer(op["path"]))
            found, value = _derive_default(op["schema"])
            if not found:
                found, value = _derive_default(_schema_at(new_schema, prefix + path))
            if not found:
                raise SchemaError(
                    f"{where}[{i}] (add {op['path']}) needs a default: none in the op schema "
                    "or the new schema"
                )
            op["default"] = value
        elif op["op"] == "in":
            sub = prefix + list(parse_json_pointer(op["path"]))
            _fill_defaults(op["ops"], new_schema, sub, f"{where}[{i}].ops")
        elif op["op"] == "map":
            # map ops apply to array items; their pointers are relative to one item
            sub = [*prefix, *parse_json_pointer(op["path"]), "0"]
            _fill_defaults(op["ops"], new_schema, sub, f"{where}[{i}].ops")


def _check_lens(
    lens: object, *, stream: str, from_version: int, new_schema: object
) -> dict[str, Any]:
    """Validate a lens for ``from_version -> from_version + 1``; return it with add defaults."""
    envelope = _check_lens_envelope(lens, stream)
    if envelope["from"] != from_version or envelope["to"] != from_version + 1:
        raise SchemaVersionConflict(
            f"lens must go from version {from_version} to {from_version + 1}, "
            f"got {envelope['from']} -> {envelope['to']}"
        )
    _compile_ops(envelope["ops"], "lens.ops", 1)
    stored = copy.deepcopy(dict(envelope))
    _fill_defaults(stored["ops"], new_schema, [], "lens.ops")
    _compile_ops(stored["ops"], "lens.ops", 1)  # the filled defaults must still validate
    return stored


@lru_cache(maxsize=256)
def _compiled_lens_text(text: str) -> tuple[_Op, ...]:
    return _compile_ops(json.loads(text)["ops"], "lens.ops", 1)


def _compiled_lens(lens: Mapping[str, Any]) -> tuple[_Op, ...]:
    return _compiled_lens_text(json.dumps(lens, sort_keys=True, separators=(",", ":")))


# ---- applying ops (documents are private deep copies; helpers return the new root)


class _Absent:
    pass


_ABSENT: Final = _Absent()


def _child(container: object, token: str) -> object:
    if isinstance(container, dict):
        return container.get(token, _ABSENT)
    if isinstance(container, list) and _INDEX_RE.fullmatch(token) and int(token) < len(container):
        return container[int(token)]
    return _ABSENT


def _get(doc: object, path: Sequence[str]) -> object:
    node = doc
    for token in path:
        node = _child(node, token)
        if node is _ABSENT:
            return _ABSENT
    return node


def _parent(doc: object, path: Sequence[str], create: bool = False) -> object:
    node = doc
    for token in path[:-1]:
        nxt = _child(node, token)
        if nxt is _ABSENT:
            if not (create and isinstance(node, dict)):
                raise LensApplyError(f"parent of /{'/'.join(path)} is missing")
            nxt = node[token] = {}
        node = nxt
    return node


def _set(doc: object, path: Sequence[str], value: object, create: bool = False) -> object:
    if not path:
        return value
    parent, token = _parent(doc, path, create), path[-1]
    if isinstance(parent, dict):
        parent[token] = value
    elif isinstance(parent, list) and _INDEX_RE.fullmatch(token) and int(token) < len(parent):
        parent[int(token)] = value
    else:
        raise LensApplyError(f"cannot set /{'/'.join(path)} in a {_type_name(parent)}")
    return doc


def _delete(doc: object, path: Sequence[str]) -> None:
    parent, token = _parent(doc, path), path[-1]
    if isinstance(parent, dict):
        parent.pop(token, None)
    elif isinstance(parent, list) and _INDEX_RE.fullmatch(token) and int(token) < len(parent):
        del parent[int(token)]


def _js_string(value: object) -> str:
    """``String(value)`` as JavaScript spells it (the convert map key, reference parity)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return str(value)


def _has_type(value: object, name: str) -> bool:
    actual = _type_name(value)
    return (
        actual == name
        or (name == "number" and actual == "integer")
        or (name == "integer" and isinstance(value, float) and value.is_integer())
    )


def _builtin(name: str, value: object) -> object:
    if name in ("lowercase", "uppercase") and isinstance(value, str):
        return value.lower() if name == "lowercase" else value.upper()
    if name == "string_to_int" and isinstance(value, str) and _INT_TEXT_RE.fullmatch(value):
        return int(value)
    if name == "int_to_string" and _has_type(value, "integer"):
        return str(int(cast(float, value)))
    if name == "rfc3339_to_unix_millis" and isinstance(value, str) and _is_rfc3339(value):
        return _parse_rfc3339_ms(value)
    if name == "unix_millis_to_rfc3339" and _has_type(value, "number"):
        millis = cast(float, value)
        if math.isfinite(millis):
            try:
                dt = datetime.fromtimestamp(math.floor(millis) / 1000, tz=UTC)
            except (OverflowError, ValueError, OSError):
                pass
            else:
                return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"
    raise LensApplyError(f"builtin {name} cannot convert a {_type_name(value)} value {value!r}")


def _convert(op: _Op, value: object) -> object:
    if not _has_type(value, op.from_type):
        raise LensApplyError(f"convert expected {op.from_type}, got {_type_name(value)}")
    transform = op.transform or {}
    if "builtin" in transform:
        out = _builtin(transform["builtin"], value)
    else:
        table, key = transform["map"], _js_string(value)
        if key in table:
            out = table[key]
        elif "default" in transform:
            out = transform["default"]
        else:
            raise LensApplyError(f"convert map has no entry for {key!r} and no default")
    if not _has_type(out, op.to_type):
        raise LensApplyError(f"convert produced {_type_name(out)}, expected {op.to_type}")
    return out


def _apply_ops(doc: object, ops: Sequence[_Op]) -> object:
    for op in ops:
        doc = _apply_op(doc, op)
    return doc


def _apply_op(doc: object, op: _Op) -> object:
    kind = op.op
    if kind in ("rename", "copy"):
        value = _get(doc, op.src)
        if value is _ABSENT:
            return doc
        if kind == "rename":
            _delete(doc, op.src)
        else:
            value = copy.deepcopy(value)
        return _set(doc, op.dst, value)
    if kind == "add":
        if _get(doc, op.path) is not _ABSENT:
            return doc
        return _set(doc, op.path, copy.deepcopy(op.default))
    if kind == "remove":
        if _get(doc, op.path) is not _ABSENT:
            _delete(doc, op.path)
        return doc
    if kind == "hoist":
        host = _get(doc, op.path)
        if host is _ABSENT:
            return doc
        if not isinstance(host, dict):
            raise LensApplyError(f"hoist host is a {_type_name(host)}, not an object")
        if op.name not in host:
            return doc
        value = host.pop(op.name) if op.flag else copy.deepcopy(host[op.name])
        return _set(doc, op.dst, value)
    if kind == "plunge":
        value = _get(doc, op.src)
        if value is _ABSENT:
            return doc
        host = _get(doc, op.path)
        if host is _ABSENT:
            if not op.create:
                raise LensApplyError("plunge host is missing and createHost is false")
            host = {}
            doc = _set(doc, op.path, host, create=True)
        if not isinstance(host, dict):
            raise LensApplyError(f"plunge host is a {_type_name(host)}, not an object")
        if op.flag:  # removeFromSource
            _delete(doc, op.src)
        else:
            value = copy.deepcopy(value)
        host[op.name] = value
        return doc
    value = _get(doc, op.path)
    if value is _ABSENT:
        return doc
    if kind == "wrap":
        return _set(doc, op.path, [value])
    if kind == "head":
        if not isinstance(value, list) or not value:
            raise LensApplyError(f"head expects a non-empty array, got {_type_name(value)}")
        return _set(doc, op.path, value[0])
    if kind == "convert":
        return _set(doc, op.path, _convert(op, value))
    if kind == "in":
        if not isinstance(value, dict):
            raise LensApplyError(f"in expects an object, got {_type_name(value)}")
        return _set(doc, op.path, _apply_ops(value, op.ops))
    # map
    if not isinstance(value, list):
        raise LensApplyError(f"map expects an array, got {_type_name(value)}")
    return _set(doc, op.path, [_apply_ops(item, op.ops) for item in value])


# --------------------------------------------------------------------------- routing key, search


def _check_routing_key(raw: object) -> dict[str, Any] | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise SchemaError(f"routingKey must be an object or null, got {_type_name(raw)}")
    _reject_unknown(raw, ("jsonPointer", "required"), "routingKey")
    _require_keys(raw, ("jsonPointer", "required"), "routingKey")
    _pointer(raw["jsonPointer"], "routingKey.jsonPointer")
    if not isinstance(raw["required"], bool):
        raise SchemaError("routingKey.required must be a boolean")
    return {"jsonPointer": raw["jsonPointer"], "required": raw["required"]}


def _field_names(raw: object, where: str, declared: Mapping[str, FieldSpec]) -> None:
    if not isinstance(raw, str) or raw not in declared:
        raise SchemaError(f"{where} must reference a declared search field")


def _check_rollup(raw: object, where: str, fields: Mapping[str, FieldSpec], primary: str) -> None:
    if not isinstance(raw, Mapping):
        raise SchemaError(f"{where} must be an object")
    allowed = ("timestampField", "include", "dimensions", "intervals", "measures")
    _reject_unknown(raw, allowed, where)
    ts = raw.get("timestampField", primary)
    _field_names(ts, f"{where}.timestampField", fields)
    if fields[ts].kind != "date":
        raise SchemaError(f"{where}.timestampField must reference a date field")
    if "include" in raw and (not isinstance(raw["include"], str) or not raw["include"].strip()):
        raise SchemaError(f"{where}.include must be a non-empty string")
    dims = raw.get("dimensions", [])
    if not isinstance(dims, list):
        raise SchemaError(f"{where}.dimensions must be an array")
    for i, dim in enumerate(dims):
        _field_names(dim, f"{where}.dimensions[{i}]", fields)
        if dims.index(dim) != i:
            raise SchemaError(f"{where}.dimensions[{i}] duplicates {dim}")
        if not fields[dim].exact:
            raise SchemaError(f"{where}.dimensions[{i}] must reference an exact-capable field")
    intervals = raw.get("intervals")
    if not isinstance(intervals, list) or not intervals:
        raise SchemaError(f"{where}.intervals must be a non-empty array")
    for i, text in enumerate(intervals):
        match = _DURATION_RE.fullmatch(text) if isinstance(text, str) else None
        if match is None or int(match.group(1)) == 0:
            raise SchemaError(f"{where}.intervals[{i}] must be a positive duration like 1m or 1h")
        if intervals.index(text) != i:
            raise SchemaError(f"{where}.intervals[{i}] duplicates {text}")
    measures = raw.get("measures")
    if not isinstance(measures, Mapping) or not measures:
        raise SchemaError(f"{where}.measures must be a non-empty object")
    for name, measure in measures.items():
        _check_measure(measure, f"{where}.measures.{name}", fields)


def _check_measure(raw: object, where: str, fields: Mapping[str, FieldSpec]) -> None:
    if not isinstance(raw, Mapping):
        raise SchemaError(f"{where} must be an object")
    kind = raw.get("kind")
    if kind == "count":
        _reject_unknown(raw, ("kind", "include"), where)
        if "include" in raw and (not isinstance(raw["include"], str) or not raw["include"]):
            raise SchemaError(f"{where}.include must be a non-empty string")
    elif kind == "summary":
        _reject_unknown(raw, ("kind", "field", "histogram"), where)
        _field_names(raw.get("field"), f"{where}.field", fields)
        spec = fields[raw["field"]]
        if not spec.aggregatable or spec.kind not in ("integer", "float"):
            raise SchemaError(f"{where}.field must reference an aggregatable integer/float field")
        if raw.get("histogram", "log2_v1") != "log2_v1":
            raise SchemaError(f"{where}.histogram must be log2_v1")
    elif kind == "summary_parts":
        parts = ("countJsonPointer", "sumJsonPointer", "minJsonPointer", "maxJsonPointer")
        _reject_unknown(raw, ("kind", *parts, "histogramJsonPointer"), where)
        _require_keys(raw, parts, where)
        for key in (*parts, "histogramJsonPointer"):
            if key in raw:
                _pointer(raw[key], f"{where}.{key}")
    else:
        raise SchemaError(f"{where}.kind must be count, summary or summary_parts")


def _check_search(raw: object, version: int) -> dict[str, Any] | None:
    """Validate a ``search`` object for a registry whose current version is ``version``."""
    if raw is None:
        return None
    if version < 1:
        raise SchemaError(
            "search requires an installed schema version; send schema and search together"
        )
    if not isinstance(raw, Mapping):
        raise SchemaError(f"search must be an object or null, got {_type_name(raw)}")
    try:
        resolved = fields_from_config(raw)
    except FilterError as exc:
        raise SchemaError(str(exc)) from None
    declared = {name: spec for name, spec in resolved.items() if spec.name == name}
    if "primaryTimestampField" not in raw:
        raise SchemaError("search.primaryTimestampField is required (a declared date field)")
    for spec in declared.values():
        for i, binding in enumerate(spec.bindings):
            if binding.version > version:
                raise SchemaError(
                    f"search.fields.{spec.name}.bindings[{i}].version {binding.version} is "
                    f"newer than the schema version {version}"
                )
    if "profile" in raw and not isinstance(raw["profile"], str):
        raise SchemaError("search.profile must be a string")
    defaults = raw.get("defaultFields", [])
    if not isinstance(defaults, list):
        raise SchemaError("search.defaultFields must be an array")
    for i, item in enumerate(defaults):
        where = f"search.defaultFields[{i}]"
        if not isinstance(item, Mapping):
            raise SchemaError(f"{where} must be an object")
        _reject_unknown(item, ("field", "boost"), where)
        _field_names(item.get("field"), f"{where}.field", declared)
        boost = item.get("boost", 1)
        if isinstance(boost, bool) or not isinstance(boost, int | float) or not boost > 0:
            raise SchemaError(f"{where}.boost must be a positive number")
        if not math.isfinite(boost):
            raise SchemaError(f"{where}.boost must be a positive number")
    contains = raw.get("containsDefaultFields", [])
    if not isinstance(contains, list):
        raise SchemaError("search.containsDefaultFields must be an array")
    for i, name in enumerate(contains):
        _field_names(name, f"search.containsDefaultFields[{i}]", declared)
    rollups = raw.get("rollups", {})
    if not isinstance(rollups, Mapping):
        raise SchemaError("search.rollups must be an object")
    for name, rollup in rollups.items():
        _check_rollup(rollup, f"search.rollups.{name}", declared, raw["primaryTimestampField"])
    return copy.deepcopy(dict(raw))


# --------------------------------------------------------------------------- public API


def empty_registry(stream: str) -> Registry:
    """The registry of a stream without a schema (``currentVersion`` 0)."""
    return {
        "apiVersion": REGISTRY_API_VERSION,
        "schema": stream,
        "currentVersion": 0,
        "boundaries": [],
        "schemas": {},
        "lenses": {},
    }


def _current(registry: Mapping[str, Any]) -> int:
    version = registry.get("currentVersion", 0)
    if not _is_int(version) or version < 0:
        raise ValueError(f"registry currentVersion is invalid: {version!r}")
    return cast(int, version)


def apply_update(
    registry: Mapping[str, Any],
    body: object,
    *,
    stream_is_empty: bool,
    end_offset: str,
) -> Registry:
    """Apply a ``POST /_schema`` body; return the new registry (the input is not modified).

    ``end_offset`` is the stream tail now (every later entry sorts after it); for an empty
    stream it is the start position. Every client error raises ``SchemaError``
    (``SchemaVersionConflict`` for a lens with the wrong ``from``/``to``). A bad ``registry``
    or ``end_offset`` (caller bugs) raise plain ``ValueError``.
    """
    if not isinstance(end_offset, str) or not end_offset:
        raise ValueError("end_offset must be a non-empty offset string")
    if not isinstance(body, Mapping):
        raise SchemaError(f"schema update must be a JSON object, got {_type_name(body)}")
    for key in body:
        if key not in UPDATE_FIELDS:
            raise SchemaError(
                f"schema update field {key!r} is not supported; "
                f"accepted fields: {', '.join(UPDATE_FIELDS)}"
            )
    if "apiVersion" in body and body["apiVersion"] != REGISTRY_API_VERSION:
        raise SchemaError(f"apiVersion must be {REGISTRY_API_VERSION!r}")
    if not any(key in body for key in ("schema", "routingKey", "search")):
        raise SchemaError("schema update must include schema, routingKey or search")
    if "lens" in body and "schema" not in body:
        raise SchemaError("lens is only accepted together with a new schema")

    stream = registry.get("schema")
    if not isinstance(stream, str):
        raise ValueError("registry schema (stream name) must be a string")
    current = _current(registry)
    boundaries = [dict(b) for b in registry.get("boundaries", [])]
    schemas = dict(registry.get("schemas", {}))
    lenses = dict(registry.get("lenses", {}))
    routing = registry.get("routingKey")
    search = registry.get("search")

    if "schema" in body:
        new_schema = body["schema"]
        _check_json_schema(new_schema, "schema")
        if boundaries and end_offset < boundaries[-1]["offset"]:
            raise ValueError("end_offset sorts before the last schema boundary")
        if current == 0:
            if not stream_is_empty:
                raise SchemaError("the first schema can only be installed on an empty stream")
            if "lens" in body and body["lens"] is not None:
                _check_lens(body["lens"], stream=stream, from_version=0, new_schema=new_schema)
        else:
            if body.get("lens") is None:
                raise SchemaError(
                    f"a new schema needs a lens from version {current} to {current + 1}"
                )
            lenses[str(current)] = _check_lens(
                body["lens"], stream=stream, from_version=current, new_schema=new_schema
            )
        current += 1
        schemas[str(current)] = copy.deepcopy(new_schema)
        boundaries.append({"offset": end_offset, "version": current})
    if "routingKey" in body:
        routing = _check_routing_key(body["routingKey"])
    if "search" in body:
        search = _check_search(body["search"], current)

    out: Registry = {"apiVersion": REGISTRY_API_VERSION, "schema": stream}
    out["currentVersion"] = current
    if routing is not None:
        out["routingKey"] = copy.deepcopy(routing)
    if search is not None:
        out["search"] = copy.deepcopy(search)
    out["boundaries"] = boundaries
    out["schemas"] = schemas
    out["lenses"] = lenses
    return out


def validate(registry: Mapping[str, Any], value: object) -> None:
    """Raise ``SchemaError`` unless ``value`` is valid under the current schema (if any)."""
    current = _current(registry)
    if current == 0:
        return
    schema = registry["schemas"][str(current)]
    try:
        error = best_match(_validator(schema).iter_errors(value))
    except RecursionError:  # jsonschema recurses per level of value and schema
        raise SchemaError(
            f"value is nested too deeply to check against schema version {current}"
        ) from None
    except referencing.exceptions.Unresolvable as exc:  # pragma: no cover - checked on install
        raise SchemaError(_truncate(f"schema reference does not resolve: {exc}")) from None
    if error is not None:
        where = "".join(f"/{p}" for p in error.absolute_path) or "/"
        raise SchemaError(
            _truncate(f"value does not match schema version {current} at {where}: {error.message}")
        )


def promote(registry: Mapping[str, Any], value: object, from_version: int) -> object:
    """``value`` (written under ``from_version``) as the current version; the input is kept.

    Raises ``LensApplyError`` if a lens is missing or cannot transform the value, and
    ``ValueError`` for a version outside ``0..currentVersion``.
    """
    current = _current(registry)
    if not _is_int(from_version) or not 0 <= from_version <= current:
        raise ValueError(f"from_version must be in 0..{current}, got {from_version!r}")
    if from_version == current:
        return value
    doc = copy.deepcopy(value)
    for version in range(from_version, current):
        lens = registry.get("lenses", {}).get(str(version))
        if lens is None:
            raise LensApplyError(f"no lens from version {version} to {version + 1}")
        try:
            doc = _apply_ops(doc, _compiled_lens(lens))
        except LensApplyError as exc:
            raise LensApplyError(f"lens {version} -> {version + 1}: {exc}") from None
    return doc


class _Comparable(Protocol):
    def __lt__(self, other: Any, /) -> bool: ...


K = TypeVar("K", bound=_Comparable)


@overload
def version_at(registry: Mapping[str, Any], position: str) -> int: ...
@overload
def version_at(registry: Mapping[str, Any], position: K, *, key: Callable[[str], K]) -> int: ...
def version_at(
    registry: Mapping[str, Any], position: Any, *, key: Callable[[str], Any] | None = None
) -> int:
    """The schema version of the entry at ``position`` (0 if it precedes every boundary).

    A boundary ``{offset: B, version: v}`` covers positions strictly after ``B`` up to the next
    boundary; with equal offsets the later boundary wins. By default ``position`` is an offset
    string compared with the boundary strings; pass ``key`` to map boundary offsets to the
    caller's position type (``key=lambda s: decode_offset(s).seq`` and an int position).
    """
    boundaries: list[Mapping[str, Any]] = list(registry.get("boundaries", []))
    to_key: Callable[[str], Any] = key if key is not None else (lambda s: s)
    index = bisect_left(boundaries, position, key=lambda b: to_key(b["offset"]))
    return 0 if index == 0 else int(boundaries[index - 1]["version"])


def routing_key(registry: Mapping[str, Any], value: object) -> str | None:
    """The routing key the registry derives from ``value``, or ``None`` if not configured.

    ``None`` also when the pointer does not resolve and the key is not ``required``; a
    required key that is missing, or a value that is not a JSON string, raises ``SchemaError``.
    """
    config = registry.get("routingKey")
    if not config:
        return None
    pointer = config["jsonPointer"]
    found = json_pointer_get(value, pointer)
    if found is MISSING:
        if config["required"]:
            raise SchemaError(f"routing key is required but {pointer or '/'} is missing")
        return None
    if not isinstance(found, str):
        raise SchemaError(
            f"routing key at {pointer or '/'} must be a string, got {_type_name(found)}"
        )
    return found


def search_fields(registry: Mapping[str, Any]) -> dict[str, FieldSpec]:
    """``search.fields`` (and aliases) as ``filter.FieldSpec``s; ``{}`` if no search config.

    Each spec carries the per-version bindings: ``spec.pointer`` is the newest binding (for
    promoted documents), ``spec.pointer_for(v)`` the one for raw documents of version ``v``.
    """
    search = registry.get("search")
    if not search:
        return {}
    try:
        return fields_from_config(search)
    except FilterError as exc:  # pragma: no cover - validated on install
        raise SchemaError(str(exc)) from None
