"""Notification schemas in aviso's YAML format (headwater.notify.schema): loading, refusal of
bad schemas with a message naming the event type, field and option, and the JSON of
GET /api/v1/schema and /api/v1/schema/{event_type}."""

# ruff: noqa: E501 -- tables of aviso's exact error messages read best one case per line

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from headwater.errors import ConfigurationError
from headwater.notify.errors import UnknownEventType
from headwater.notify.schema import (
    Handler,
    NotificationSchema,
    SchemaError,
    load_schema,
    load_schema_text,
    parse_schema_document,
)

pytestmark = pytest.mark.unit

# The schemas of aviso-server's API test harness (tests/api/helpers.rs) in its YAML format.
AVISO_TEST_SCHEMAS = """
application: {host: 127.0.0.1, port: 8000}   # other top-level keys of an aviso config
notification_schema:
  test_polygon:
    payload: {required: true}
    topic: {base: polygon, key_order: [date, time]}
    identifier:
      date: {type: DateHandler, canonical_format: "%Y%m%d", required: false}
      time: {type: TimeHandler, required: false}
      polygon: {type: PolygonHandler, required: true}
  test_polygon_optional:
    payload: {required: true}
    topic: {base: polygon_optional, key_order: [date, time]}
    identifier:
      date: {type: DateHandler, canonical_format: "%Y%m%d", required: false}
      time: {type: TimeHandler, required: false}
      polygon: {type: PolygonHandler, required: false}
  mars:
    payload: {required: false}
    topic: {base: mars, key_order: [class, expver, domain, date, time, stream, step]}
    identifier:
      class:
        description: MARS class, for example od for operational data.
        type: StringHandler
        max_length: 2
        required: true
      expver: {type: ExpverHandler, default: "0001", required: false}
      domain: {type: EnumHandler, values: [a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, q, r, s, t, u, v, w, x, y, z], required: false}
      date: {type: DateHandler, canonical_format: "%Y%m%d", required: false}
      time: {type: TimeHandler, required: false}
      stream: {type: StringHandler, required: false}
      step: {type: IntHandler, range: [0, 100000], required: false}
  dissemination:
    payload: {required: true}
    topic: {base: diss, key_order: [destination, target, class, expver, domain, date, time, stream, step]}
    auth: {required: true}
    identifier:
      destination: {type: StringHandler, required: true}
      target: {type: StringHandler, required: false}
      class: {type: StringHandler, max_length: 2, required: true}
      expver: {type: ExpverHandler, default: "0001", required: false}
      domain: {type: EnumHandler, values: [a, g, z], required: false}
      date: {type: DateHandler, canonical_format: "%Y%m%d", required: false}
      time: {type: TimeHandler, required: false}
      stream: {type: StringHandler, required: false}
      step: {type: IntHandler, range: [0, 100000], required: false}
  extreme:
    payload: {required: false}
    topic: {base: extreme, key_order: [region, run_time, severity, anomaly]}
    identifier:
      region: {type: EnumHandler, values: [north, south, east, west], required: false}
      run_time: {type: TimeHandler, required: false}
      severity: {type: IntHandler, range: [1, 7], required: false}
      anomaly: {type: FloatHandler, range: [0.0, 200], required: false}
"""


def aviso_registry() -> NotificationSchema:
    return load_schema_text(AVISO_TEST_SCHEMAS, source="aviso-test.yaml")


def test_loads_every_handler_with_its_options() -> None:
    registry = aviso_registry()
    assert registry.event_types == [
        "dissemination",
        "extreme",
        "mars",
        "test_polygon",
        "test_polygon_optional",
    ]
    mars = registry.require("mars")
    assert (mars.base, mars.key_order) == (
        "mars",
        ("class", "expver", "domain", "date", "time", "stream", "step"),
    )
    assert [r.name for r in mars.fields] == [
        "class",
        "expver",
        "domain",
        "date",
        "time",
        "stream",
        "step",
    ]
    cls, expver, domain, date = (mars.rule(n) for n in ("class", "expver", "domain", "date"))
    assert cls is not None and (cls.handler, cls.max_length, cls.required) == (
        Handler.STRING,
        2,
        True,
    )
    assert expver is not None and expver.default == "0001"
    assert domain is not None and len(domain.values) == 26
    assert date is not None and date.canonical_format == "%Y%m%d"
    anomaly = registry.require("extreme").rule("anomaly")
    assert anomaly is not None and anomaly.float_range == (0.0, 200.0)
    assert registry.require("test_polygon").polygon_field is not None
    assert registry.require("test_polygon").payload_required
    assert registry.require("dissemination").auth == {"required": True}


