"""The /api/v1 settings (aviso's names, env vars, the Lambda clamp), the CloudEvent bytes a
stream sends (payload spliced, never decoded), the time conversions between records and
requests, and the admin notification-id rule (aviso: src/routes/admin.rs)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from headwater.errors import ConfigurationError
from headwater.http.notifications import _parse_notification_id
from headwater.notify.cloudevents import CloudEventSettings, cloudevent, cloudevent_json
from headwater.notify.numbers import wire_json
from headwater.notify.requests import load_json
from headwater.notify.service import instant_ms, load_notification_schema, record_time
from headwater.settings import (
    NotifySettings,
    Settings,
    StreamSettings,
    lambda_stream_limit_sec,
)

pytestmark = pytest.mark.unit


# --- settings ------------------------------------------------------------------------------------
def test_defaults_are_avisos() -> None:
    s = Settings.from_env({})
    assert s.notify == NotifySettings(
        schema="",
        base_url="http://localhost",
        stream=StreamSettings(
            sse_heartbeat_interval_sec=30,
            connection_max_duration_sec=3600,
            replay_batch_size=100,
            max_historical_notifications=10_000,
            replay_batch_delay_ms=100,
        ),
    )


def test_env_vars_set_every_notification_setting() -> None:
    s = Settings.from_env(
        {
            "HEADWATER_NOTIFICATION_SCHEMA": " s3://cfg/schema.yaml ",
            "HEADWATER_NOTIFY_BASE_URL": "https://aviso.example.org",
            "HEADWATER_SSE_HEARTBEAT_INTERVAL_SEC": "5",
            "HEADWATER_CONNECTION_MAX_DURATION_SEC": "7200",
            "HEADWATER_REPLAY_BATCH_SIZE": "500",
            "HEADWATER_MAX_HISTORICAL_NOTIFICATIONS": "42",
            "HEADWATER_REPLAY_BATCH_DELAY_MS": "0",
        }
    )
    assert s.notify == NotifySettings(
        "s3://cfg/schema.yaml", "https://aviso.example.org", StreamSettings(5, 7200, 500, 42, 0)
    )


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("HEADWATER_SSE_HEARTBEAT_INTERVAL_SEC", "0"),
        ("HEADWATER_CONNECTION_MAX_DURATION_SEC", "0"),
        ("HEADWATER_REPLAY_BATCH_SIZE", "0"),
        ("HEADWATER_MAX_HISTORICAL_NOTIFICATIONS", "-1"),
        ("HEADWATER_REPLAY_BATCH_DELAY_MS", "-1"),
        ("HEADWATER_REPLAY_BATCH_SIZE", "many"),
    ],
)
def test_bad_values_refuse_to_start(name: str, value: str) -> None:
    with pytest.raises(ConfigurationError, match=name):
        Settings.from_env({name: value})


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, 3600),  # not on Lambda: as configured
        ({"AWS_LAMBDA_FUNCTION_NAME": "fn"}, 840),  # Lambda's 15 minutes less 60 s
        ({"AWS_LAMBDA_FUNCTION_NAME": "fn", "HEADWATER_LAMBDA_TIMEOUT_SEC": "300"}, 270),
        ({"AWS_LAMBDA_FUNCTION_NAME": "fn", "HEADWATER_LAMBDA_TIMEOUT_SEC": "30"}, 25),
        (
            {"AWS_LAMBDA_FUNCTION_NAME": "fn", "HEADWATER_CONNECTION_MAX_DURATION_SEC": "120"},
            120,  # already inside the limit
        ),
    ],
)
def test_max_duration_is_clamped_below_the_lambda_timeout(
    env: dict[str, str], expected: int
) -> None:
    assert Settings.from_env(env).notify.stream.connection_max_duration_sec == expected


def test_lambda_stream_limit() -> None:
    assert [lambda_stream_limit_sec(t) for t in (900, 3600, 600, 300, 60, 30, 5)] == [
        840,
        840,  # Lambda never runs longer than 900 s
        540,
        270,
        54,
        25,
        1,
    ]


def test_no_schema_location_means_none_configured(tmp_path: Any) -> None:
    schema = load_notification_schema("", None)
    assert not schema.configured and schema.event_types == []
    path = tmp_path / "schema.yaml"
    path.write_text("notification_schema:\n  mars:\n    identifier:\n      class: {type: Wrong}\n")
    with pytest.raises(ConfigurationError, match="mars"):
        load_notification_schema(str(path), None)


# --- CloudEvent bytes ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "payload",
    [
        None,
        "plain text",
        {"z": 1, "a": [1.0, 2, {"y": None, "b": "é\n"}], "m": 1e300},
        [3, 2, 1],
        12.5,
        True,
    ],
)
def test_cloudevent_json_splices_the_stored_payload(payload: Any) -> None:
    settings = CloudEventSettings("https://aviso.example.org")
    moment = datetime(2026, 2, 25, 18, 58, 23, 120_000, tzinfo=UTC)
    identifier = {"time": "1200", "class": "od", "date": "20250706"}
    stored = wire_json(payload).encode()  # how publish stores it
    got = cloudevent_json("mars", 7, identifier, stored, moment, settings)
    # THEN exactly aviso's bytes for the whole event, and the payload comes back unchanged
    assert got == wire_json(cloudevent("mars", 7, identifier, payload, moment, settings)).encode()
    assert load_json(got)["data"]["payload"] == payload


@pytest.mark.parametrize(
    ("event_type", "base"),
    [("mars", "http://localhost"), ('we"ird\\type\u00e9', 'http://h/"q"\n'), ("x", "")],
)
def test_cloudevent_json_matches_the_generic_writer_for_any_names(
    event_type: str, base: str
) -> None:
    # the per-event-type pieces are built once and cached: they must still be escaped
    settings = CloudEventSettings(base)
    for seq, micros in ((1, 0), (2**63, 5), (42, 123_000)):
        moment = datetime(2026, 11, 22, 8, 0, 1, micros, tzinfo=UTC)
        identifier = {"b": 'q"uote', "a": "tab\t", "é": "ü"}
        got = cloudevent_json(event_type, seq, identifier, b"null", moment, settings)
        want = cloudevent(event_type, seq, identifier, None, moment, settings)
        assert got == wire_json(want).encode()


def test_cloudevent_json_keeps_payload_bytes_verbatim() -> None:
    raw = b'{"b": 1,   "a": 2}'  # not canonical: still not re-encoded
    got = cloudevent_json(
        "e", 1, {}, raw, datetime(2026, 1, 1, tzinfo=UTC), CloudEventSettings("http://h")
    )
    assert b'"data":{"identifier":{},"payload":{"b": 1,   "a": 2}},"datacontenttype"' in got


# --- times ---------------------------------------------------------------------------------------
def test_record_time_is_exact_to_the_millisecond() -> None:
    # 1740509903710 / 1000 as a float is 1740509903.7099998...: no float on the way
    assert record_time(1740509903710) == datetime(2025, 2, 25, 18, 58, 23, 710_000, tzinfo=UTC)
    assert record_time(0) == datetime(1970, 1, 1, tzinfo=UTC)


def test_from_date_rounds_up_to_the_next_millisecond() -> None:
    at = datetime(2025, 2, 25, 18, 58, 23, 710_000, tzinfo=UTC)
    assert instant_ms(at) == 1740509903710
    assert instant_ms(at.replace(microsecond=710_001)) == 1740509903711
    assert instant_ms(datetime(1969, 12, 31, 23, 59, 59, 999_500, tzinfo=UTC)) == 0


# --- admin ids -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "parsed"),
    [
        ("test_polygon@42", ("test_polygon", 42)),
        ("  mars@1 ", ("mars", 1)),
        ("a@b@3", None),  # split at the first '@': "b@3" is no integer
        ("mars@+7", ("mars", 7)),  # Rust's u64 parse takes a '+'
    ],
)
def test_notification_ids(raw: str, parsed: tuple[str, int] | None) -> None:
    if parsed is None:
        with pytest.raises(ValueError, match="must be a positive integer"):
            _parse_notification_id(raw)
    else:
        assert _parse_notification_id(raw) == parsed


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("test_polygon42", "notification_id must be in '<stream>@<sequence>' format"),
        ("@4", "notification_id must be in '<stream>@<sequence>' format"),
        ("mars@", "notification_id must be in '<stream>@<sequence>' format"),
        ("mars@abc", "notification_id sequence must be a positive integer"),
        ("mars@-1", "notification_id sequence must be a positive integer"),
        ("mars@0", "notification_id sequence must be greater than zero"),
        ("mars@18446744073709551616", "notification_id sequence must be a positive integer"),
    ],
)
def test_bad_notification_ids(raw: str, message: str) -> None:
    with pytest.raises(ValueError) as err:
        _parse_notification_id(raw)
    assert str(err.value) == message


# --- make run's default schema -------------------------------------------------------------------
def test_make_run_serves_the_example_schema_unless_told_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from headwater.dev.server import EXAMPLE_SCHEMA, default_notification_schema

    assert EXAMPLE_SCHEMA.is_file()
    assert load_notification_schema(str(EXAMPLE_SCHEMA), None).event_types == [
        "dissemination",
        "extreme",
        "mars",
        "test_polygon",
    ]
    monkeypatch.delenv("HEADWATER_NOTIFICATION_SCHEMA", raising=False)
    assert default_notification_schema() == str(EXAMPLE_SCHEMA)
    assert Settings.from_env().notify.schema == str(EXAMPLE_SCHEMA)
    for explicit in ("", "s3://b/k"):  # set, even empty: left alone
        monkeypatch.setenv("HEADWATER_NOTIFICATION_SCHEMA", explicit)
        assert default_notification_schema() is None
        assert Settings.from_env().notify.schema == explicit
