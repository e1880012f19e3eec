"""The non-schema parts of a registry update: the ``routingKey`` (an RFC 6901 pointer) and
the ``search`` configuration (fields by kind and version, aliases, default fields, rollups
and their measures)."""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

from headwater.durable.fields import FieldSpec, fields_from_config
from headwater.durable.filter import FilterError
from headwater.durable.schema.common import (
    _DURATION_RE,
    SchemaError,
    _pointer,
    _reject_unknown,
    _require_keys,
    _type_name,
)

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
