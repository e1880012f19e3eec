"""Request bodies of /api/v1 notification, watch and replay (headwater.notify.requests), with
aviso's error codes and body shape. Cases marked `aviso:` are ported from ecmwf/aviso-server
(src/types/request.rs, src/notification/processor.rs, tests/api/*.rs)."""

# ruff: noqa: E501 -- tables of aviso's exact error messages read best one case per line

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headwater.notify.constraints import EnumConstraint, NumericConstraint
from headwater.notify.errors import (
    AvisoError,
    RequestKind,
    RequestParseError,
    RequestValidationError,
    UnknownEventType,
)
from headwater.notify.fromdate import FromDateError, parse_from_date
from headwater.notify.requests import (
    PointFilter,
    PolygonFilter,
    parse_notification,
    parse_replay,
    parse_request_body,
    parse_watch,
)
from tests.unit.test_notify_schema import aviso_registry

pytestmark = pytest.mark.unit

REGISTRY = aviso_registry()
POLYGON = "(52.5,13.4,52.6,13.5,52.5,13.6,52.4,13.5,52.5,13.4)"
MARS_ID = {
    "class": "od",
    "expver": "0001",
    "domain": "g",
    "date": "20250706",
    "time": "1200",
    "stream": "enfo",
    "step": "1",
}


def body(**fields: Any) -> str:
    return json.dumps(fields)


def error_of(fn: Any, text: str) -> AvisoError:
    with pytest.raises(AvisoError) as info:
        fn(REGISTRY, text)
    return info.value


# --- parsing the body ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["{", "", "not json", '{"a": NaN}', '{"a": Infinity}', '{"a": 1e400}', '"\\ud800"'],
)
def test_invalid_json(text: str) -> None:
    err = error_of(parse_watch, text)
    assert isinstance(err, RequestParseError)
    assert err.code == "INVALID_JSON" and err.status == 400
    assert err.message.startswith("JSON parsing failed: ")


def test_invalid_utf8_is_invalid_json() -> None:
    err = error_of(parse_watch, b"\xff\xfe{}")  # type: ignore[arg-type]
    assert err.code == "INVALID_JSON"


def test_unknown_top_level_field() -> None:
    err = error_of(parse_replay, body(event_type="mars", identifier={}, foo=1, bar=2))
    assert err.code == "UNKNOWN_FIELD"
    assert err.body("r") == {
        "code": "UNKNOWN_FIELD",
        "details": err.message,
        "error": "Invalid Replay Request",
        "message": "Request contains unknown fields: Unknown field 'bar' in request. "
        'Allowed fields: ["event_type", "identifier", "from_id", "from_date", "payload"]',
        "request_id": "r",
    }


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"identifier": {}}, "missing field `event_type`"),
        ({"event_type": "mars"}, "missing field `identifier`"),
        ({"event_type": 5, "identifier": {}}, "invalid type: integer `5`, expected a string"),
        ({"event_type": "mars", "identifier": None}, "invalid type: null, expected a map"),
        ({"event_type": "mars", "identifier": [1]}, "invalid type: sequence, expected a map"),
        (
            {"event_type": "mars", "identifier": {}, "from_id": 1},
            "invalid type: integer `1`, expected a string",
        ),
        (
            {"event_type": "mars", "identifier": {}, "from_date": 1.5},
            "invalid type: floating point `1.5`, expected a string",
        ),
    ],
)
def test_invalid_request_shape(fields: dict[str, Any], problem: str) -> None:
    err = error_of(parse_watch, json.dumps(fields))
    assert err.code == "INVALID_REQUEST_SHAPE"
    assert err.message == f"Request deserialization failed: {problem}"


def test_non_object_body_is_a_shape_error() -> None:
    err = error_of(parse_notification, "[1, 2]")
    assert err.code == "INVALID_REQUEST_SHAPE"
    assert err.body("r")["error"] == "Invalid Notification Request"


def test_null_from_fields_and_payload_count_as_absent() -> None:
    raw = parse_request_body(
        body(event_type="mars", identifier={}, from_id=None, from_date=None, payload=None),
        RequestKind.WATCH,
    )
    assert (raw.from_id, raw.from_date, raw.payload) == (None, None, None)


