"""Topics, watch/replay filtering with real geometries, and the CloudEvent body
(headwater.notify.topic, .match, .cloudevents). Cases marked `aviso:` are ported from
ecmwf/aviso-server (src/notification/*.rs unit tests, tests/api/*.rs)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headwater.notify.cloudevents import CloudEventSettings, cloudevent, cloudevent_time
from headwater.notify.match import CompiledFilter, bounding_box_text, matches, stored_polygon
from headwater.notify.numbers import wire_json
from headwater.notify.requests import Notification, parse_notification, parse_replay, parse_watch
from headwater.notify.topic import (
    TopicDecodeError,
    build_topic,
    decode_subject,
    decode_token,
    display_topic,
    encode_subject,
    encode_token,
)
from tests.unit.test_notify_schema import aviso_registry

pytestmark = pytest.mark.unit

REGISTRY = aviso_registry()
BERLIN = "(52.5,13.4,52.6,13.4,52.6,13.5,52.5,13.5,52.5,13.4)"  # aviso: spatial.rs berlin_polygon
OVERLAPPING = "(52.55,13.45,52.65,13.45,52.65,13.55,52.55,13.55,52.55,13.45)"
DISTANT = "(50.0,10.0,50.1,10.0,50.1,10.1,50.0,10.1,50.0,10.0)"
TOUCHING_CORNER = "(52.6,13.5,52.7,13.5,52.7,13.6,52.6,13.6,52.6,13.5)"
TEST_POLYGON = "(52.5,13.4,52.6,13.5,52.5,13.6,52.4,13.5,52.5,13.4)"  # aviso: test_utils.rs
OUTSIDE_POLYGON = "(10.0,10.0,10.2,10.0,10.2,10.2,10.0,10.2,10.0,10.0)"


# --- topic codec (aviso: src/notification/topic_codec.rs) -------------------------------------


def test_token_roundtrip_reserved_chars() -> None:  # aviso: token_roundtrip_reserved_chars
    assert encode_token("1.45*foo>bar%baz") == "1%2E45%2Afoo%3Ebar%25baz"
    assert decode_token("1%2E45%2Afoo%3Ebar%25baz") == "1.45*foo>bar%baz"


@pytest.mark.parametrize(
    ("logical", "wire"),
    [("1.45", "1%2E45"), ("1*34", "1%2A34"), ("1>0", "1%3E0"), ("1%25", "1%2525")],
)  # aviso: token_roundtrip_examples; docs/src/topic-encoding.md
def test_token_examples(logical: str, wire: str) -> None:
    assert encode_token(logical) == wire
    assert decode_token(wire) == logical


def test_decode_is_single_pass() -> None:
    assert decode_token("1%25") == "1%"


def test_subject_roundtrip() -> None:  # aviso: subject_roundtrip
    parts = ["diss", "FOO", "1.59342", "a*b", "p%q"]
    assert encode_subject(parts) == "diss.FOO.1%2E59342.a%2Ab.p%25q"
    assert decode_subject("diss.FOO.1%2E59342.a%2Ab.p%25q") == parts


@pytest.mark.parametrize("token", ["%", "%2", "%2G", "abc%ZZ"])
def test_rejects_invalid_percent_sequences(token: str) -> None:  # aviso: rejects_invalid_...
    with pytest.raises(TopicDecodeError):
        decode_token(token)


def test_display_topic() -> None:
    assert display_topic("polygon.%2A.1200") == "polygon.*.1200"
    assert display_topic("bad.%ZZ") == "bad.%ZZ"


@given(st.lists(st.text(min_size=0, max_size=8), min_size=1, max_size=6))
def test_subject_codec_round_trips_any_tokens(parts: list[str]) -> None:
    wire = encode_subject(parts)
    assert decode_subject(wire) == parts
    assert all(ch not in token for token in wire.split(".") for ch in "*>")


# --- topic building (aviso: src/notification/topic_builder.rs) --------------------------------


def test_schema_topic_building() -> None:  # aviso: test_schema_topic_building
    values = {"destination": "FOO", "target": "E1", "class": "od"}
    assert build_topic("diss", ("destination", "target", "class"), values) == "diss.FOO.E1.od"


def test_topic_building_with_missing_key() -> None:  # aviso: test_topic_building_with_missing_...
    with pytest.raises(KeyError, match="Missing key 'target'"):
        build_topic("diss", ("destination", "target"), {"destination": "FOO"})


def test_schema_topic_encodes_reserved_tokens() -> None:  # aviso: test_schema_topic_encodes_...
    assert build_topic("test", ("a", "b"), {"a": "1.2", "b": "3*4"}) == "test.1%2E2.3%2A4"


def test_notify_and_watch_topics() -> None:
    # aviso: processor.rs test_topic_generation_with_schema; docs schema-guide example
    n = parse_notification(
        REGISTRY,
        json.dumps(
            {
                "event_type": "dissemination",
                "identifier": {
                    "destination": "SCL",
                    "target": "target.v1",
                    "class": "od",
                    "expver": "1",
                    "domain": "g",
                    "date": "20250706",
                    "time": "0",
                    "stream": "enfo",
                    "step": "1",
                },
                "payload": "x",
            }
        ),
    )
    assert n.topic == "diss.SCL.target%2Ev1.od.0001.g.20250706.0000.enfo.1"
    assert display_topic(n.topic) == "diss.SCL.target.v1.od.0001.g.20250706.0000.enfo.1"


# --- non-spatial filtering --------------------------------------------------------------------


def notify(event_type: str, identifier: Mapping[str, Any], payload: Any = "p") -> Notification:
    return parse_notification(
        REGISTRY,
        json.dumps({"event_type": event_type, "identifier": identifier, "payload": payload}),
    )


def mars(step: Any = "1", domain: str = "g", stream: str = "ens.member.1") -> Notification:
    return notify(
        "mars",
        {
            "class": "od",
            "expver": "0001",
            "domain": domain,
            "date": "20250706",
            "time": "1200",
            "stream": stream,
            "step": step,
        },
    )


def replay_filter(event_type: str, identifier: Mapping[str, Any]) -> CompiledFilter:
    request = parse_replay(
        REGISTRY, json.dumps({"event_type": event_type, "identifier": identifier, "from_id": "1"})
    )
    return CompiledFilter(request.filter)


MARS_FILTER_BASE = {
    "class": "od",
    "expver": "0001",
    "date": "20250706",
    "time": "1200",
    "stream": "ens.member.1",
}


def test_exact_values_and_dot_values() -> None:
    # aviso: tests/api/streaming.rs replay_with_from_id_returns_mars_messages_with_dot_values
    f = replay_filter("mars", {**MARS_FILTER_BASE, "domain": "g", "step": "1"})
    assert f(mars().identifier)
    assert not f(mars(stream="ens.member.2").identifier)
    assert not f(mars(step="2").identifier)


def test_watch_scalar_is_canonicalized_before_comparing() -> None:
    f = replay_filter("mars", {"class": "od", "date": "2025-07-06", "time": "12:00", "step": "001"})
    assert f(mars().identifier)


def test_wildcards_match_anything() -> None:
    f = replay_filter("mars", {"class": "od"})
    assert all(f(m.identifier) for m in (mars(), mars(step="99", domain="a")))
    assert not f({**mars().identifier, "class": "rd"})


def test_int_constraint() -> None:
    # aviso: tests/api/streaming.rs replay_with_int_constraint_filters_mars_step;
    # wildcard_matcher.rs test_matches_notification_filters_with_int_constraint
    f = replay_filter("mars", {**MARS_FILTER_BASE, "domain": "g", "step": {"gte": 4}})
    assert f(mars(step="5").identifier) and not f(mars(step="1").identifier)
    assert not f(mars(step="2").identifier)


def test_scalar_integer_is_an_eq_filter() -> None:
    # aviso: tests/api/streaming.rs replay_treats_scalar_integer_identifier_as_eq_filter
    f = replay_filter("mars", {**MARS_FILTER_BASE, "domain": "g", "step": 4})
    assert f(mars(step="4").identifier) and not f(mars(step="3").identifier)


def test_enum_in_constraint() -> None:
    # aviso: tests/api/streaming.rs replay_with_enum_in_constraint_filters_mars_domain;
    # wildcard_matcher.rs test_matches_notification_filters_with_enum_constraint
    f = replay_filter("mars", {**MARS_FILTER_BASE, "domain": {"in": ["g"]}, "step": "3"})
    assert f(mars(step="3", domain="g").identifier)
    assert not f(mars(step="3", domain="a").identifier)
    f = replay_filter("mars", {"class": "od", "domain": {"in": ["g", "a"]}})
    assert f(mars(domain="a").identifier) and not f(mars(domain="z").identifier)


def test_float_constraint() -> None:
    # aviso: tests/api/streaming.rs replay_with_float_constraint_filters_extreme_anomaly;
    # wildcard_matcher.rs test_matches_notification_filters_with_float_constraint
    def extreme(anomaly: float) -> Notification:
        return notify(
            "extreme", {"region": "north", "run_time": "1200", "severity": 4, "anomaly": anomaly}
        )

    f = replay_filter(
        "extreme", {"region": "north", "run_time": "1200", "severity": 4, "anomaly": {"gte": 40.0}}
    )
    assert f(extreme(42.5).identifier) and not f(extreme(12.5).identifier)
    f = replay_filter("extreme", {"severity": {"gt": 3}, "anomaly": {"gt": 3.5}})
    assert f(extreme(4.1).identifier) and not f(extreme(2.2).identifier)


def test_constraint_on_a_missing_stored_value_never_matches() -> None:
    f = replay_filter("extreme", {"severity": {"gte": 1}})
    assert not f({"region": "north"})
    assert not f({"severity": "*"})


# --- spatial filtering with real geometries ---------------------------------------------------


def polygon_note(polygon: str, event_type: str = "test_polygon") -> Notification:
    return notify(event_type, {"date": "20250706", "time": "1200", "polygon": polygon}, {"n": 1})


def test_point_inside_outside_and_on_the_edge() -> None:
    # aviso: tests/api/streaming.rs replay_with_point_matches_only_containing_polygons;
    # wildcard_matcher.rs test_matches_notification_filters_with_point_inside/outside_polygon
    inside, outside = polygon_note(TEST_POLYGON), polygon_note(OUTSIDE_POLYGON)
    f = replay_filter("test_polygon", {"time": "1200", "point": "52.55,13.5"})
    assert f(inside.identifier) and not f(outside.identifier)
    assert not replay_filter("test_polygon", {"point": "0,0"})(inside.identifier)
    square = polygon_note(BERLIN)
    assert replay_filter("test_polygon", {"point": "52.55,13.45"})(square.identifier)
    # on an edge and on a vertex: not contained (DE-9IM `contains`, as aviso's geo crate)
    assert not replay_filter("test_polygon", {"point": "52.5,13.45"})(square.identifier)
    assert not replay_filter("test_polygon", {"point": "52.6,13.5"})(square.identifier)


def test_point_uses_lat_lon_order() -> None:
    # a thin polygon where swapping lat and lon would change the answer
    thin = polygon_note("(10,50,10,60,11,60,11,50,10,50)")
    assert replay_filter("test_polygon", {"point": "10.5,55"})(thin.identifier)
    assert not replay_filter("test_polygon", {"point": "55,10.5"})(thin.identifier)


@pytest.mark.parametrize(
    ("stored", "expected"),
    [
        (OVERLAPPING, True),  # aviso: spatial.rs test_polygons_intersect_overlapping
        (DISTANT, False),  # aviso: test_polygons_intersect_non_overlapping
        (BERLIN, True),  # aviso: test_polygons_intersect_identical
        (TOUCHING_CORNER, True),  # aviso: test_bounding_boxes_intersect_touching
        ("(52.52,13.42,52.58,13.42,52.58,13.48,52.52,13.48,52.52,13.42)", True),  # contained
    ],
)
def test_polygon_intersection(stored: str, expected: bool) -> None:
    f = replay_filter("test_polygon", {"polygon": BERLIN})
    assert f(polygon_note(stored).identifier) is expected


def test_polygon_field_never_takes_part_in_exact_matching() -> None:
    # aviso: tests/api/polygon_roundtrip.rs (request polygon differs from the producer's)
    producer = polygon_note("(50.0,10.0,52.0,10.0,52.0,12.0,50.0,12.0,50.0,10.0)")
    f = replay_filter(
        "test_polygon",
        {"time": "1200", "polygon": "(49.0,9.0,53.0,9.0,53.0,13.0,49.0,13.0,49.0,9.0)"},
    )
    assert f(producer.identifier)


def test_spatial_filter_applies_after_the_identifier_filter() -> None:
    note = polygon_note(TEST_POLYGON)
    f = replay_filter("test_polygon", {"time": "0600", "point": "52.55,13.5"})
    assert f.matches_spatial(note.identifier) and not f.matches_identifier(note.identifier)
    assert not f(note.identifier)


def test_optional_polygon_without_spatial_filter_matches_by_other_identifiers() -> None:
    # aviso: tests/api/streaming.rs replay_optional_polygon_without_polygon_or_point_...
    # and watch_optional_polygon_without_polygon_or_point_receives_live_notifications
    first = polygon_note(TEST_POLYGON, "test_polygon_optional")
    second = polygon_note(OUTSIDE_POLYGON, "test_polygon_optional")
    f = replay_filter("test_polygon_optional", {"time": "1200"})
    assert f(first.identifier) and f(second.identifier)
    watch = parse_watch(
        REGISTRY,
        json.dumps({"event_type": "test_polygon_optional", "identifier": {"time": "1200"}}),
    )
    assert matches(watch.filter, second.identifier)


def test_spatial_filter_without_stored_polygon_never_matches() -> None:
    f = replay_filter("test_polygon", {"point": "52.55,13.5"})
    assert not f({"date": "20250706", "time": "1200"})
    assert not f({"date": "20250706", "time": "1200", "polygon": "garbage"})


def test_point_on_a_schema_without_polygon_matches_nothing() -> None:
    f = replay_filter("mars", {"class": "od", "point": "1,1"})
    assert not f(mars().identifier)


@given(
    st.floats(-80, 80),
    st.floats(-170, 170),
    st.floats(0.01, 5),
    st.floats(0.01, 5),
    st.floats(-90, 90),
    st.floats(-180, 180),
)
def test_point_in_rectangle_agrees_with_strict_bounds(
    lat0: float, lon0: float, dlat: float, dlon: float, plat: float, plon: float
) -> None:
    lat1, lon1 = lat0 + dlat, lon0 + dlon
    rect = f"({lat0},{lon0},{lat1},{lon0},{lat1},{lon1},{lat0},{lon1},{lat0},{lon0})"
    f = replay_filter("test_polygon", {"point": f"{plat},{plon}"})
    expected = lat0 < plat < lat1 and lon0 < plon < lon1
    assert f(polygon_note(rect).identifier) is expected


@given(
    st.floats(-80, 80), st.floats(-170, 170), st.floats(-80, 80), st.floats(-170, 170),
    st.floats(0.01, 5), st.floats(0.01, 5),
)  # fmt: skip
def test_rectangle_intersection_agrees_with_interval_overlap(
    alat: float, alon: float, blat: float, blon: float, size_lat: float, size_lon: float
) -> None:
    def rect(lat: float, lon: float) -> str:
        lat1, lon1 = lat + size_lat, lon + size_lon
        return f"({lat},{lon},{lat1},{lon},{lat1},{lon1},{lat},{lon1},{lat},{lon})"

    f = replay_filter("test_polygon", {"polygon": rect(alat, alon)})
    # closed rectangles intersect iff both coordinate intervals overlap (touching counts)
    overlap = max(alat, blat) <= min(alat + size_lat, blat + size_lat) and max(alon, blon) <= min(
        alon + size_lon, blon + size_lon
    )
    assert f(polygon_note(rect(blat, blon)).identifier) is overlap


coord = st.tuples(st.floats(-60, 60), st.floats(-60, 60))


@given(st.lists(coord, min_size=3, max_size=3), st.lists(coord, min_size=3, max_size=3), coord)
def test_box_prefilter_never_changes_the_answer(
    filter_tri: list[tuple[float, float]], stored_tri: list[tuple[float, float]], point: Any
) -> None:
    # the cheap bounding-box test answers "no" only where shapely also does
    from shapely.geometry import Point, Polygon

    def text(tri: list[tuple[float, float]]) -> str:
        ring = [*tri, tri[0]]
        return "(" + ",".join(f"{lat!r},{lon!r}" for lat, lon in ring) + ")"

    def shape(tri: list[tuple[float, float]]) -> Polygon:
        return Polygon([(lon, lat) for lat, lon in tri])

    stored, wanted = shape(stored_tri), shape(filter_tri)
    if stored.area < 1e-6 or wanted.area < 1e-6:
        return  # degenerate triangles are rejected at notify time
    note = polygon_note(text(stored_tri))
    poly = replay_filter("test_polygon", {"polygon": text(filter_tri)})
    assert poly(note.identifier) is bool(wanted.intersects(stored))
    at = replay_filter("test_polygon", {"point": f"{point[0]!r},{point[1]!r}"})
    assert at(note.identifier) is bool(stored.contains(Point(point[1], point[0])))


def test_stored_polygon_cache_and_bbox() -> None:
    assert stored_polygon(BERLIN) is stored_polygon(BERLIN)
    assert stored_polygon("nonsense") is None
    # aviso: spatial.rs test_spatial_metadata_from_coordinates / test_triangle_polygon_operations
    assert bounding_box_text(((52.5, 13.4), (52.6, 13.4), (52.6, 13.5), (52.5, 13.5))) == (
        "52.5,13.4,52.6,13.5"
    )
    assert bounding_box_text(((0.0, 0.0), (1.0, 0.0), (0.5, 1.0), (0.0, 0.0))) == "0,0,1,1"


# --- CloudEvent (aviso: src/cloudevents/mod.rs, tests/api/polygon_roundtrip.rs) -------------


SETTINGS = CloudEventSettings(base_url="http://localhost:8000")


def test_cloudevent_shape() -> None:
    note = polygon_note("(50.0,10.0,52.0,10.0,52.0,12.0,50.0,12.0,50.0,10.0)")
    moment = datetime(2026, 2, 25, 18, 58, 23, tzinfo=UTC)
    event = cloudevent("test_polygon", 42, note.identifier, note.payload, moment, SETTINGS)
    assert event == {
        "data": {
            "identifier": {
                "date": "20250706",
                "time": "1200",
                "polygon": "(50.0,10.0,52.0,10.0,52.0,12.0,50.0,12.0,50.0,10.0)",
            },
            "payload": {"n": 1},
        },
        "datacontenttype": "application/json",
        "dataschema": "http://localhost:8000/schema/test_polygon",
        "id": "test_polygon@42",
        "source": "http://localhost:8000",
        "specversion": "1.0",
        "time": "2026-02-25T18:58:23Z",
        "type": "int.ecmwf.aviso.test_polygon",
    }
    assert list(event) == sorted(event)  # aviso's serde_json writes keys sorted


def test_cloudevent_payload_null_when_omitted_and_never_reshaped() -> None:
    # aviso docs: payload-contract.md
    moment = datetime(2026, 1, 1, tzinfo=UTC)
    for payload in (None, "forecast complete", 42, True, ["a", "b"], {"note": "ok"}):
        event = cloudevent("mars", 1, {"class": "od"}, payload, moment, SETTINGS)
        assert event["data"]["payload"] == payload
    text = wire_json(cloudevent("mars", 7, {"class": "od"}, None, moment, SETTINGS))
    assert '"payload":null' in text and text.startswith('{"data":{"identifier":{"class":"od"}')


@pytest.mark.parametrize(
    ("moment", "text"),
    [
        (datetime(2026, 2, 25, 18, 58, 23, tzinfo=UTC), "2026-02-25T18:58:23Z"),
        (datetime(2026, 2, 25, 18, 58, 23, 710000, tzinfo=UTC), "2026-02-25T18:58:23.710Z"),
        (datetime(2026, 2, 25, 18, 58, 23, 123456, tzinfo=UTC), "2026-02-25T18:58:23.123456Z"),
        (
            datetime(2026, 2, 25, 20, 58, 23, tzinfo=timezone(timedelta(hours=2))),
            "2026-02-25T18:58:23Z",
        ),
    ],
)
def test_cloudevent_time_is_utc_rfc3339(moment: datetime, text: str) -> None:
    assert cloudevent_time(moment) == text