def test_unknown_event_type_lists_configured_types_sorted() -> None:
    # aviso: tests/api/strict_schema.rs post_notification_rejects_unknown_event_type_...
    with pytest.raises(UnknownEventType) as info:
        aviso_registry().require("asadasdasd-this-is-not-in-the-schema")
    body = info.value.body("req-1")
    assert body == {
        "code": "UNKNOWN_EVENT_TYPE",
        "configured_event_types": [
            "dissemination",
            "extreme",
            "mars",
            "test_polygon",
            "test_polygon_optional",
        ],
        "error": "unknown_event_type",
        "message": "unknown event type 'asadasdasd-this-is-not-in-the-schema'",
        "request_id": "req-1",
    }
    assert list(body) == sorted(body)
    assert info.value.status == 400


def test_date_format_defaults_to_compact() -> None:
    registry = load_schema_text(
        "notification_schema:\n  e:\n    identifier:\n      d: {type: DateHandler, required: true}\n"
    )
    rule = registry.require("e").rule("d")
    assert rule is not None and rule.canonical_format == "%Y%m%d"


def test_missing_topic_uses_event_type_and_sorted_fields() -> None:
    registry = load_schema_text(
        "notification_schema:\n  ev:\n    identifier:\n"
        "      b: {type: StringHandler, required: true}\n"
        "      a: {type: StringHandler, required: true}\n"
    )
    ev = registry.require("ev")
    assert (ev.base, ev.key_order) == ("ev", ("a", "b"))


def test_load_from_file_and_from_s3(tmp_path: Path) -> None:
    path = tmp_path / "schema.yaml"
    path.write_text(AVISO_TEST_SCHEMAS)
    assert load_schema(str(path)).event_types == aviso_registry().event_types

    calls: list[tuple[str, str]] = []

    def fetch(bucket: str, key: str) -> bytes:
        calls.append((bucket, key))
        return AVISO_TEST_SCHEMAS.encode()

    registry = load_schema("s3://config-bucket/aviso/schema.yaml", fetch_s3=fetch)
    assert calls == [("config-bucket", "aviso/schema.yaml")]
    assert registry.event_types == aviso_registry().event_types


@pytest.mark.parametrize(
    ("location", "fetch", "needle"),
    [
        ("s3://bucket-only", None, "not an s3://bucket/key URI"),
        ("s3://b/k.yaml", None, "needs an S3 reader"),
        ("/nonexistent/schema.yaml", None, "cannot read the file"),
    ],
)
def test_load_failures(location: str, fetch: Any, needle: str) -> None:
    with pytest.raises(SchemaError, match=needle):
        load_schema(location, fetch_s3=fetch)


def test_s3_reader_error_is_a_schema_error() -> None:
    def fetch(bucket: str, key: str) -> bytes:
        raise RuntimeError("NoSuchKey")

    with pytest.raises(SchemaError, match="NoSuchKey") as info:
        load_schema("s3://b/missing.yaml", fetch_s3=fetch)
    assert isinstance(info.value, ConfigurationError)


def schema_with(field_spec: str, *, extra: str = "", topic: str = "") -> str:
    return (
        f"notification_schema:\n  weather:\n{extra}{topic}    identifier:\n      f: {field_spec}\n"
    )