@pytest.mark.parametrize("fn", [parse_notification, parse_watch, parse_replay])
def test_unknown_event_type_on_every_endpoint(fn: Any) -> None:
    # aviso: tests/api/strict_schema.rs post_{notification,watch,replay}_rejects_unknown_...
    err = error_of(fn, body(event_type="nope", identifier={}, from_date="2025-01-01T00:00:00Z"))
    assert isinstance(err, UnknownEventType)
    assert err.body("r")["configured_event_types"] == REGISTRY.event_types


# --- notification ----------------------------------------------------------------------------


def test_notification_canonicalizes_every_field() -> None:
    n = parse_notification(
        REGISTRY,
        body(
            event_type="mars",
            identifier={
                "class": "od",
                "expver": "1",
                "domain": "G",
                "date": "2025-07-06",
                "time": "12:00",
                "stream": "ens.member",
                "step": 7,
            },
            payload={"b": 1, "a": [1, 2]},
        ),
    )
    assert dict(n.identifier) == {
        "class": "od",
        "expver": "0001",
        "domain": "g",
        "date": "20250706",
        "time": "1200",
        "stream": "ens.member",
        "step": "7",
    }
    assert n.payload == {"b": 1, "a": [1, 2]}
    # aviso's topic: base then key_order values, `.` inside a value percent-encoded
    assert n.topic == "mars.od.0001.g.20250706.1200.ens%2Emember.7"
    assert n.polygon is None


def test_notification_payload_kept_verbatim_of_any_json_type() -> None:
    # aviso docs: payload-contract.md
    for payload in ["forecast complete", 42, True, ["a", "b"], {"note": "ok"}, 1.5]:
        n = parse_notification(
            REGISTRY, body(event_type="mars", identifier=MARS_ID, payload=payload)
        )
        assert n.payload == payload and type(n.payload) is type(payload)


def test_notification_optional_payload_omitted_is_null() -> None:
    # aviso: processor.rs test_payload_extraction_optional_missing
    assert parse_notification(REGISTRY, body(event_type="mars", identifier=MARS_ID)).payload is None


def test_notification_required_payload_missing() -> None:
    # aviso: processor.rs test_polygon_notification_with_missing_payload
    for payload_part in ({}, {"payload": None}):
        text = json.dumps(
            {
                "event_type": "test_polygon",
                "identifier": {"date": "20250706", "time": "1200", "polygon": POLYGON},
                **payload_part,
            }
        )
        err = error_of(parse_notification, text)
        assert err.code == "INVALID_NOTIFICATION_REQUEST"
        assert err.message == (
            "Payload is required for notify operation based on schema configuration"
        )


def test_notification_polygon_is_stored_as_sent_with_coordinates() -> None:
    # aviso: processor.rs test_polygon_notification_with_valid_payload
    spaced = "( 52.5 , 13.4 , 52.6 , 13.5 , 52.5 , 13.6 , 52.4 , 13.5 , 52.5 , 13.4 )"
    n = parse_notification(
        REGISTRY,
        body(
            event_type="test_polygon",
            identifier={"date": "20250706", "time": "1200", "polygon": spaced},
            payload="scalar payload",  # aviso: test_polygon_notification_accepts_scalar_payload
        ),
    )
    assert n.identifier["polygon"] == spaced
    assert n.polygon is not None and n.polygon[0] == (52.5, 13.4) and len(n.polygon) == 5
    assert n.topic == "polygon.20250706.1200"


