"""Lenses between schema versions (``durable.lens/v1``): compiling and checking a lens against
the schemas it joins (defaults filled from the new schema), and applying its operations to
promote a stored value from one version to the next."""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, Final, cast

from jsonschema.exceptions import best_match

from headwater.durable.jsonvalue import (
    parse_json_pointer,
)
from headwater.durable.schema.common import (
    _BUILTINS,
    _INDEX_RE,
    _INT_TEXT_RE,
    _JSON_TYPES,
    _MAX_LENS_DEPTH,
    LENS_API_VERSION,
    LensApplyError,
    SchemaError,
    SchemaVersionConflict,
    _is_int,
    _is_rfc3339,
    _parse_rfc3339_ms,
    _pointer,
    _reject_unknown,
    _require_keys,
    _truncate,
    _type_name,
)
from headwater.durable.schema.validation import (
    _check_json_schema,
    _validator,
)

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