@pytest.mark.parametrize(
    ("text", "event_type", "field", "option", "needle"),
    [
        ("not: a schema", None, None, None, "top-level 'notification_schema'"),
        ("notification_schema: [1, 2]", None, None, None, "must map event types"),
        ("notification_schema: {e: 3}", "e", None, None, "must be a mapping"),
        ("notification_schema: {e: {topic: {base: x, key_order: []}}}", "e", None, None, "missing 'identifier'"),
        ("notification_schema: {e: {identifier: {}, paylod: {required: true}}}", "e", None, None, "unknown key(s): paylod"),
        (schema_with("{type: FancyHandler, required: true}"), "weather", "f", "type", "unknown handler 'FancyHandler'"),
        (schema_with("{type: StringHandler}"), "weather", "f", "required", "missing"),
        (schema_with("{type: StringHandler, required: 'yes'}"), "weather", "f", "required", "true or false"),
        (schema_with("{type: StringHandler, required: true, range: [1, 2]}"), "weather", "f", None, "unknown option(s) for StringHandler: range"),
        (schema_with("{type: StringHandler, required: true, max_length: -1}"), "weather", "f", "max_length", "non-negative integer"),
        (schema_with("{type: DateHandler, required: true, canonical_format: '%d/%m/%Y'}"), "weather", "f", "canonical_format", "must be one of %Y%m%d, %Y-%m-%d"),
        (schema_with("{type: EnumHandler, required: true}"), "weather", "f", "values", "missing"),
        (schema_with("{type: EnumHandler, required: true, values: []}"), "weather", "f", "values", "non-empty list"),
        (schema_with("{type: EnumHandler, required: true, values: [yes, no]}"), "weather", "f", "values", "list of strings"),
        (schema_with("{type: IntHandler, required: true, range: [1]}"), "weather", "f", "range", "[min, max] integers"),
        (schema_with("{type: IntHandler, required: true, range: [1.5, 2]}"), "weather", "f", "range", "[min, max] integers"),
        (schema_with("{type: IntHandler, required: true, range: [true, 2]}"), "weather", "f", "range", "[min, max] integers"),
        (schema_with("{type: IntHandler, required: true, range: [5, 1]}"), "weather", "f", "range", "min <= max"),
        (schema_with("{type: FloatHandler, required: true, range: [0, .inf]}"), "weather", "f", "range", "finite"),
        (schema_with("{type: FloatHandler, required: true, range: [2.0, 1.0]}"), "weather", "f", "range", "min <= max"),
        (schema_with("{type: ExpverHandler, required: true, default: 1}"), "weather", "f", "default", "must be a string"),
        (schema_with("{type: TimeHandler, required: true, description: 5}"), "weather", "f", "description", "must be a string"),
        (schema_with("{type: StringHandler, required: true}", topic="    topic: {base: w, key_order: [f, g]}\n"), "weather", None, "topic.key_order", "'g' is not an identifier field"),
        (schema_with("{type: StringHandler, required: true}", topic="    topic: {base: w, key_order: [f, f]}\n"), "weather", None, "topic.key_order", "listed twice"),
        (schema_with("{type: StringHandler, required: true}", topic="    topic: {key_order: [f]}\n"), "weather", None, "topic.base", "non-empty string"),
        (schema_with("{type: StringHandler, required: true}", extra="    payload: {required: maybe}\n"), "weather", None, "payload.required", "true or false"),
        (schema_with("{type: StringHandler, required: true}", extra="    payload: {type: [String]}\n"), "weather", None, "payload", "unknown key(s): type"),
        (schema_with("{type: StringHandler, required: true}", extra="    auth: {read_roles: {r: [a]}}\n"), "weather", None, "auth.required", "true or false"),
        ("notification_schema:\n  e:\n    identifier:\n      point: {type: StringHandler, required: true}\n", "e", "point", None, "reserved"),
        ("notification_schema:\n  e:\n    identifier:\n      a: {type: PolygonHandler, required: true}\n      b: {type: PolygonHandler, required: true}\n", "e", None, None, "at most one PolygonHandler"),
    ],
)  # fmt: skip
def test_bad_schema_names_where(
    text: str, event_type: str | None, field: str | None, option: str | None, needle: str
) -> None:
    with pytest.raises(SchemaError) as info:
        load_schema_text(text, source="bad.yaml")
    err = info.value
    assert needle in str(err)
    assert str(err).startswith("bad.yaml")
    assert (err.event_type, err.field, err.option) == (event_type, field, option)
    if event_type is not None:
        assert f"event type {event_type!r}" in str(err)
    if option is not None:
        assert f"option {option!r}" in str(err)