@pytest.mark.parametrize(
    ("identifier", "message"),
    [
        # aviso: processor.rs test_notify_request_missing_required_field (every key required,
        # whatever its `required` flag says)
        ({k: v for k, v in MARS_ID.items() if k != "step"}, "Required field 'step' missing for notify operation"),
        # aviso: test_notify_request_rejects_unknown_identifier_field
        ({**MARS_ID, "unexpected": "value"}, "Unknown field 'unexpected' provided for notify operation"),
        # aviso: tests/api/streaming.rs notification_rejects_constraint_identifier_values
        ({**MARS_ID, "step": {"gte": 4}}, "Field 'step' constraint object is not supported for notify operation"),
        ({**MARS_ID, "point": "52.55,13.5"}, "identifier.point is only supported for watch/replay endpoints, not /notification"),
        ({**MARS_ID, "class": "odd"}, "Field 'class' exceeds maximum length of 2 characters, got: 3"),
        ({**MARS_ID, "class": None}, "Field 'class' cannot be null"),
        ({**MARS_ID, "step": [1]}, "Field 'step' must be a scalar value or constraint object, got array"),
        ({**MARS_ID, "domain": "zz"}, "Field 'domain' has invalid value 'zz'. Allowed: [a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, q, r, s, t, u, v, w, x, y, z]"),
        ({**MARS_ID, "step": 100001}, "Field 'step' value 100001 is outside allowed range [0, 100000]"),
        ({**MARS_ID, "step": 1.0}, "Field 'step' must be a valid integer, got: '1.0'"),
    ],
)  # fmt: skip
def test_notification_rejections(identifier: dict[str, Any], message: str) -> None:
    err = error_of(parse_notification, body(event_type="mars", identifier=identifier))
    assert isinstance(err, RequestValidationError)
    assert err.code == "INVALID_NOTIFICATION_REQUEST" and err.status == 400
    assert err.message == message
    assert err.body("rid")["error"] == "Invalid Notification Request"


def test_notification_error_keeps_message_and_root_detail() -> None:
    err = error_of(
        parse_notification, body(event_type="mars", identifier={**MARS_ID, "date": "2025-02-30"})
    )
    assert err.body("rid") == {
        "code": "INVALID_NOTIFICATION_REQUEST",
        "details": "Field 'date' contains invalid date '2025-02-30'. "
        "Expected: YYYY-MM-DD, YYYYMMDD, or YYYY-DDD",
        "error": "Invalid Notification Request",
        "message": "Failed to parse date value for field 'date'",
        "request_id": "rid",
    }


def test_unclosed_polygon_is_a_clear_400() -> None:
    # aviso: tests/api/polygon_roundtrip.rs unclosed_polygon_returns_400_with_clear_validation_...
    err = error_of(
        parse_notification,
        body(
            event_type="test_polygon",
            identifier={
                "date": "20260522",
                "time": "1200",
                "polygon": "(50.0,10.0,52.0,10.0,52.0,12.0,50.0,12.0,50.0,10.0",
            },
            payload={"sender": "you"},
        ),
    )
    assert err.status == 400
    assert "field 'polygon'" in err.message and "must be a valid polygon" in err.message
    assert "missing the closing" in err.message


def test_notification_ignores_from_fields() -> None:
    n = parse_notification(
        REGISTRY, body(event_type="mars", identifier=MARS_ID, from_id="x", from_date="y")
    )
    assert n.identifier["step"] == "1"


# --- watch and replay: start point ----------------------------------------------------------


def test_watch_without_start_is_live_only() -> None:
    # aviso: tests/api/streaming.rs watch_without_replay_params_is_live_only
    w = parse_watch(REGISTRY, body(event_type="mars", identifier={"class": "od"}))
    assert w.live_only and w.kind is RequestKind.WATCH


def test_from_id_is_kept_as_the_inclusive_start() -> None:
    w = parse_watch(REGISTRY, body(event_type="mars", identifier={"class": "od"}, from_id="0"))
    assert (w.from_id, w.from_date, w.live_only) == (0, None, False)
    r = parse_replay(REGISTRY, body(event_type="mars", identifier={"class": "od"}, from_id="+12"))
    assert r.from_id == 12


@pytest.mark.parametrize(
    ("from_id", "message"),
    [
        ("", "from_id cannot be empty. Provide a valid sequence number or omit the field"),
        ("  ", "from_id cannot be empty. Provide a valid sequence number or omit the field"),
        ("-1", "from_id must be a valid positive integer. Got: '-1'. Valid examples: '1', '123', '9999'"),
        ("abc", "from_id must be a valid positive integer. Got: 'abc'. Valid examples: '1', '123', '9999'"),
        (" 5", "from_id must be a valid positive integer. Got: ' 5'. Valid examples: '1', '123', '9999'"),
        ("18446744073709551616", "from_id must be a valid positive integer. Got: '18446744073709551616'. Valid examples: '1', '123', '9999'"),
    ],
)  # fmt: skip
def test_bad_from_id(from_id: str, message: str) -> None:
    err = error_of(
        parse_replay, body(event_type="mars", identifier={"class": "od"}, from_id=from_id)
    )
    assert (err.code, err.message) == ("INVALID_REPLAY_REQUEST", message)


