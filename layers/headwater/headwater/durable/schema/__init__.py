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
  versions may not exceed it. Field rules are those of ``fields.fields_from_config``.

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
from bisect import bisect_left
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar, cast, overload

import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema.exceptions import best_match

from headwater.durable.fields import FieldSpec, fields_from_config
from headwater.durable.filter import FilterError
from headwater.durable.jsonvalue import (
    MISSING,
    json_pointer_get,
)
from headwater.durable.schema.common import (
    LENS_API_VERSION,
    REGISTRY_API_VERSION,
    UPDATE_FIELDS,
    LensApplyError,
    Registry,
    SchemaError,
    SchemaVersionConflict,
    _is_int,
    _truncate,
    _type_name,
)
from headwater.durable.schema.lenses import (
    _apply_ops,
    _check_lens,
    _compiled_lens,
)
from headwater.durable.schema.search_config import (
    _check_routing_key,
    _check_search,
)
from headwater.durable.schema.validation import (
    _check_json_schema,
    _validator,
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
