"""JSON Schema in a registry: the dialects accepted, the checks of a schema before it is
installed (local ``$ref`` only, no dynamic refs, ``date-time`` asserted), and compiled
validators cached per schema."""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, Final
from urllib.parse import urljoin

import jsonschema
import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema.exceptions import SchemaError as _JsonSchemaError
from jsonschema.protocols import Validator

from headwater.durable.schema.common import (
    SchemaError,
    _is_rfc3339,
    _truncate,
    _type_name,
)

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