def test_both_start_points_rejected_on_watch_and_replay() -> None:
    text = body(event_type="mars", identifier={"class": "od"}, from_id="1", from_date="1740509903")
    for fn, code in (
        (parse_watch, "INVALID_WATCH_REQUEST"),
        (parse_replay, "INVALID_REPLAY_REQUEST"),
    ):
        err = error_of(fn, text)
        assert err.code == code
        assert err.message.startswith("Cannot specify both from_id and from_date.")


def test_replay_needs_a_start_point() -> None:
    # aviso: tests/api/streaming.rs replay_without_from_id_or_from_date_returns_bad_request
    err = error_of(
        parse_replay,
        body(event_type="test_polygon", identifier={"time": "1200", "polygon": POLYGON}),
    )
    assert err.code == "INVALID_REPLAY_REQUEST"
    assert err.message == (
        "Replay endpoint requires either from_id or from_date parameter. Use from_id for "
        "sequence-based replay or from_date for time-based replay."
    )


# --- from_date: the six formats (aviso: src/types/request.rs tests) --------------------------


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2025-01-15T10:00:00Z", utc(2025, 1, 15, 10)),  # RFC 3339 with timezone
        ("2025-01-15T10:00:00+02:00", utc(2025, 1, 15, 8)),  # RFC 3339 with offset
        ("2025-06-09T13:15:00+02:00", utc(2025, 6, 9, 11, 15)),  # aviso: ..._rfc3339_and_space_...
        ("2025-01-15 10:00:00+00:00", utc(2025, 1, 15, 10)),  # space-separated with timezone
        ("2025-06-09 13:15:00-05:30", utc(2025, 6, 9, 18, 45)),
        ("2025-01-15T10:00:00", utc(2025, 1, 15, 10)),  # naive, taken as UTC
        ("2025-06-09 13:15:00", utc(2025, 6, 9, 13, 15)),  # aviso: ..._naive_datetime_as_utc
        ("1740509903", utc(2025, 2, 25, 18, 58, 23)),  # unix seconds
        ("1740509903710", utc(2025, 2, 25, 18, 58, 23, 710000)),  # unix milliseconds
        ("+1740509903", utc(2025, 2, 25, 18, 58, 23)),  # aviso: ..._plus_prefix
        ("10000000000", utc(2286, 11, 20, 17, 46, 40)),  # aviso: ..._far_future_unix_seconds
        ("1000000000000", utc(2001, 9, 9, 1, 46, 40)),  # aviso: ..._millis_at_threshold_boundary
        ("946684800000", utc(2000, 1, 1)),  # aviso: ..._accepts_pre_2001_unix_millis
        ("00000000001740509903", utc(2025, 2, 25, 18, 58, 23)),  # aviso: ..._leading_zero_...
        ("2025-06-09 13:15:00.123", utc(2025, 6, 9, 13, 15, 0, 123000)),  # aviso: ..._fractional
        ("2025-06-09T13:15:00.456", utc(2025, 6, 9, 13, 15, 0, 456000)),
        ("2025-06-09T13:15:00.456789123Z", utc(2025, 6, 9, 13, 15, 0, 456789)),
        ("  2025-01-15T10:00:00Z  ", utc(2025, 1, 15, 10)),
    ],
)
def test_from_date_formats_normalized_to_utc(text: str, expected: datetime) -> None:
    assert parse_from_date(text) == expected
    w = parse_watch(REGISTRY, body(event_type="mars", identifier={"class": "od"}, from_date=text))
    assert w.from_date == expected and w.from_date.tzinfo is UTC


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("-1", "negative unix timestamps are not supported: '-1'"),  # aviso: ..._rejects_negative
        ("2025-06-09", "expected ISO-8601 datetime"),  # aviso: ..._rejects_invalid_formats
        ("not-a-date", "expected ISO-8601 datetime"),
        ("2025-13-01T00:00:00Z", "expected ISO-8601 datetime"),
        ("2025-01-15T10:00:00+24:00", "expected ISO-8601 datetime"),
        ("99999999999999999999", "failed to parse unix timestamp '99999999999999999999': number too large"),
    ],
)  # fmt: skip
def test_from_date_rejections(text: str, reason: str) -> None:
    with pytest.raises(FromDateError, match=reason):
        parse_from_date(text)
    err = error_of(
        parse_replay, body(event_type="mars", identifier={"class": "od"}, from_date=text)
    )
    assert err.code == "INVALID_REPLAY_REQUEST"
    assert err.message.startswith(f"from_date must be a valid datetime/timestamp. Got: '{text}'.")
    assert "Valid examples: '2025-06-09T13:15:00Z'" in err.message


