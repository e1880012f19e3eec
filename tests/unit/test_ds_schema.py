"""The per-stream schema registry (protocol §2.2, §3.1, §12): updates, lenses, validation."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from headwater.durable.fields import FieldSpec
from headwater.durable.offsets import Offset, decode_offset, encode_offset
from headwater.durable.schema import (
    LENS_API_VERSION,
    REGISTRY_API_VERSION,
    LensApplyError,
    SchemaError,
    SchemaVersionConflict,
    apply_update,
    empty_registry,
    promote,
    routing_key,
    search_fields,
    validate,
    version_at,
)

pytestmark = pytest.mark.unit

STREAM = "orders"
START = encode_offset(0, 0)
OFF5 = encode_offset(0, 5)
OFF9 = encode_offset(0, 9)

V1: dict[str, Any] = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "ts": {"type": "string", "format": "date-time"}},
    "required": ["name"],
}
V2: dict[str, Any] = {
    "type": "object",
    "properties": {"fullName": {"type": "string"}, "ts": {"type": "string"}},
    "required": ["fullName"],
    "additionalProperties": False,
}
SEARCH: dict[str, Any] = {
    "primaryTimestampField": "ts",
    "fields": {
        "ts": {"kind": "date", "bindings": [{"version": 1, "jsonPointer": "/ts"}], "column": True},
        "name": {
            "kind": "keyword",
            "bindings": [{"version": 1, "jsonPointer": "/name"}],
            "exact": True,
        },
    },
}


def lens(ops: list[dict[str, Any]], frm: int = 1, to: int = 2) -> dict[str, Any]:
    return {"apiVersion": LENS_API_VERSION, "schema": STREAM, "from": frm, "to": to, "ops": ops}


RENAME = [{"op": "rename", "from": "/name", "to": "/fullName"}]


def v1_registry(**body: Any) -> dict[str, Any]:
    return apply_update(
        empty_registry(STREAM), {"schema": V1, **body}, stream_is_empty=True, end_offset=START
    )


def v2_registry() -> dict[str, Any]:
    return apply_update(
        v1_registry(), {"schema": V2, "lens": lens(RENAME)}, stream_is_empty=False, end_offset=OFF5
    )


def registry_with_ops(ops: list[dict[str, Any]], new_schema: Any = None) -> dict[str, Any]:
    body = {"schema": new_schema or {"type": "object"}, "lens": lens(ops)}
    base = apply_update(
        empty_registry(STREAM), {"schema": {}}, stream_is_empty=True, end_offset=START
    )
    return apply_update(base, body, stream_is_empty=False, end_offset=OFF5)


def update_error(registry: dict[str, Any], body: Any, empty: bool = False) -> str:
    with pytest.raises(SchemaError) as info:
        apply_update(registry, body, stream_is_empty=empty, end_offset=OFF9)
    return str(info.value)


# --------------------------------------------------------------------------- registry shape


def test_empty_registry_shape() -> None:
    assert empty_registry(STREAM) == {
        "apiVersion": REGISTRY_API_VERSION,
        "schema": STREAM,
        "currentVersion": 0,
        "boundaries": [],
        "schemas": {},
        "lenses": {},
    }


def test_first_schema_becomes_version_1_with_boundary_at_start() -> None:
    before = empty_registry(STREAM)
    snapshot = copy.deepcopy(before)
    reg = apply_update(before, {"schema": V1}, stream_is_empty=True, end_offset=START)
    assert before == snapshot  # pure
    assert reg == {
        "apiVersion": REGISTRY_API_VERSION,
        "schema": STREAM,
        "currentVersion": 1,
        "boundaries": [{"offset": START, "version": 1}],
        "schemas": {"1": V1},
        "lenses": {},
    }
    assert reg["schemas"]["1"] is not V1


def test_later_schema_needs_lens_and_records_boundary_at_end_offset() -> None:
    v1 = v1_registry()
    snapshot = copy.deepcopy(v1)
    reg = v2_registry()
    assert v1 == snapshot
    assert reg["currentVersion"] == 2
    assert reg["boundaries"] == [{"offset": START, "version": 1}, {"offset": OFF5, "version": 2}]
    assert reg["schemas"] == {"1": V1, "2": V2}
    assert reg["lenses"] == {"1": lens(RENAME)}


def test_later_schema_on_empty_stream_still_needs_lens() -> None:
    assert "needs a lens from version 1 to 2" in update_error(v1_registry(), {"schema": V2}, True)


def test_first_schema_requires_empty_stream() -> None:
    msg = update_error(empty_registry(STREAM), {"schema": V1}, empty=False)
    assert "empty stream" in msg


def test_api_version_accepted_when_equal() -> None:
    body = {"apiVersion": REGISTRY_API_VERSION, "schema": V1}
    reg = apply_update(empty_registry(STREAM), body, stream_is_empty=True, end_offset=START)
    assert reg["currentVersion"] == 1


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ([], "must be a JSON object"),
        ({"schema": V1, "schemas": {}}, "'schemas' is not supported"),
        ({"routing_key": {}}, "'routing_key' is not supported"),
        ({"apiVersion": "v2", "schema": V1}, "apiVersion must be"),
        ({}, "must include schema, routingKey or search"),
        ({"apiVersion": REGISTRY_API_VERSION}, "must include schema, routingKey or search"),
        ({"lens": lens(RENAME), "routingKey": None}, "lens is only accepted"),
        ({"schema": True}, "must be a JSON Schema object"),
        ({"schema": {"type": "nope"}}, "not a valid JSON Schema at /type"),
        ({"schema": {"$schema": "http://example.com/x"}}, "not a supported JSON Schema dialect"),
        ({"schema": {"properties": {"a": {"$ref": "https://x.test/s.json"}}}}, "does not resolve"),
        ({"schema": {"properties": {"a": {"$ref": "#/$defs/missing"}}}}, "does not resolve"),
        ({"schema": {"$dynamicRef": "#meta"}}, "$dynamicRef is not supported"),
    ],
)
def test_update_body_errors(body: Any, needle: str) -> None:
    assert needle in update_error(empty_registry(STREAM), body, empty=True)


def test_local_refs_anchors_and_other_dialects_are_accepted() -> None:
    schema = {
        "$defs": {"n": {"$anchor": "num", "type": "integer"}, "s": {"type": "string"}},
        "properties": {"a": {"$ref": "#/$defs/s"}, "b": {"$ref": "#num"}},
        "const_like": {"const": {"$ref": "https://not-a-ref.test"}},
    }
    reg = apply_update(
        empty_registry(STREAM), {"schema": schema}, stream_is_empty=True, end_offset=START
    )
    validate(reg, {"a": "x", "b": 1})
    with pytest.raises(SchemaError, match="/b"):
        validate(reg, {"a": "x", "b": "1"})
    draft7 = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}
    reg7 = apply_update(
        empty_registry(STREAM), {"schema": draft7}, stream_is_empty=True, end_offset=START
    )
    with pytest.raises(SchemaError):
        validate(reg7, [])


def test_end_offset_must_not_go_backwards_and_must_be_a_string() -> None:
    reg = v2_registry()
    body = {"schema": V2, "lens": lens([{"op": "remove", "path": "/ts", "schema": {}}], 2, 3)}
    with pytest.raises(ValueError, match="sorts before"):
        apply_update(reg, body, stream_is_empty=False, end_offset=START)
    with pytest.raises(ValueError, match="end_offset"):
        apply_update(reg, body, stream_is_empty=False, end_offset="")
    again = apply_update(reg, body, stream_is_empty=False, end_offset=OFF5)  # equal is fine
    assert again["boundaries"][-1] == {"offset": OFF5, "version": 3}


# --------------------------------------------------------------------------- lens validation


def test_lens_version_mismatch_is_a_conflict() -> None:
    with pytest.raises(SchemaVersionConflict, match="from version 1 to 2, got 2 -> 3"):
        apply_update(
            v1_registry(),
            {"schema": V2, "lens": lens(RENAME, 2, 3)},
            stream_is_empty=False,
            end_offset=OFF9,
        )
    with pytest.raises(SchemaVersionConflict):
        apply_update(
            v1_registry(),
            {"schema": V2, "lens": lens(RENAME, 1, 3)},
            stream_is_empty=False,
            end_offset=OFF9,
        )


def test_first_install_lens_must_be_0_to_1_and_is_not_stored() -> None:
    ok = {"schema": V1, "lens": lens(RENAME, 0, 1)}
    reg = apply_update(empty_registry(STREAM), ok, stream_is_empty=True, end_offset=START)
    assert reg["lenses"] == {}
    with pytest.raises(SchemaVersionConflict):
        apply_update(
            empty_registry(STREAM),
            {"schema": V1, "lens": lens(RENAME)},
            stream_is_empty=True,
            end_offset=START,
        )


def bad_lens(**changes: Any) -> dict[str, Any]:
    out = lens(RENAME)
    for key, value in changes.items():
        if value is None:
            out.pop(key)
        else:
            out[key] = value
    return out


@pytest.mark.parametrize(
    ("the_lens", "needle"),
    [
        ("rename", "lens must be an object"),
        (bad_lens(apiVersion=None), "lens.apiVersion is required"),
        (bad_lens(apiVersion="durable.lens/v2"), "lens.apiVersion must be"),
        (bad_lens(schema="other"), "lens.schema must be 'orders'"),
        (bad_lens(schema=""), "lens.schema must be a non-empty string"),
        (bad_lens(extra=1), "lens.extra is not supported"),
        (bad_lens(description=5), "lens.description must be a string"),
        (bad_lens(ops=[]), "lens.ops must be a non-empty array"),
        (bad_lens(**{"from": "1"}), "lens.from must be a non-negative integer"),
        (bad_lens(to=True), "lens.to must be a non-negative integer"),
    ],
)
def test_lens_envelope_errors(the_lens: Any, needle: str) -> None:
    assert needle in update_error(v1_registry(), {"schema": V2, "lens": the_lens})


@pytest.mark.parametrize(
    ("op", "needle"),
    [
        ("rename", "lens.ops[0] must be an object"),
        ({"op": "explode"}, "lens.ops[0].op must be one of"),
        ({"op": "rename", "from": "/a"}, "lens.ops[0].to is required"),
        ({"op": "rename", "from": "/a", "to": "/b", "x": 1}, "lens.ops[0].x is not supported"),
        ({"op": "rename", "from": "a", "to": "/b"}, "lens.ops[0].from: JSON pointer"),
        ({"op": "copy", "from": "/a", "to": "/~2"}, "'~' not followed by 0 or 1"),
        ({"op": "rename", "from": "", "to": "/b"}, "from must not be the document root"),
        ({"op": "copy", "from": "/a", "to": ""}, "to must not be the document root"),
        ({"op": "copy", "from": 5, "to": "/b"}, "must be a JSON pointer string"),
        ({"op": "remove", "path": "", "schema": {}}, "path must not be the document root"),
        ({"op": "remove", "path": "/a"}, "lens.ops[0].schema is required"),
        ({"op": "add", "path": "/a", "schema": {"type": 1}}, "schema is not a valid JSON Schema"),
        ({"op": "add", "path": "/a", "schema": 3}, "must be a JSON Schema object"),
        (
            {"op": "add", "path": "/a", "schema": {"type": "integer"}, "default": "x"},
            "default does not match",
        ),
        ({"op": "add", "path": "/zz", "schema": {"type": "string"}}, "needs a default"),
        ({"op": "hoist", "host": "/h", "name": "", "to": "/a"}, "name must be a non-empty"),
        (
            {"op": "hoist", "host": "/h", "name": "n", "to": "/a", "removeFromHost": "yes"},
            "removeFromHost must be a boolean",
        ),
        (
            {"op": "plunge", "from": "/a", "host": "/h", "name": "n", "createHost": 1},
            "createHost must be a boolean",
        ),
        ({"op": "wrap", "path": "/a", "mode": "pair"}, "mode must be singleton"),
        ({"op": "wrap", "path": "/a", "mode": "singleton", "reverseMode": "last"}, "first"),
        ({"op": "head", "path": "/a", "reverseMode": "first"}, "reverseMode must be singleton"),
        (
            {
                "op": "convert",
                "path": "/a",
                "fromType": "str",
                "toType": "string",
                "forward": {"builtin": "lowercase"},
                "backward": {"builtin": "lowercase"},
            },
            "fromType must be one of",
        ),
        (
            {
                "op": "convert",
                "path": "/a",
                "fromType": "string",
                "toType": "string",
                "forward": {"builtin": "rot13"},
                "backward": {"builtin": "lowercase"},
            },
            "forward.builtin must be one of",
        ),
        (
            {
                "op": "convert",
                "path": "/a",
                "fromType": "string",
                "toType": "string",
                "forward": {"map": {"a": "b"}},
                "backward": {"map": {"a": [1]}},
            },
            "backward.map.a must be a JSON scalar",
        ),
        (
            {
                "op": "convert",
                "path": "/a",
                "fromType": "string",
                "toType": "string",
                "forward": {"map": {}, "default": {}},
                "backward": {"map": {}},
            },
            "forward.default must be a JSON scalar",
        ),
        (
            {
                "op": "convert",
                "path": "/a",
                "fromType": "string",
                "toType": "string",
                "forward": {},
                "backward": {"map": {}},
            },
            "map object or a builtin",
        ),
        ({"op": "in", "path": "/a", "ops": []}, "lens.ops[0].ops must be a non-empty array"),
        (
            {"op": "map", "path": "/a", "ops": [{"op": "nope"}]},
            "lens.ops[0].ops[0].op must be one of",
        ),
    ],
)
def test_lens_op_errors(op: Any, needle: str) -> None:
    assert needle in update_error(v1_registry(), {"schema": V2, "lens": lens([op])})


def test_lens_nesting_is_capped() -> None:
    op: dict[str, Any] = {"op": "remove", "path": "/a", "schema": {}}
    for _ in range(20):
        op = {"op": "in", "path": "/a", "ops": [op]}
    assert "nested deeper" in update_error(v1_registry(), {"schema": V2, "lens": lens([op])})


def test_add_defaults_are_filled_from_op_schema_then_new_schema_then_type() -> None:
    new_schema = {
        "type": "object",
        "properties": {
            "level": {"type": "integer", "default": 3},
            "inner": {"type": "object", "properties": {"deep": {"type": "string", "default": "d"}}},
            "items": {"type": "array", "items": {"properties": {"k": {"default": 0}}}},
        },
    }
    ops: list[dict[str, Any]] = [
        {"op": "add", "path": "/priority", "schema": {"type": "string", "default": "low"}},
        {"op": "add", "path": "/level", "schema": {"type": "integer"}},
        {"op": "add", "path": "/bag", "schema": {"type": ["object", "null"]}},
        {"op": "add", "path": "/list", "schema": {"type": "array"}},
        {"op": "add", "path": "/given", "schema": {}, "default": None},
        {"op": "in", "path": "/inner", "ops": [{"op": "add", "path": "/deep", "schema": {}}]},
        {"op": "map", "path": "/items", "ops": [{"op": "add", "path": "/k", "schema": {}}]},
    ]
    reg = registry_with_ops(ops, new_schema)
    stored = reg["lenses"]["1"]["ops"]
    defaults = [o.get("default") for o in stored[:5]]
    assert defaults == ["low", 3, {}, [], None]
    assert stored[5]["ops"][0]["default"] == "d"
    assert stored[6]["ops"][0]["default"] == 0
    assert "default" not in ops[1]  # the request body is not modified


# --------------------------------------------------------------------------- routingKey


def test_routing_key_set_kept_and_cleared() -> None:
    rk = {"jsonPointer": "/name", "required": True}
    reg = v1_registry(routingKey=rk)
    assert reg["routingKey"] == rk
    reg2 = apply_update(
        reg, {"schema": V2, "lens": lens(RENAME)}, stream_is_empty=False, end_offset=OFF5
    )
    assert reg2["routingKey"] == rk  # kept when not mentioned
    cleared = apply_update(reg2, {"routingKey": None}, stream_is_empty=False, end_offset=OFF9)
    assert "routingKey" not in cleared
    assert cleared["currentVersion"] == 2  # routingKey-only update: no new version/boundary
    assert cleared["boundaries"] == reg2["boundaries"]


def test_routing_key_only_update_allowed_without_schema() -> None:
    rk = {"jsonPointer": "/subject/uri", "required": False}
    reg = apply_update(
        empty_registry(STREAM), {"routingKey": rk}, stream_is_empty=False, end_offset=OFF9
    )
    assert reg["currentVersion"] == 0
    assert reg["routingKey"] == rk
    assert routing_key(reg, {"subject": {"uri": "at://x"}}) == "at://x"


@pytest.mark.parametrize(
    ("rk", "needle"),
    [
        ("/id", "routingKey must be an object or null"),
        ({"jsonPointer": "/id"}, "routingKey.required is required"),
        ({"required": True}, "routingKey.jsonPointer is required"),
        ({"jsonPointer": "id", "required": True}, "routingKey.jsonPointer: JSON pointer"),
        ({"jsonPointer": "/id", "required": "yes"}, "routingKey.required must be a boolean"),
        ({"jsonPointer": "/id", "required": True, "x": 1}, "routingKey.x is not supported"),
    ],
)
def test_routing_key_errors(rk: Any, needle: str) -> None:
    assert needle in update_error(v1_registry(), {"routingKey": rk})


def test_routing_key_extraction() -> None:
    assert routing_key(v1_registry(), {"name": "a"}) is None  # not configured
    req = v1_registry(routingKey={"jsonPointer": "/a~1b/0", "required": True})
    assert routing_key(req, {"a/b": ["k1", "k2"]}) == "k1"
    with pytest.raises(SchemaError, match="required but /a~1b/0 is missing"):
        routing_key(req, {"a/b": []})
    for bad, kind in ((7, "integer"), (None, "null"), (True, "boolean"), ({"x": 1}, "object")):
        with pytest.raises(SchemaError, match=f"must be a string, got {kind}"):
            routing_key(req, {"a/b": [bad]})
    opt = v1_registry(routingKey={"jsonPointer": "/id", "required": False})
    assert routing_key(opt, {"name": "a"}) is None
    with pytest.raises(SchemaError, match="got array"):
        routing_key(opt, {"id": ["x"]})


# --------------------------------------------------------------------------- search


def test_search_with_first_schema_and_search_fields() -> None:
    reg = v1_registry(search=SEARCH)
    assert reg["search"] == SEARCH
    fields = search_fields(reg)
    assert set(fields) == {"ts", "name"}
    assert isinstance(fields["name"], FieldSpec)
    assert fields["name"].kind == "keyword"
    assert fields["name"].pointer == "/name"
    assert search_fields(v1_registry()) == {}


def test_search_only_update_requires_installed_schema() -> None:
    msg = update_error(empty_registry(STREAM), {"search": SEARCH}, empty=True)
    assert "requires an installed schema version" in msg
    reg = apply_update(v1_registry(), {"search": SEARCH}, stream_is_empty=False, end_offset=OFF9)
    assert reg["search"] == SEARCH
    assert reg["currentVersion"] == 1
    cleared = apply_update(reg, {"search": None}, stream_is_empty=False, end_offset=OFF9)
    assert "search" not in cleared


def test_search_bindings_follow_versions() -> None:
    search = copy.deepcopy(SEARCH)
    search["fields"]["name"]["bindings"].append({"version": 2, "jsonPointer": "/fullName"})
    assert "newer than the schema version 1" in update_error(v1_registry(), {"search": search})
    reg = apply_update(
        v1_registry(),
        {"schema": V2, "lens": lens(RENAME), "search": search},
        stream_is_empty=False,
        end_offset=OFF5,
    )
    spec = search_fields(reg)["name"]
    assert spec.pointer == "/fullName"
    assert spec.pointer_for(1) == "/name"


def with_search(**changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(SEARCH)
    out.update(changes)
    return out


ROLLUP = {"intervals": ["1m"], "measures": {"n": {"kind": "count"}}}


@pytest.mark.parametrize(
    ("search", "needle"),
    [
        ([], "search must be an object or null"),
        (with_search(extra=1), "search.extra is not supported"),
        (with_search(fields={}), "search.fields must be a non-empty object"),
        ({"fields": SEARCH["fields"]}, "primaryTimestampField is required"),
        (with_search(primaryTimestampField="name"), "must reference a date field"),
        (
            with_search(fields={"ts": {"kind": "time", "bindings": []}}),
            "search.fields.ts.kind must be one of",
        ),
        (with_search(profile=1), "search.profile must be a string"),
        (with_search(defaultFields={}), "search.defaultFields must be an array"),
        (with_search(defaultFields=[{"field": "nope"}]), "must reference a declared"),
        (with_search(defaultFields=[{"field": "name", "boost": 0}]), "boost must be a positive"),
        (with_search(defaultFields=[{"field": "name", "x": 1}]), "x is not supported"),
        (with_search(containsDefaultFields=["nope"]), "must reference a declared"),
        (with_search(aliases={"n": "nope"}), "must reference a declared field"),
        (with_search(rollups=[]), "search.rollups must be an object"),
        (with_search(rollups={"r": {**ROLLUP, "intervals": []}}), "intervals must be a non-empty"),
        (with_search(rollups={"r": {**ROLLUP, "intervals": ["1w"]}}), "positive duration"),
        (with_search(rollups={"r": {**ROLLUP, "intervals": ["1m", "1m"]}}), "duplicates 1m"),
        (with_search(rollups={"r": {**ROLLUP, "measures": {}}}), "measures must be a non-empty"),
        (with_search(rollups={"r": {**ROLLUP, "dimensions": ["ts"]}}), "exact-capable"),
        (with_search(rollups={"r": {**ROLLUP, "timestampField": "name"}}), "date field"),
        (with_search(rollups={"r": {**ROLLUP, "include": " "}}), "include must be a non-empty"),
        (
            with_search(rollups={"r": {**ROLLUP, "measures": {"m": {"kind": "avg"}}}}),
            "kind must be count, summary or summary_parts",
        ),
        (
            with_search(
                rollups={"r": {**ROLLUP, "measures": {"m": {"kind": "summary", "field": "ts"}}}}
            ),
            "aggregatable integer/float",
        ),
        (
            with_search(rollups={"r": {**ROLLUP, "measures": {"m": {"kind": "summary_parts"}}}}),
            "countJsonPointer is required",
        ),
    ],
)
def test_search_errors(search: Any, needle: str) -> None:
    assert needle in update_error(v1_registry(), {"search": search})


def test_search_full_config_accepted() -> None:
    search = copy.deepcopy(SEARCH)
    search["fields"]["dur"] = {
        "kind": "float",
        "bindings": [{"version": 1, "jsonPointer": "/dur"}],
        "aggregatable": True,
        "column": True,
    }
    search.update(
        profile="custom",
        aliases={"n": "name"},
        defaultFields=[{"field": "name", "boost": 2.5}],
        containsDefaultFields=["name"],
        rollups={
            "req": {
                "include": "name:x",
                "dimensions": ["name"],
                "intervals": ["1m", "1h"],
                "measures": {
                    "c": {"kind": "count", "include": "name:y"},
                    "lat": {"kind": "summary", "field": "dur", "histogram": "log2_v1"},
                    "parts": {
                        "kind": "summary_parts",
                        "countJsonPointer": "/c",
                        "sumJsonPointer": "/s",
                        "minJsonPointer": "/mn",
                        "maxJsonPointer": "/mx",
                    },
                },
            }
        },
    )
    reg = v1_registry(search=search)
    assert search_fields(reg)["n"].name == "name"


# --------------------------------------------------------------------------- validate


def test_validate_against_current_schema() -> None:
    validate(empty_registry(STREAM), {"anything": [1]})  # no schema: everything goes
    reg = v1_registry()
    validate(reg, {"name": "a", "ts": "2024-01-02T03:04:05.123+02:00"})
    with pytest.raises(SchemaError, match="schema version 1 at /: 'name' is a required"):
        validate(reg, {})
    with pytest.raises(SchemaError, match=r"at /ts: .* is not a 'date-time'"):
        validate(reg, {"name": "a", "ts": "2024-01-02 03:04:05"})
    with pytest.raises(SchemaError, match="is not a 'date-time'"):
        validate(reg, {"name": "a", "ts": "2024-02-30T00:00:00Z"})
    reg2 = v2_registry()
    validate(reg2, {"fullName": "a"})
    with pytest.raises(SchemaError, match="schema version 2"):
        validate(reg2, {"name": "a"})


def test_validate_messages_are_bounded() -> None:
    reg = apply_update(
        empty_registry(STREAM),
        {"schema": {"enum": ["x" * 1000]}},
        stream_is_empty=True,
        end_offset=START,
    )
    with pytest.raises(SchemaError) as info:
        validate(reg, "y")
    assert len(str(info.value)) <= 300


# --------------------------------------------------------------------------- promote


def test_promote_runs_the_chain_and_keeps_the_input() -> None:
    reg = v2_registry()
    body = {
        "schema": {"type": "object"},
        "lens": lens([{"op": "wrap", "path": "/fullName", "mode": "singleton"}], 2, 3),
    }
    reg3 = apply_update(reg, body, stream_is_empty=False, end_offset=OFF9)
    old = {"name": "ann", "ts": "t"}
    assert promote(reg3, old, 1) == {"fullName": ["ann"], "ts": "t"}
    assert promote(reg3, {"fullName": "b"}, 2) == {"fullName": ["b"]}
    assert old == {"name": "ann", "ts": "t"}
    current = {"fullName": ["c"]}
    assert promote(reg3, current, 3) is current
    for bad in (-1, 4, True):
        with pytest.raises(ValueError, match="from_version"):
            promote(reg3, old, bad)


def test_promote_missing_lens_is_a_lens_apply_error() -> None:
    reg = v2_registry()
    broken = {**reg, "lenses": {}}
    with pytest.raises(LensApplyError, match="no lens from version 1 to 2"):
        promote(broken, {"name": "a"}, 1)
    with pytest.raises(LensApplyError, match="no lens from version 0 to 1"):
        promote(reg, {}, 0)


def run(ops: list[dict[str, Any]], doc: Any) -> Any:
    return promote(registry_with_ops(ops), doc, 1)


@pytest.mark.parametrize(
    ("ops", "doc", "expected"),
    [
        (RENAME, {"name": "a", "x": 1}, {"fullName": "a", "x": 1}),
        (RENAME, {"x": 1}, {"x": 1}),  # missing source: no-op
        ([{"op": "rename", "from": "/a/0", "to": "/b"}], {"a": [1, 2]}, {"a": [2], "b": 1}),
        (
            [{"op": "copy", "from": "/a", "to": "/b"}],
            {"a": {"k": 1}},
            {"a": {"k": 1}, "b": {"k": 1}},
        ),
        ([{"op": "copy", "from": "", "to": "/self"}], {"a": 1}, {"a": 1, "self": {"a": 1}}),
        ([{"op": "add", "path": "/n", "schema": {}, "default": 0}], {}, {"n": 0}),
        ([{"op": "add", "path": "/n", "schema": {}, "default": 0}], {"n": 5}, {"n": 5}),
        ([{"op": "remove", "path": "/a", "schema": {}}], {"a": 1, "b": 2}, {"b": 2}),
        ([{"op": "remove", "path": "/a", "schema": {}}], {"b": 2}, {"b": 2}),
        ([{"op": "remove", "path": "/l/1", "schema": {}}], {"l": [1, 2, 3]}, {"l": [1, 3]}),
        (
            [{"op": "hoist", "host": "/h", "name": "n", "to": "/n"}],
            {"h": {"n": 1, "m": 2}},
            {"h": {"m": 2}, "n": 1},
        ),
        (
            [{"op": "hoist", "host": "/h", "name": "n", "to": "/n", "removeFromHost": False}],
            {"h": {"n": 1}},
            {"h": {"n": 1}, "n": 1},
        ),
        ([{"op": "hoist", "host": "/h", "name": "n", "to": "/n"}], {"h": {}}, {"h": {}}),
        (
            [{"op": "plunge", "from": "/a", "host": "/h/i", "name": "a"}],
            {"a": 1},
            {"h": {"i": {"a": 1}}},
        ),
        (
            [{"op": "plunge", "from": "/a", "host": "", "name": "b", "removeFromSource": False}],
            {"a": [1]},
            {"a": [1], "b": [1]},
        ),
        ([{"op": "wrap", "path": "/a", "mode": "singleton"}], {"a": 1}, {"a": [1]}),
        ([{"op": "wrap", "path": "", "mode": "singleton"}], {"a": 1}, [{"a": 1}]),
        ([{"op": "head", "path": "/a"}], {"a": [3, 4]}, {"a": 3}),
        ([{"op": "head", "path": "/a"}], {}, {}),
        (
            [
                {
                    "op": "in",
                    "path": "/user",
                    "ops": [{"op": "rename", "from": "/nm", "to": "/name"}],
                }
            ],
            {"user": {"nm": "x"}},
            {"user": {"name": "x"}},
        ),
        (
            [
                {
                    "op": "map",
                    "path": "/items",
                    "ops": [{"op": "wrap", "path": "", "mode": "singleton"}],
                }
            ],
            {"items": [1, {"a": 2}]},
            {"items": [[1], [{"a": 2}]]},
        ),
    ],
)
def test_lens_ops(ops: list[dict[str, Any]], doc: Any, expected: Any) -> None:
    assert run(ops, doc) == expected


def convert(frm: str, to: str, forward: dict[str, Any]) -> list[dict[str, Any]]:
    back: dict[str, Any] = {"map": {}, "default": None}
    op = {"op": "convert", "path": "/v", "fromType": frm, "toType": to}
    return [{**op, "forward": forward, "backward": back}]


@pytest.mark.parametrize(
    ("ops", "value", "expected"),
    [
        (convert("string", "integer", {"map": {"low": 1, "high": 3}}), "high", 3),
        (convert("string", "integer", {"map": {"low": 1}, "default": 0}), "mid", 0),
        (convert("boolean", "string", {"map": {"true": "y", "false": "n"}}), True, "y"),
        (convert("number", "string", {"map": {"2": "two"}}), 2.0, "two"),
        (convert("null", "string", {"map": {"null": "none"}}), None, "none"),
        (convert("string", "string", {"builtin": "lowercase"}), "AbC", "abc"),
        (convert("string", "string", {"builtin": "uppercase"}), "AbC", "ABC"),
        (convert("string", "integer", {"builtin": "string_to_int"}), "-42", -42),
        (convert("integer", "string", {"builtin": "int_to_string"}), 7, "7"),
        (
            convert("string", "integer", {"builtin": "rfc3339_to_unix_millis"}),
            "1970-01-01T00:00:01.5+00:00",
            1500,
        ),
        (
            convert("number", "string", {"builtin": "unix_millis_to_rfc3339"}),
            1500,
            "1970-01-01T00:00:01.500Z",
        ),
    ],
)
def test_convert(ops: list[dict[str, Any]], value: Any, expected: Any) -> None:
    assert run(ops, {"v": value}) == {"v": expected}
    assert run(ops, {}) == {}  # missing path: no-op


@pytest.mark.parametrize(
    ("ops", "doc", "needle"),
    [
        (convert("string", "integer", {"map": {"a": 1}}), {"v": "b"}, "no entry for 'b'"),
        (convert("string", "integer", {"map": {"a": "x"}}), {"v": "a"}, "produced string"),
        (
            convert("integer", "string", {"builtin": "int_to_string"}),
            {"v": "1"},
            "expected integer",
        ),
        (convert("string", "integer", {"builtin": "string_to_int"}), {"v": "1x"}, "cannot convert"),
        (
            convert("string", "integer", {"builtin": "rfc3339_to_unix_millis"}),
            {"v": "yesterday"},
            "cannot convert",
        ),
        (
            convert("number", "string", {"builtin": "unix_millis_to_rfc3339"}),
            {"v": 1e300},
            "cannot convert",
        ),
        ([{"op": "head", "path": "/a"}], {"a": []}, "non-empty array"),
        ([{"op": "head", "path": "/a"}], {"a": "x"}, "non-empty array"),
        ([{"op": "in", "path": "/a", "ops": RENAME}], {"a": [1]}, "in expects an object"),
        ([{"op": "map", "path": "/a", "ops": RENAME}], {"a": {}}, "map expects an array"),
        ([{"op": "hoist", "host": "/h", "name": "n", "to": "/n"}], {"h": 1}, "not an object"),
        (
            [{"op": "plunge", "from": "/a", "host": "/h", "name": "n", "createHost": False}],
            {"a": 1},
            "createHost is false",
        ),
        ([{"op": "plunge", "from": "/a", "host": "/h", "name": "n"}], {"a": 1, "h": 2}, "not an"),
        ([{"op": "copy", "from": "/a", "to": "/x/y"}], {"a": 1}, "parent of /x/y is missing"),
        ([{"op": "copy", "from": "/a", "to": "/l/5"}], {"a": 1, "l": []}, "cannot set /l/5"),
    ],
)
def test_lens_apply_errors(ops: list[dict[str, Any]], doc: Any, needle: str) -> None:
    with pytest.raises(LensApplyError, match=r"lens 1 -> 2: ") as info:
        run(ops, doc)
    assert needle in str(info.value)


# --------------------------------------------------------------------------- version_at


def test_version_at_uses_strict_after_boundaries() -> None:
    reg = v2_registry()  # v1 after START, v2 after OFF5
    assert version_at(empty_registry(STREAM), OFF9) == 0
    assert version_at(reg, START) == 0
    assert version_at(reg, encode_offset(0, 1)) == 1
    assert version_at(reg, OFF5) == 1
    assert version_at(reg, encode_offset(0, 6)) == 2
    assert version_at(reg, encode_offset(1, 0)) == 2


def test_version_at_equal_boundaries_later_wins_and_int_keys() -> None:
    reg = v2_registry()
    body = {"schema": V2, "lens": lens([{"op": "remove", "path": "/ts", "schema": {}}], 2, 3)}
    reg3 = apply_update(reg, body, stream_is_empty=False, end_offset=OFF5)
    assert version_at(reg3, OFF5) == 1
    assert version_at(reg3, encode_offset(0, 6)) == 3

    def seq(text: str) -> int:
        decoded = decode_offset(text)
        assert isinstance(decoded, Offset)
        return decoded.seq

    assert version_at(reg3, 3, key=seq) == 1
    assert version_at(reg3, 5, key=seq) == 1
    assert version_at(reg3, 6, key=seq) == 3
    assert version_at(reg3, 0, key=seq) == 0
