"""Stream profiles (protocol §2.3, §7A): /_profile updates, installs, append normalization."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from headwater.durable import schema
from headwater.durable.offsets import encode_offset
from headwater.durable.profiles import (
    DEFAULT_PROFILE,
    EVLOG_ENVELOPE_FIELDS,
    INTERNAL_METRICS_STREAM,
    KINDS,
    METRICS_API_VERSION,
    METRICS_ENVELOPE_FIELDS,
    PROFILE_API_VERSION,
    TOUCH_DEFAULTS,
    ProfileError,
    check_install,
    derived_routing_key,
    install,
    normalize,
    parse_profile_update,
    resource,
    touch_config,
)

pytestmark = pytest.mark.unit

JSON = "application/json"
START = "0" * 26
EVLOG: dict[str, Any] = {"kind": "evlog"}
METRICS: dict[str, Any] = {"kind": "metrics"}
GENERIC: dict[str, Any] = {"kind": "generic"}
STATE: dict[str, Any] = {"kind": "state-protocol"}


def update(profile: object, content_type: str | None = JSON) -> dict[str, Any]:
    return parse_profile_update(
        {"apiVersion": PROFILE_API_VERSION, "profile": profile}, content_type
    )


def installed(profile: dict[str, Any], stream: str = "s") -> dict[str, Any]:
    body = install(profile, stream)
    assert body is not None
    return schema.apply_update(
        schema.empty_registry(stream), body, stream_is_empty=True, end_offset=START
    )


def metric(**extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "metric": "http.latency",
        "unit": "ms",
        "windowStart": 1000,
        "windowEnd": 11000,
        "count": 4,
        "sum": 10,
    }
    base.update(extra)
    return base


# --------------------------------------------------------------------------- constants


def test_constants() -> None:
    assert PROFILE_API_VERSION == "durable.streams/profile/v1"
    assert KINDS == ("evlog", "generic", "metrics", "state-protocol")
    assert dict(DEFAULT_PROFILE) == {"kind": "generic"}


# --------------------------------------------------------------------------- envelope


def test_generic_update_and_api_version_optional() -> None:
    assert update({"kind": "generic"}, "text/plain") == {"kind": "generic"}
    assert parse_profile_update({"profile": {"kind": "generic"}}, None) == {"kind": "generic"}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "profile update must be a JSON object"),
        ("x", "profile update must be a JSON object"),
        ({"profile": GENERIC, "extra": 1}, "'extra' is not supported"),
        ({"apiVersion": "durable.streams/profile/v2", "profile": GENERIC}, "apiVersion must be"),
        ({"apiVersion": None, "profile": GENERIC}, "apiVersion must be"),
        ({"apiVersion": PROFILE_API_VERSION}, "profile is required"),
        ({"profile": None}, "profile must be an object"),
        ({"profile": ["generic"]}, "profile must be an object"),
        ({"profile": {}}, "profile.kind must be a non-empty string"),
        ({"profile": {"kind": 3}}, "profile.kind must be a non-empty string"),
        ({"profile": {"kind": " "}}, "profile.kind must be a non-empty string"),
        ({"profile": {"kind": "otel-traces"}}, "evlog|generic|metrics|state-protocol"),
        ({"profile": {"kind": "Generic"}}, "profile.kind must be"),
        ({"profile": {"kind": "generic", "extra": True}}, "profile.extra is not supported"),
        ({"profile": {"kind": "metrics", "rollups": {}}}, "profile.rollups is not supported"),
        ({"profile": {"kind": "evlog", "extra": True}}, "profile.extra is not supported"),
        ({"profile": {"kind": "state-protocol", "x": 1}}, "profile.x is not supported"),
    ],
)
def test_update_envelope_errors(body: object, message: str) -> None:
    with pytest.raises(ProfileError, match=message.replace("|", r"\|")):
        parse_profile_update(body, JSON)


def test_profile_error_is_value_error() -> None:
    assert issubclass(ProfileError, ValueError)


@pytest.mark.parametrize("kind", ["evlog", "metrics", "state-protocol"])
@pytest.mark.parametrize("content_type", ["text/plain", "application/octet-stream", None, ""])
def test_json_kinds_require_json_stream(kind: str, content_type: str | None) -> None:
    with pytest.raises(ProfileError, match=f"{kind} profile requires application/json"):
        update({"kind": kind}, content_type)


@pytest.mark.parametrize("kind", ["evlog", "metrics", "state-protocol"])
@pytest.mark.parametrize(
    "content_type", ["application/json", "Application/JSON; charset=utf-8", " application/json ;x"]
)
def test_json_media_type_compare_ignores_case_and_parameters(kind: str, content_type: str) -> None:
    assert update({"kind": kind}, content_type) == {"kind": kind}


def test_option_errors_reported_before_content_type() -> None:
    with pytest.raises(ProfileError, match=r"profile\.extra"):
        update({"kind": "evlog", "extra": 1}, "text/plain")


# --------------------------------------------------------------------------- evlog options


def test_evlog_options_canonical() -> None:
    got = update(
        {
            "kind": "evlog",
            "redactKeys": [" SessionToken ", "sessiontoken", "X-Api"],
            "correlation": {
                "requestIdFields": [" rid ", "rid", "ctx.rid"],
                "traceContextFields": ["tc.traceId"],
                "parseTraceparent": False,
            },
            "observability": {"request": {"tracesStream": " app-traces "}},
        }
    )
    assert got == {
        "kind": "evlog",
        "redactKeys": ["sessiontoken", "x-api"],
        "correlation": {
            "requestIdFields": ["rid", "ctx.rid"],
            "traceContextFields": ["tc.traceId"],
            "parseTraceparent": False,
        },
        "observability": {"request": {"tracesStream": "app-traces"}},
    }


def test_evlog_empty_option_objects_dropped() -> None:
    got = update({"kind": "evlog", "correlation": {}, "observability": {"request": {}}})
    assert got == {"kind": "evlog"}
    assert update({"kind": "evlog", "observability": {}}) == {"kind": "evlog"}
    assert update({"kind": "evlog", "redactKeys": []}) == {"kind": "evlog", "redactKeys": []}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"redactKeys": None}, "profile.redactKeys must be an array of strings"),
        ({"redactKeys": "token"}, "profile.redactKeys must be an array of strings"),
        ({"redactKeys": ["a", 1]}, "profile.redactKeys must be an array of strings"),
        ({"redactKeys": ["a", "  "]}, "profile.redactKeys must not contain empty strings"),
        ({"redactKeys": [f"k{i}" for i in range(65)]}, r"profile.redactKeys too large \(max 64\)"),
        ({"correlation": []}, "profile.correlation must be an object"),
        ({"correlation": {"x": 1}}, "profile.correlation.x is not supported"),
        ({"correlation": {"requestIdFields": "rid"}}, "requestIdFields must be an array"),
        ({"correlation": {"traceContextFields": [""]}}, "traceContextFields must not contain"),
        ({"correlation": {"parseTraceparent": "no"}}, "parseTraceparent must be a boolean"),
        ({"observability": None}, "profile.observability must be an object"),
        ({"observability": {"x": 1}}, "profile.observability.x is not supported"),
        ({"observability": {"request": 1}}, "profile.observability.request must be an object"),
        ({"observability": {"request": {"y": 1}}}, "observability.request.y is not supported"),
        ({"observability": {"request": {"tracesStream": ""}}}, "request.tracesStream must not"),
        ({"observability": {"request": {"tracesStream": 5}}}, "tracesStream must be a string"),
    ],
)
def test_evlog_option_errors(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        update({"kind": "evlog", **options})


def test_evlog_redact_keys_max_64_accepted() -> None:
    keys = [f"k{i}" for i in range(64)]
    assert update({"kind": "evlog", "redactKeys": keys})["redactKeys"] == keys


# --------------------------------------------------------------------------- state-protocol


def test_state_protocol_without_touch() -> None:
    assert update({"kind": "state-protocol"}) == {"kind": "state-protocol"}


def test_touch_enabled_fills_reference_defaults() -> None:
    got = update({"kind": "state-protocol", "touch": {"enabled": True}})
    assert got == {"kind": "state-protocol", "touch": dict(TOUCH_DEFAULTS)}
    assert got["touch"]["memory"]["filterPow2"] == 22
    assert got["touch"]["templates"]["defaultInactivityTtlMs"] == 3_600_000
    assert got["touch"]["onMissingBefore"] == "coarse"


def test_touch_overrides_kept_and_integral_floats_canonical() -> None:
    got = update(
        {
            "kind": "state-protocol",
            "touch": {
                "enabled": True,
                "onMissingBefore": "skipBefore",
                "coarseIntervalMs": 2.5,
                "fineBurstTokens": 10.0,
                "memory": {"filterPow2": 10, "k": 8},
                "templates": {"activationRateLimitPerMinute": 0},
            },
        }
    )["touch"]
    assert got["onMissingBefore"] == "skipBefore"
    assert got["coarseIntervalMs"] == 2.5
    assert got["fineBurstTokens"] == 10 and isinstance(got["fineBurstTokens"], int)
    assert got["memory"]["filterPow2"] == 10 and got["memory"]["k"] == 8
    assert got["memory"]["bucketMs"] == 100
    assert got["templates"]["activationRateLimitPerMinute"] == 0
    assert got["templates"]["gcIntervalMs"] == 60_000


def test_touch_defaults_not_shared_between_results() -> None:
    first = update({"kind": "state-protocol", "touch": {"enabled": True}})
    first["touch"]["memory"]["k"] = 7
    second = update({"kind": "state-protocol", "touch": {"enabled": True}})
    assert second["touch"]["memory"]["k"] == 4
    assert TOUCH_DEFAULTS["memory"]["k"] == 4


@pytest.mark.parametrize("touch", [{"enabled": False}, {}])
def test_touch_disabled_is_canonical(touch: dict[str, Any]) -> None:
    got = update({"kind": "state-protocol", "touch": {**touch, "coarseIntervalMs": 5}})
    assert got == {"kind": "state-protocol", "touch": {"enabled": False}}


@pytest.mark.parametrize(
    ("touch", "message"),
    [
        (None, "profile.touch must be an object"),
        ([], "profile.touch must be an object"),
        ({"enabled": True, "storage": "sqlite"}, "profile.touch.storage is not supported"),
        ({"enabled": "yes"}, "profile.touch.enabled must be a boolean"),
        ({"enabled": 1}, "profile.touch.enabled must be a boolean"),
        ({"enabled": True, "onMissingBefore": "drop"}, "coarse|skipBefore|error"),
        ({"enabled": True, "coarseIntervalMs": 0}, "coarseIntervalMs must be a number > 0"),
        ({"enabled": True, "coarseIntervalMs": "100"}, "coarseIntervalMs must be a number > 0"),
        ({"enabled": True, "touchCoalesceWindowMs": True}, "touchCoalesceWindowMs must be"),
        ({"enabled": True, "coarseIntervalMs": float("inf")}, "coarseIntervalMs must be"),
        ({"enabled": True, "fineTouchBudgetPerBatch": -1}, "must be an integer >= 0"),
        ({"enabled": True, "fineTouchBudgetPerBatch": 1.5}, "must be an integer >= 0"),
        ({"enabled": True, "memory": None}, "profile.touch.memory must be an object"),
        ({"enabled": True, "memory": {"x": 1}}, "profile.touch.memory.x is not supported"),
        (
            {"enabled": True, "memory": {"filterPow2": 31}},
            r"filterPow2 must be an integer in \[10,30\]",
        ),
        ({"enabled": True, "memory": {"k": 0}}, r"memory.k must be an integer in \[1,8\]"),
        ({"enabled": True, "memory": {"bucketMs": 0}}, "bucketMs must be an integer > 0"),
        ({"enabled": True, "memory": {"keyIndexMaxKeys": 1025}}, "keyIndexMaxKeys must be"),
        ({"enabled": True, "templates": "x"}, "profile.touch.templates must be an object"),
        ({"enabled": True, "templates": {"ttl": 1}}, "templates.ttl is not supported"),
        ({"enabled": True, "templates": {"gcIntervalMs": 0}}, "gcIntervalMs must be a number > 0"),
        ({"enabled": True, "templates": {"defaultInactivityTtlMs": -1}}, "must be a number >= 0"),
        # options are validated even when touch is disabled (stricter than the reference)
        ({"enabled": False, "memory": {"k": 99}}, r"memory.k must be an integer in \[1,8\]"),
        ({"enabled": False, "bogus": 1}, "profile.touch.bogus is not supported"),
    ],
)
def test_touch_errors(touch: object, message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        update({"kind": "state-protocol", "touch": touch})


def test_touch_config() -> None:
    enabled = update({"kind": "state-protocol", "touch": {"enabled": True}})
    assert touch_config(enabled) == dict(TOUCH_DEFAULTS)
    assert touch_config(update({"kind": "state-protocol", "touch": {"enabled": False}})) is None
    assert touch_config(STATE) is None
    assert touch_config(EVLOG) is None
    assert touch_config({"kind": "evlog", "touch": {"enabled": True}}) is None


# --------------------------------------------------------------------------- resource


def test_resource() -> None:
    assert resource(None) == {"apiVersion": PROFILE_API_VERSION, "profile": {"kind": "generic"}}
    profile = {"kind": "evlog", "redactKeys": ["a"]}
    got = resource(profile)
    assert got == {"apiVersion": PROFILE_API_VERSION, "profile": profile}
    got["profile"]["redactKeys"].append("b")
    assert profile["redactKeys"] == ["a"]


# --------------------------------------------------------------------------- install


def test_install_evlog_registry() -> None:
    reg = installed(update({"kind": "evlog", "redactKeys": ["x"]}), "logs")
    assert reg["currentVersion"] == 1
    assert reg["boundaries"] == [{"offset": START, "version": 1}]
    assert "routingKey" not in reg
    search = reg["search"]
    assert search["profile"] == "evlog"
    assert search["primaryTimestampField"] == "timestamp"
    assert "rollups" not in search
    fields = schema.search_fields(reg)
    assert fields["service"].kind == "keyword" and fields["service"].normalizer == "lowercase_v1"
    assert fields["status"].kind == "integer" and fields["status"].column
    assert fields["message"].kind == "text"
    assert fields["error.message"].pointer == "/context/error/message"
    assert fields["req"].name == "requestId" and fields["ts"].name == "timestamp"
    for name in ("requestId", "traceId", "spanId", "path", "method", "environment", "level"):
        assert fields[name].exact and fields[name].prefix


def test_install_metrics_registry() -> None:
    reg = installed(METRICS, "app-metrics")
    assert reg["currentVersion"] == 1
    assert reg["routingKey"] == {"jsonPointer": "/seriesKey", "required": True}
    search = reg["search"]
    assert search["profile"] == "metrics"
    assert search["primaryTimestampField"] == "windowStart"
    rollup = search["rollups"]["metrics"]
    assert rollup["intervals"] == ["10s", "1m", "5m", "1h"]
    assert rollup["dimensions"][0] == "metric"
    assert rollup["measures"]["value"]["kind"] == "summary_parts"
    fields = schema.search_fields(reg)
    assert fields["windowStart"].kind == "date"
    assert fields["series"].name == "seriesKey"


def test_install_internal_metrics_stream_is_lean() -> None:
    body = install(METRICS, INTERNAL_METRICS_STREAM)
    assert body is not None and set(body) == {"apiVersion", "schema"}
    reg = installed(METRICS, INTERNAL_METRICS_STREAM)
    assert reg["currentVersion"] == 1
    assert "routingKey" not in reg and "search" not in reg


@pytest.mark.parametrize(
    "profile", [GENERIC, STATE, {"kind": "state-protocol", "touch": {"enabled": True}}]
)
def test_install_nothing_for_generic_and_state_protocol(profile: dict[str, Any]) -> None:
    assert install(profile, "s") is None


def test_install_returns_fresh_copies() -> None:
    first = install(EVLOG, "s")
    assert first is not None
    first["search"]["fields"].clear()
    first["schema"]["required"].clear()
    second = install(EVLOG, "s")
    assert second is not None
    assert second["search"]["fields"] and second["schema"]["required"]


def test_install_body_cannot_start_on_non_empty_stream() -> None:
    body = install(EVLOG, "s")
    with pytest.raises(schema.SchemaError, match="empty stream"):
        schema.apply_update(
            schema.empty_registry("s"), body, stream_is_empty=False, end_offset=START
        )


def test_install_at_later_end_offset() -> None:
    end = encode_offset(0, 7)
    body = install(METRICS, "m")
    reg = schema.apply_update(
        schema.empty_registry("m"), body, stream_is_empty=True, end_offset=end
    )
    assert reg["boundaries"] == [{"offset": end, "version": 1}]


@pytest.mark.parametrize(
    ("kind", "current", "empty", "expected"),
    [
        ("evlog", "generic", True, True),
        ("evlog", "evlog", True, True),
        ("evlog", "evlog", False, False),
        ("metrics", "generic", True, True),
        ("metrics", "state-protocol", True, True),
        ("metrics", "metrics", False, False),
        ("generic", "evlog", False, False),
        ("generic", "generic", True, False),
        ("state-protocol", "metrics", False, False),
    ],
)
def test_check_install(kind: str, current: str, empty: bool, expected: bool) -> None:
    assert check_install({"kind": kind}, current_kind=current, stream_is_empty=empty) is expected


@pytest.mark.parametrize(
    ("kind", "current"),
    [("evlog", "generic"), ("evlog", "metrics"), ("metrics", "generic"), ("metrics", "evlog")],
)
def test_check_install_rejects_late_install(kind: str, current: str) -> None:
    with pytest.raises(ProfileError, match=f"{kind} profile must be installed before appending"):
        check_install({"kind": kind}, current_kind=current, stream_is_empty=False)


@pytest.mark.parametrize("bad", [{}, {"kind": "otel-traces"}, {"kind": None}])
def test_bad_stored_profile_is_caller_bug(bad: dict[str, Any]) -> None:
    calls: list[Callable[[], object]] = [
        lambda: install(bad, "s"),
        lambda: normalize(bad, {}),
        lambda: derived_routing_key(bad, {}),
        lambda: check_install(bad, current_kind="generic", stream_is_empty=True),
    ]
    for call in calls:
        with pytest.raises(ValueError) as info:
            call()
        assert not isinstance(info.value, ProfileError)


# --------------------------------------------------------------------------- evlog normalize

NOW = 1_774_432_800_123  # 2026-03-25T10:00:00.123Z


def test_evlog_envelope() -> None:
    raw = {
        "timestamp": " 2026-03-25T10:00:00.000Z ",
        "status": 402,
        "requestId": "req_123",
        "traceContext": {"traceId": "trace_123", "spanId": "span_123"},
        "method": "POST",
        "path": "/api/checkout",
        "service": " checkout ",
        "environment": "prod",
        "version": "",
        "message": "Payment failed",
        "why": "Card declined by issuer",
        "fix": "Retry with another card",
        "password": "hunter2",
        "sessionToken": "tok_secret",
        "cart": {"items": 2},
    }
    before = copy.deepcopy(raw)
    out = normalize({"kind": "evlog", "redactKeys": ["sessiontoken"]}, raw, now_ms=NOW)
    assert raw == before
    assert isinstance(out, dict)
    assert tuple(out) == EVLOG_ENVELOPE_FIELDS
    assert out["timestamp"] == "2026-03-25T10:00:00.000Z"
    assert out["level"] == "error"  # why/fix present
    assert out["service"] == "checkout"
    assert out["version"] is None and out["region"] is None
    assert (out["requestId"], out["traceId"], out["spanId"]) == ("req_123", "trace_123", "span_123")
    assert (out["status"], out["duration"]) == (402, None)
    assert out["sampling"] is None and out["link"] is None
    assert out["redaction"] == {"keys": ["password", "sessionToken"]}
    assert out["context"] == {
        "traceContext": {"traceId": "trace_123", "spanId": "span_123"},
        "password": "[REDACTED]",
        "sessionToken": "[REDACTED]",
        "cart": {"items": 2},
    }
    reg = installed(EVLOG)
    schema.validate(reg, out)


def test_evlog_default_timestamp_and_levels() -> None:
    out = normalize(EVLOG, {}, now_ms=NOW)
    assert isinstance(out, dict)
    assert out["timestamp"] == "2026-03-25T10:00:00.123Z"
    assert out["level"] == "info"
    assert out["context"] == {} and out["redaction"] == {"keys": []}
    schema.validate(installed(EVLOG), out)
    assert isinstance(normalize(EVLOG, {"timestamp": 5})["timestamp"], str)  # type: ignore[index]


@pytest.mark.parametrize(
    ("raw", "level"),
    [
        ({"level": " WARN "}, "warn"),
        ({"level": "debug", "status": 500}, "debug"),
        ({"level": "fatal"}, "info"),
        ({"level": "fatal", "link": "https://x"}, "error"),
        ({"status": 503}, "error"),
        ({"status": "404"}, "warn"),
        ({"status": 399}, "info"),
        ({"status": 400}, "warn"),
        ({"status": 500}, "error"),
        ({"status": 499}, "warn"),
        ({"why": "  "}, "info"),
    ],
)
def test_evlog_level(raw: dict[str, Any], level: str) -> None:
    out = normalize(EVLOG, raw, now_ms=NOW)
    assert isinstance(out, dict) and out["level"] == level


@pytest.mark.parametrize(
    ("raw", "status", "duration"),
    [
        ({"status": "201", "duration": "12.5"}, 201, 12.5),
        ({"status": 200.0, "duration": 3}, 200, 3),
        ({"status": 200.5, "duration": "abc"}, None, None),
        ({"status": True, "duration": False}, None, None),
        ({"status": " ", "duration": float("nan")}, None, None),
        ({"status": "1e2", "duration": " 1e3 "}, 100, 1000.0),
    ],
)
def test_evlog_numbers(raw: dict[str, Any], status: int | None, duration: float | None) -> None:
    out = normalize(EVLOG, raw, now_ms=NOW)
    assert isinstance(out, dict)
    assert out["status"] == status and out["duration"] == duration
    assert out["status"] is None or type(out["status"]) is int


def test_evlog_context_merge() -> None:
    out = normalize(EVLOG, {"context": {"a": 1, "b": 1}, "b": 2, "sampling": {"rate": 0.1}})
    assert isinstance(out, dict)
    assert out["context"] == {"a": 1, "b": 2}
    assert out["sampling"] == {"rate": 0.1}
    odd = normalize(EVLOG, {"context": "text", "x": 1})
    assert isinstance(odd, dict) and odd["context"] == {"x": 1, "context": "text"}
    nulled = normalize(EVLOG, {"context": None})
    assert isinstance(nulled, dict) and nulled["context"] == {"context": None}


def test_evlog_redaction_nested_arrays_and_defaults() -> None:
    raw: dict[str, Any] = {
        "headers": {"Authorization": "Bearer x", "Cookie": "c=1", "ok": "y"},
        "items": [{"token": "t"}, {"name": "n"}],
        "context": {"apiKey": "k", "user": {"Secret": "s"}},
        "custom": "z",
    }
    out = normalize({"kind": "evlog", "redactKeys": ["custom"]}, raw, now_ms=NOW)
    assert isinstance(out, dict)
    ctx = out["context"]
    assert ctx["headers"] == {"Authorization": "[REDACTED]", "Cookie": "[REDACTED]", "ok": "y"}
    assert ctx["items"] == [{"token": "[REDACTED]"}, {"name": "n"}]
    assert ctx["apiKey"] == "[REDACTED]" and ctx["user"] == {"Secret": "[REDACTED]"}
    assert ctx["custom"] == "[REDACTED]"
    assert sorted(out["redaction"]["keys"]) == sorted(
        [
            "apiKey",
            "user.Secret",
            "headers.Authorization",
            "headers.Cookie",
            "items.0.token",
            "custom",
        ]
    )
    assert raw["items"][0] == {"token": "t"}  # input untouched
    plain = normalize(EVLOG, {"custom": "z"}, now_ms=NOW)
    assert isinstance(plain, dict) and plain["context"] == {"custom": "z"}


def test_evlog_request_id_sources() -> None:
    ctx_only = normalize(EVLOG, {"context": {"requestId": " r1 "}}, now_ms=NOW)
    assert isinstance(ctx_only, dict) and ctx_only["requestId"] == "r1"
    top_wins = normalize(EVLOG, {"requestId": "r0", "context": {"requestId": "r1"}}, now_ms=NOW)
    assert isinstance(top_wins, dict) and top_wins["requestId"] == "r0"
    custom = {"kind": "evlog", "correlation": {"requestIdFields": ["meta.rid"]}}
    got = normalize(custom, {"requestId": "ignored", "meta": {"rid": "r2"}}, now_ms=NOW)
    assert isinstance(got, dict) and got["requestId"] == "r2"
    none = normalize(custom, {"requestId": "ignored"}, now_ms=NOW)
    assert isinstance(none, dict) and none["requestId"] is None


TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"


def test_evlog_traceparent() -> None:
    header = f"00-{TRACE.upper()}-{SPAN}-01"
    for raw in (
        {"traceparent": header},
        {"headers": {"traceparent": header}},
        {"context": {"traceparent": header}},
        {"traceContext": {"traceparent": header}},
    ):
        out = normalize(EVLOG, raw, now_ms=NOW)
        assert isinstance(out, dict) and (out["traceId"], out["spanId"]) == (TRACE, SPAN)
    explicit = normalize(EVLOG, {"traceparent": header, "traceId": "t"}, now_ms=NOW)
    assert isinstance(explicit, dict) and (explicit["traceId"], explicit["spanId"]) == ("t", SPAN)
    zeros = normalize(EVLOG, {"traceparent": f"00-{'0' * 32}-{SPAN}-01"}, now_ms=NOW)
    assert isinstance(zeros, dict) and zeros["traceId"] is None
    bad = normalize(EVLOG, {"traceparent": "00-abc-def-01"}, now_ms=NOW)
    assert isinstance(bad, dict) and bad["traceId"] is None
    off = {"kind": "evlog", "correlation": {"parseTraceparent": False}}
    disabled = normalize(off, {"traceparent": header}, now_ms=NOW)
    assert isinstance(disabled, dict) and disabled["traceId"] is None


def test_evlog_trace_context_fields() -> None:
    profile = {"kind": "evlog", "correlation": {"traceContextFields": ["otel.traceId"]}}
    out = normalize(profile, {"otel": {"traceId": "t1", "spanId": "s1"}, "traceId": "t0"})
    assert isinstance(out, dict) and out["traceId"] == "t1"
    assert out["spanId"] is None  # otel.spanId is not a configured field
    fallback = normalize(profile, {"traceId": "t0"})
    assert isinstance(fallback, dict) and fallback["traceId"] == "t0"


@pytest.mark.parametrize("value", [[], "x", 3, None, [{"a": 1}]])
def test_evlog_rejects_non_objects(value: object) -> None:
    with pytest.raises(ProfileError, match="evlog record must be an object"):
        normalize(EVLOG, value)


def test_evlog_bad_sampling_fails_canonical_schema() -> None:
    out = normalize(EVLOG, {"sampling": "all"}, now_ms=NOW)
    with pytest.raises(schema.SchemaError, match="sampling"):
        schema.validate(installed(EVLOG), out)


# --------------------------------------------------------------------------- metrics normalize


def test_metrics_envelope() -> None:
    raw = metric(
        buckets={"1": 1, "2": 2, "8": 1, "16": 0, "32": -1},
        attributes={"route": "/a", "code": 200, "ok": True, "skip": None, "list": [1]},
        stream="orders",
        instance="node-1",
    )
    before = copy.deepcopy(raw)
    out = normalize(METRICS, raw)
    assert raw == before
    assert isinstance(out, dict)
    assert tuple(out) == METRICS_ENVELOPE_FIELDS
    assert out["apiVersion"] == METRICS_API_VERSION and out["kind"] == "interval"
    assert (out["metricKind"], out["temporality"]) == ("summary", "delta")
    assert (out["windowStart"], out["windowEnd"], out["intervalMs"]) == (1000, 11000, 10000)
    attrs = {"code": "200", "ok": "true", "route": "/a"}
    assert out["attributes"] == attrs and out["tags"] == attrs
    assert out["dimensionPairs"] == ["code=200", "ok=true", "route=/a"]
    assert out["dimensionKey"] == "code=200\x00ok=true\x00route=/a"
    assert out["seriesKey"] == "summary|delta|http.latency|ms|orders|node-1|" + out["dimensionKey"]
    assert (out["count"], out["sum"], out["min"], out["max"]) == (4, 10, 0, 0)
    assert out["avg"] == 2.5
    assert (out["p50"], out["p95"], out["p99"]) == (2, 8, 8)
    assert out["buckets"] == {"1": 1, "2": 2, "8": 1}
    assert out["summary"] == {
        "count": 4,
        "sum": 10,
        "min": 0,
        "max": 0,
        "histogram": out["buckets"],
    }
    reg = installed(METRICS)
    schema.validate(reg, out)
    assert schema.routing_key(reg, out) == out["seriesKey"]


def test_metrics_minimal_defaults() -> None:
    out = normalize(METRICS, metric())
    assert isinstance(out, dict)
    assert out["attributes"] == {} and out["dimensionPairs"] == []
    assert out["dimensionKey"] is None
    assert out["seriesKey"] == "summary|delta|http.latency|ms|||"
    assert (out["stream"], out["instance"]) == (None, None)
    assert (out["p50"], out["p95"], out["p99"]) == (0, 0, 0)
    assert out["buckets"] == {} and out["summary"]["histogram"] == {}


def test_metrics_explicit_values_win() -> None:
    raw = metric(
        kind="interval",
        metricKind="gauge",
        temporality="cumulative",
        intervalMs="10000",
        min=1,
        max=5,
        avg=9,
        p50=1,
        p95=2,
        p99=3,
        buckets={"4": 4},
        windowStart="1000.9",
    )
    out = normalize(METRICS, raw)
    assert isinstance(out, dict)
    assert (out["metricKind"], out["temporality"]) == ("gauge", "cumulative")
    assert out["windowStart"] == 1000 and out["intervalMs"] == 10000
    assert (out["min"], out["max"], out["avg"]) == (1, 5, 9)
    assert (out["p50"], out["p95"], out["p99"]) == (1, 2, 3)


def test_metrics_tags_fallback_and_attributes_precedence() -> None:
    tags = normalize(METRICS, metric(tags={"b": "2", "a": 1.0}))
    assert isinstance(tags, dict) and tags["attributes"] == {"a": "1", "b": "2"}
    both = normalize(METRICS, metric(tags={"b": "2"}, attributes={"c": "3"}))
    assert isinstance(both, dict) and both["attributes"] == {"c": "3"}
    junk = normalize(METRICS, metric(tags={"b": "2"}, attributes="x"))
    assert isinstance(junk, dict) and junk["attributes"] == {}


def test_metrics_summary_fallback_and_zero_count() -> None:
    raw = {k: v for k, v in metric().items() if k not in ("count", "sum")}
    raw["summary"] = {"count": 2, "sum": 7, "min": 3, "max": 4, "histogram": {"3": 1, "4": 1}}
    out = normalize(METRICS, raw)
    assert isinstance(out, dict)
    assert (out["count"], out["sum"], out["min"], out["max"]) == (2, 7, 3, 4)
    assert out["buckets"] == {"3": 1, "4": 1} and out["p99"] == 4 and out["p50"] == 3
    empty = normalize(METRICS, metric(count=0, sum=0, min=1, max=2))
    assert isinstance(empty, dict)
    assert (empty["min"], empty["max"], empty["avg"]) == (None, None, 0)
    schema.validate(installed(METRICS), empty)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([metric()], "metrics record must be an object"),
        (metric(kind="gauge"), "metrics record.kind must be interval"),
        (metric(metric=" "), "metrics record.metric must be a non-empty string"),
        (metric(metric=None), "metrics record.metric must be a non-empty string"),
        (metric(unit=5), "metrics record.unit must be a non-empty string"),
        (metric(windowStart=None), "windowStart and windowEnd must be integers"),
        (metric(windowEnd="soon"), "windowStart and windowEnd must be integers"),
        (metric(windowEnd=999), "windowEnd must be >= windowStart"),
        (metric(intervalMs=-1), "intervalMs must be >= 0"),
        (metric(count=None), "metrics interval requires count"),
        (metric(count=-1), "metrics interval requires count"),
        (metric(sum="x"), "metrics interval requires sum"),
    ],
)
def test_metrics_errors(raw: object, message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        normalize(METRICS, raw)


# --------------------------------------------------------------------------- state-protocol


@pytest.mark.parametrize(
    "record",
    [
        {
            "type": "public.posts",
            "key": "42",
            "value": {"id": 42},
            "headers": {"operation": "insert"},
        },
        {
            "type": "t",
            "key": "k",
            "value": None,
            "old_value": {"a": 1},
            "headers": {"operation": "update", "txid": "9", "timestamp": "2026-03-16T12:00:00Z"},
        },
        {"type": "t", "key": "k", "headers": {"operation": "delete"}},
        {"headers": {"control": "snapshot-start"}},
        {"headers": {"control": "reset", "offset": "-1"}},
        {"headers": {"control": "snapshot-end", "offset": encode_offset(0, 3)}},
    ],
)
def test_state_protocol_accepts_valid_records(record: dict[str, Any]) -> None:
    assert normalize(STATE, record) is record


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ([], "state-protocol records must be JSON objects"),
        ({"type": "t"}, "record.headers must be an object"),
        ({"headers": []}, "record.headers must be an object"),
        ({"headers": {}}, "headers must contain operation or control"),
        ({"headers": {"control": "reset", "operation": "insert"}}, "cannot mix control"),
        ({"headers": {"control": "pause"}}, "snapshot-start, snapshot-end, or reset"),
        ({"headers": {"control": "reset", "x": 1}}, "record.headers.x is not supported"),
        ({"key": "k", "headers": {"control": "reset"}}, "state-protocol record.key is not"),
        ({"headers": {"control": "reset", "offset": "42"}}, "valid stream offset string"),
        ({"headers": {"control": "reset", "offset": 5}}, "valid stream offset string"),
        ({"key": "k", "headers": {"operation": "delete"}}, "record.type must be a non-empty"),
        ({"type": "t", "key": "", "headers": {"operation": "delete"}}, "record.key must be"),
        ({"type": "t", "key": 1, "headers": {"operation": "delete"}}, "record.key must be"),
        ({"type": "t", "key": "k", "headers": {"operation": "upsert"}}, "insert, update, or"),
        ({"type": "t", "key": "k", "headers": {"operation": "insert"}}, "insert records must"),
        ({"type": "t", "key": "k", "headers": {"operation": "update"}}, "update records must"),
        ({"type": "t", "key": "k", "x": 1, "headers": {"operation": "delete"}}, "record.x is"),
        ({"type": "t", "key": "k", "headers": {"operation": "delete", "y": 1}}, "headers.y is"),
        ({"type": "t", "key": "k", "headers": {"operation": "delete", "txid": ""}}, "txid must"),
        (
            {"type": "t", "key": "k", "headers": {"operation": "delete", "timestamp": "today"}},
            "timestamp must be a valid RFC 3339",
        ),
        (
            {
                "type": "t",
                "key": "k",
                "headers": {"operation": "delete", "timestamp": "2026-13-01T00:00:00Z"},
            },
            "timestamp must be a valid RFC 3339",
        ),
        (
            {
                "type": "t",
                "key": "k",
                "headers": {"operation": "delete", "timestamp": "2026-01-01T00:00:00"},
            },
            "timestamp must be a valid RFC 3339",
        ),
    ],
)
def test_state_protocol_rejects_malformed_records(record: object, message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        normalize(STATE, record)


def test_state_protocol_timestamp_with_offset_and_fraction() -> None:
    headers = {"operation": "delete", "timestamp": "2026-03-16T12:00:00.123456789+05:30"}
    record = {"type": "t", "key": "k", "headers": headers}
    assert normalize(STATE, record) is record


# --------------------------------------------------------------------------- generic + keys


@pytest.mark.parametrize("value", [{"a": 1}, [1, 2], "text", 3, None])
def test_generic_is_identity(value: object) -> None:
    assert normalize(GENERIC, value) is value


def test_derived_routing_key() -> None:
    ev = normalize(EVLOG, {"requestId": "r", "traceId": "t"}, now_ms=NOW)
    assert derived_routing_key(EVLOG, ev) == "r"
    ev = normalize(EVLOG, {"traceContext": {"traceId": "t"}}, now_ms=NOW)
    assert derived_routing_key(EVLOG, ev) == "t"
    ev = normalize(EVLOG, {}, now_ms=NOW)
    assert derived_routing_key(EVLOG, ev) is None
    mv = normalize(METRICS, metric())
    assert isinstance(mv, dict)
    assert derived_routing_key(METRICS, mv) == mv["seriesKey"]
    assert derived_routing_key(METRICS, {"seriesKey": 5}) is None
    assert derived_routing_key(GENERIC, {"requestId": "r", "seriesKey": "s"}) is None
    assert derived_routing_key(STATE, {"requestId": "r", "key": "k"}) is None
    assert derived_routing_key(EVLOG, ["r"]) is None