def test_empty_from_date() -> None:
    err = error_of(parse_watch, body(event_type="mars", identifier={"class": "od"}, from_date=" "))
    assert err.message == (
        "from_date cannot be empty. Provide a valid datetime/timestamp or omit the field"
    )


@given(st.integers(min_value=0, max_value=99_999_999_999))
def test_unix_seconds_up_to_eleven_digits(seconds: int) -> None:
    assert parse_from_date(str(seconds)).timestamp() == seconds


@given(st.integers(min_value=100_000_000_000, max_value=253_402_300_799_999))
def test_unix_millis_from_twelve_digits(millis: int) -> None:
    moment = parse_from_date(str(millis))
    assert round(moment.timestamp() * 1000) == millis


@given(
    st.datetimes(
        min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
    )
)
def test_rfc3339_round_trip(moment: datetime) -> None:
    assert parse_from_date(moment.isoformat()) == moment
    assert parse_from_date(moment.isoformat().replace("+00:00", "Z")) == moment


# --- watch and replay: identifiers -----------------------------------------------------------


def test_optional_fields_become_wildcards() -> None:
    # aviso: processor.rs test_watch_request_with_wildcards / test_replay_request_with_wildcards
    w = parse_watch(REGISTRY, body(event_type="mars", identifier={"class": "od"}))
    assert dict(w.filter.values) == {
        "class": "od",
        "expver": "*",
        "domain": "*",
        "date": "*",
        "time": "*",
        "stream": "*",
        "step": "*",
    }
    assert w.filter.topic == "mars.od.%2A.%2A.%2A.%2A.%2A.%2A"
    assert w.filter.constraints == {} and w.filter.spatial is None


def test_required_field_missing_on_watch_and_replay() -> None:
    # aviso: processor.rs test_watch_request_missing_required_field
    err = error_of(parse_watch, body(event_type="mars", identifier={"stream": "enfo"}))
    assert err.message == "Required field 'class' missing for watch operation"
    err = error_of(parse_replay, body(event_type="mars", identifier={}, from_id="1"))
    assert err.message == "Required field 'class' missing for replay operation"


def test_watch_values_are_canonicalized_like_notify() -> None:
    w = parse_replay(
        REGISTRY,
        body(
            event_type="mars",
            identifier={"class": "od", "date": "2025-07-06", "time": "9", "step": "007"},
            from_id="1",
        ),
    )
    assert (w.filter.values["date"], w.filter.values["time"], w.filter.values["step"]) == (
        "20250706",
        "0900",
        "7",
    )


def test_unknown_identifier_keys_are_ignored_on_watch() -> None:
    w = parse_watch(REGISTRY, body(event_type="mars", identifier={"class": "od", "foo": "x"}))
    assert "foo" not in w.filter.values


def test_constraint_objects_become_filters() -> None:
    # aviso: processor.rs test_replay_request_with_float_constraint; tests/api/streaming.rs
    r = parse_replay(
        REGISTRY,
        body(
            event_type="extreme",
            identifier={"anomaly": {"gt": 3.5}, "severity": {"between": [2, 5]}, "region": {"in": ["North"]}},
            from_id="1",
        ),
    )  # fmt: skip
    assert r.filter.values["anomaly"] == "*"
    assert r.filter.constraints["anomaly"] == NumericConstraint("anomaly", "gt", (3.5,), False)
    assert r.filter.constraints["severity"] == NumericConstraint(
        "severity", "between", (2, 5), True
    )
    assert r.filter.constraints["region"] == EnumConstraint("region", "in", ("north",))