def test_duplicate_topic_base_is_refused_case_insensitively() -> None:
    # aviso: configuration/validation.rs rejects_duplicate_topic_base_across_schemas(_case_...)
    text = (
        "notification_schema:\n"
        "  dissemination: {topic: {base: diss, key_order: []}, identifier: {}}\n"
        "  diss_alias: {topic: {base: DISS, key_order: []}, identifier: {}}\n"
    )
    with pytest.raises(SchemaError) as info:
        load_schema_text(text)
    assert "Schemas 'dissemination' and 'diss_alias' both define topic base 'DISS'" in str(
        info.value
    )


def test_invalid_yaml_is_a_schema_error() -> None:
    with pytest.raises(SchemaError, match="not valid YAML"):
        load_schema_text("notification_schema: {a: [")


def test_empty_schema_is_configured_but_has_no_event_types() -> None:
    registry = parse_schema_document({"notification_schema": None})
    assert registry.configured and registry.event_types == []
    assert registry.list_body() == {
        "event_types": [],
        "schema": {},
        "status": "success",
        "total_schemas": 0,
    }


# --- GET /api/v1/schema ----------------------------------------------------------------------


def test_event_schema_body_matches_aviso_shape() -> None:
    status, body = aviso_registry().event_body("mars", "req-9")
    assert status == 200
    assert body["status"] == "success" and body["event_type"] == "mars"
    identifier = body["schema"]["identifier"]
    # aviso: tests/api/schema.rs event_schema_exposes_identifier_description_when_configured
    assert identifier["class"] == {
        "description": "MARS class, for example od for operational data.",
        "type": "StringHandler",
        "max_length": 2,
        "required": True,
    }
    # aviso: event_schema_omits_identifier_description_when_not_configured
    assert identifier["time"] == {"type": "TimeHandler", "required": False}
    assert identifier["stream"] == {"type": "StringHandler", "max_length": None, "required": False}
    assert identifier["step"] == {"type": "IntHandler", "range": [0, 100000], "required": False}
    assert identifier["expver"] == {"type": "ExpverHandler", "default": "0001", "required": False}
    assert identifier["date"] == {
        "type": "DateHandler",
        "canonical_format": "%Y%m%d",
        "required": False,
    }
    assert body["schema"]["payload"] == {"required": False}
    # aviso: schema_list_does_not_expose_storage_policy (nor topic, nor auth)
    assert set(body["schema"]) == {"identifier", "payload"}


def test_float_range_is_shown_as_floats() -> None:
    _, body = aviso_registry().event_body("extreme", "r")
    anomaly = body["schema"]["identifier"]["anomaly"]
    assert json.dumps(anomaly["range"]) == "[0.0, 200.0]"


def test_payload_block_absent_shows_null() -> None:
    registry = load_schema_text(
        "notification_schema:\n  e:\n    identifier:\n      a: {type: TimeHandler, required: true}\n"
    )
    assert registry.event_body("e", "r")[1]["schema"]["payload"] is None
    assert not registry.require("e").payload_required


def test_schema_list_body() -> None:
    registry = aviso_registry()
    body = registry.list_body()
    assert body["status"] == "success"
    assert body["total_schemas"] == 5
    assert body["event_types"] == registry.event_types
    assert body["schema"]["extreme"] == registry.event_body("extreme", "r")[1]["schema"]
    text = json.dumps(body)
    assert "storage_policy" not in text and "key_order" not in text and "auth" not in text


def test_unknown_event_schema_is_404() -> None:
    status, body = aviso_registry().event_body("nope", "req-2")
    assert status == 404
    assert body == {
        "available_types": aviso_registry().event_types,
        "message": "Event type 'nope' not found",
        "request_id": "req-2",
        "status": "error",
    }


def test_unconfigured_schema_bodies() -> None:
    registry = NotificationSchema.unconfigured()
    assert registry.list_body()["message"] == "No notification schema configured"
    assert registry.event_body("x", "r") == (
        404,
        {"message": "No notification schema configured", "request_id": "r", "status": "error"},
    )
    with pytest.raises(UnknownEventType):
        registry.require("x")


def test_yaml_round_trip_of_the_public_view_is_stable() -> None:
    registry = aviso_registry()
    again = parse_schema_document(yaml.safe_load(AVISO_TEST_SCHEMAS))
    assert again.list_body() == registry.list_body()