@pytest.mark.parametrize(
    ("identifier", "message"),
    [
        ({"class": "od", "step": {"gte": 4, "lte": 9}}, "Field 'step' constraint must contain exactly one operator"),
        ({"class": "od", "step": {}}, "Field 'step' constraint must contain exactly one operator"),
        ({"class": "od", "time": {"eq": "1200"}}, "Field 'time' does not support constraint filters; expected scalar value"),
        ({"class": {"eq": "od"}}, "Field 'class' does not support constraint filters; expected scalar value"),
        ({"class": "od", "step": {"gte": 200000}}, "Field 'step' constraint value 200000 is outside allowed range [0, 100000]"),
        ({"class": "od", "domain": {"in": ["g", "zz"]}}, "Field 'domain' has invalid enum value 'zz'. Allowed: [a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, q, r, s, t, u, v, w, x, y, z]"),
        ({"class": "od", "date": "2025-02-30"}, "Failed to parse date value for field 'date'"),
    ],
)  # fmt: skip
def test_watch_identifier_rejections(identifier: dict[str, Any], message: str) -> None:
    err = error_of(parse_watch, body(event_type="mars", identifier=identifier))
    assert (err.code, err.message) == ("INVALID_WATCH_REQUEST", message)


# --- watch and replay: spatial ---------------------------------------------------------------


def test_polygon_and_point_together_rejected() -> None:
    # aviso: tests/api/streaming.rs watch_/replay_rejects_polygon_and_point_together;
    # request.rs validate_spatial_filters_rejects_polygon_and_point_together
    identifier = {"time": "1200", "polygon": POLYGON, "point": "52.55,13.5"}
    for fn in (parse_watch, parse_replay):
        err = error_of(fn, body(event_type="test_polygon", identifier=identifier, from_id="1"))
        assert err.status == 400
        assert err.message == (
            "Cannot specify both identifier.polygon and identifier.point. "
            "Provide only one spatial filter."
        )


def test_invalid_point_rejected() -> None:
    # aviso: tests/api/streaming.rs replay_rejects_invalid_point_format
    err = error_of(
        parse_replay,
        body(event_type="test_polygon", identifier={"time": "1200", "point": "invalid-point"}, from_id="1"),
    )  # fmt: skip
    assert err.message == (
        "identifier.point must be a valid 'lat,lon' coordinate pair: "
        "Point must be in 'lat,lon' format"
    )
    err = error_of(
        parse_replay,
        body(event_type="test_polygon", identifier={"point": {"eq": "1,2"}}, from_id="1"),
    )
    assert err.message == (
        "identifier.point must be a scalar value: "
        "Field 'point' constraint object is not allowed in this operation"
    )


def test_point_stands_in_for_a_required_polygon() -> None:
    # aviso: processor.rs test_polygon_watch_request_accepts_point_without_polygon_identifier
    # (and the replay twin); request.rs validate_spatial_filters_accepts_point_without_polygon
    for fn in (parse_watch, parse_replay):
        s = fn(
            REGISTRY,
            body(event_type="test_polygon", identifier={"time": "1200", "point": "52.55,13.5"}, from_id="1"),
        )  # fmt: skip
        assert s.filter.values["polygon"] == "*"
        assert s.filter.spatial == PointFilter(52.55, 13.5)
        assert s.filter.topic == "polygon.%2A.1200"


def test_required_polygon_missing_without_point() -> None:
    err = error_of(parse_watch, body(event_type="test_polygon", identifier={"time": "1200"}))
    assert err.message == "Required field 'polygon' missing for watch operation"


def test_polygon_filter_and_wildcards() -> None:
    # aviso: processor.rs test_polygon_watch_request_no_payload_validation
    w = parse_watch(REGISTRY, body(event_type="test_polygon", identifier={"polygon": POLYGON}))
    assert (w.filter.values["date"], w.filter.values["time"]) == ("*", "*")
    assert isinstance(w.filter.spatial, PolygonFilter)
    assert w.filter.spatial.coordinates[1] == (52.6, 13.5)
    assert w.filter.polygon_field == "polygon"


def test_optional_polygon_without_spatial_filter() -> None:
    w = parse_watch(REGISTRY, body(event_type="test_polygon_optional", identifier={"time": "1200"}))
    assert w.filter.spatial is None and w.filter.values["polygon"] == "*"
