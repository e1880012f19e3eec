"""Durable Streams wire helpers: header/query parsing, SSE framing, cursors and ETags."""

from __future__ import annotations

import base64
import json
import re
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.durable.wire import (
    CURSOR_EPOCH_MS,
    CURSOR_INTERVAL_MS,
    MAX_PRODUCER_ID_LENGTH,
    MAX_SAFE_INTEGER,
    MAX_TTL_MS,
    Producer,
    WireError,
    etag_matches,
    is_json_type,
    media_type,
    parse_expires_at,
    parse_producer,
    parse_rfc3339,
    parse_timeout_ms,
    parse_timestamp,
    parse_ttl,
    slice_etag,
    sse_control_event,
    sse_data_event,
    sse_encoding,
    stream_cursor,
)

pytestmark = pytest.mark.unit

SEC = 1000
MIN = 60 * SEC
HOUR = 60 * MIN
DAY = 24 * HOUR


# --------------------------------------------------------------------------- SSE oracle


def parse_sse(raw: bytes) -> list[tuple[str, str]]:
    """Independent, WHATWG-style SSE parser: returns (event type, data) per dispatched block.

    Unlike browsers it also reports blocks whose data buffer is empty, so tests can see them.
    """
    events: list[tuple[str, str]] = []
    event_type, data, seen = "", "", False
    for line in re.split(r"\r\n|\r|\n", raw.decode("utf-8")):
        if line == "":
            if seen:
                events.append((event_type or "message", data.removesuffix("\n")))
            event_type, data, seen = "", "", False
            continue
        field, sep, value = line.partition(":")
        if not sep:
            value = ""
        value = value.removeprefix(" ")
        if field == "event":
            event_type, seen = value, True
        elif field == "data":
            data, seen = data + value + "\n", True
    return events


def data_lines(event: bytes) -> list[str]:
    text = event.decode("utf-8")
    return [ln for ln in text.split("\n") if ln.startswith("data:")]


def assert_single_data_event(event: bytes) -> None:
    text = event.decode("utf-8")
    assert text.startswith("event: data\n")
    assert text.endswith("\n\n")
    assert "\r" not in text
    body = text[: -len("\n\n")]
    # No blank line (event terminator) anywhere but the end, and only one event: line.
    assert "\n\n" not in body
    lines = body.split("\n")
    assert [ln for ln in lines if ln.startswith("event")] == ["event: data"]
    assert all(ln.startswith("data:") for ln in lines[1:])


def normalise_breaks(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


# --------------------------------------------------------------------------- Stream-TTL


@pytest.mark.parametrize(
    ("text", "expected_ms"),
    [
        ("0", 0),
        ("1", 1 * SEC),
        ("60", 60 * SEC),
        ("3600", 3600 * SEC),
        ("7200", 7200 * SEC),
        ("86400", DAY),
        ("24h", 24 * HOUR),
        ("30m", 30 * MIN),
        ("15s", 15 * SEC),
        ("500ms", 500),
        ("0ms", 0),
        ("0s", 0),
        ("7d", 7 * DAY),
        ("1d", DAY),
        ("3653d", 3653 * DAY),
        (str(3653 * 86400), 3653 * DAY),
    ],
)
def test_parse_ttl_accepts(text: str, expected_ms: int) -> None:
    assert parse_ttl(text) == expected_ms


@pytest.mark.parametrize(
    "text",
    [
        "00060",
        "+60",
        "60.5",
        "1e3",
        "abc",
        "-1",
        "",
        " ",
        " 60",
        "60 ",
        "6 0",
        "60\n",
        "0x10",
        "01",
        "00",
        "010s",
        "24H",
        "1y",
        "1w",
        "h",
        "ms",
        "1.5h",
        "10m30s",
        "1 h",
        "٣",  # Arabic-Indic digit three: \d would match it, the wire format must not
        "3654d",
        str(3653 * 86400 + 1),
        "9" * 19,
        "9" * 5000,
    ],
)
def test_parse_ttl_rejects(text: str) -> None:
    with pytest.raises(WireError, match="Stream-TTL"):
        parse_ttl(text)


def test_parse_ttl_max_boundary() -> None:
    assert parse_ttl(f"{MAX_TTL_MS}ms") == MAX_TTL_MS
    with pytest.raises(WireError, match="10 years"):
        parse_ttl(f"{MAX_TTL_MS + 1}ms")


def test_wire_error_is_value_error() -> None:
    assert issubclass(WireError, ValueError)
    with pytest.raises(ValueError):
        parse_ttl("abc")


@given(st.integers(min_value=0, max_value=MAX_TTL_MS // 1000))
def test_parse_ttl_plain_seconds_roundtrip(seconds: int) -> None:
    assert parse_ttl(str(seconds)) == seconds * 1000


# --------------------------------------------------------------------------- RFC 3339


def _exact_ms(dt: datetime) -> int:
    delta = dt - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


@pytest.mark.parametrize(
    ("text", "expected_ms"),
    [
        ("1970-01-01T00:00:00Z", 0),
        ("1970-01-01T00:00:00z", 0),
        ("1970-01-01t00:00:00Z", 0),
        ("1970-01-01T00:00:00+00:00", 0),
        ("1970-01-01T00:00:00-00:00", 0),
        ("1970-01-01T01:00:00+01:00", 0),
        ("1969-12-31T19:00:00-05:00", 0),
        ("1970-01-01T05:30:00+05:30", 0),
        ("2024-10-09T00:00:00Z", CURSOR_EPOCH_MS),
        ("2024-10-09T00:00:00.5Z", CURSOR_EPOCH_MS + 500),
        ("2024-10-09T00:00:00.05Z", CURSOR_EPOCH_MS + 50),
        ("2024-10-09T00:00:00.123Z", CURSOR_EPOCH_MS + 123),
        ("2024-10-09T00:00:00.1239Z", CURSOR_EPOCH_MS + 123),
        ("2024-10-09T00:00:00.123999999Z", CURSOR_EPOCH_MS + 123),
        ("2024-10-09T00:00:00.000000001Z", CURSOR_EPOCH_MS),
        ("2024-02-29T12:00:00Z", _exact_ms(datetime(2024, 2, 29, 12, tzinfo=UTC))),
        ("2000-01-01T00:00:00Z", 946_684_800_000),
        ("1969-12-31T23:59:59.999Z", -1),
        ("1969-12-31T23:59:59.9999Z", -1),  # truncation is floor, also before 1970
        ("0001-01-01T00:00:00Z", -62_135_596_800_000),
        ("9999-12-31T23:59:59.999Z", 253_402_300_799_999),
        ("9999-12-31T23:59:59-23:59", 253_402_300_799_000 + (23 * 60 + 59) * 60_000),
        ("0001-01-01T00:00:00+23:59", -62_135_596_800_000 - (23 * 60 + 59) * 60_000),
    ],
)
def test_parse_rfc3339_accepts(text: str, expected_ms: int) -> None:
    assert parse_rfc3339(text, "Stream-Expires-At") == expected_ms


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not-a-timestamp",
        "2024-10-09",
        "2024-10-09T00:00:00",  # no offset
        "2024-10-09T00:00Z",  # no seconds
        "2024-10-09 00:00:00Z",  # space separator
        "2024-10-09_00:00:00Z",
        " 2024-10-09T00:00:00Z",
        "2024-10-09T00:00:00Z ",
        "2024-10-09T00:00:00Z\n",
        "2024-10-09T00:00:00.Z",
        "2024-10-09T00:00:00.1234567890Z",  # 10 fractional digits
        "2024-10-09T00:00:00,5Z",
        "2024-10-09T00:00:00+0000",
        "2024-10-09T00:00:00+00",
        "2024-10-09T00:00:00+24:00",
        "2024-10-09T00:00:00+00:60",
        "2024-10-09T00:00:00UTC",
        "2024-10-09T00:00:00GMT",
        "2024-13-01T00:00:00Z",
        "2024-00-01T00:00:00Z",
        "2024-02-30T00:00:00Z",
        "2023-02-29T00:00:00Z",
        "2024-10-00T00:00:00Z",
        "2024-10-09T24:00:00Z",
        "2024-10-09T23:60:00Z",
        "2024-10-09T23:59:60Z",  # leap seconds rejected
        "0000-01-01T00:00:00Z",
        "24-10-09T00:00:00Z",
        "+2024-10-09T00:00:00Z",
        "2024-1-9T00:00:00Z",
        "2024-10-09T0:00:00Z",
        "2024-10-09T00:00:00.５Z",
        "1728432000000",
        "20241009T000000Z",
    ],
)
def test_parse_rfc3339_rejects(text: str) -> None:
    with pytest.raises(WireError, match="Since-Header"):
        parse_rfc3339(text, "Since-Header")


def test_parse_expires_at_names_header() -> None:
    assert parse_expires_at("2024-10-09T00:00:00Z") == CURSOR_EPOCH_MS
    assert parse_expires_at("2024-10-09T00:00:00+00:00") == CURSOR_EPOCH_MS
    with pytest.raises(WireError, match="Stream-Expires-At"):
        parse_expires_at("not-a-timestamp")


@given(
    st.datetimes(
        min_value=datetime(1, 1, 2),
        max_value=datetime(9999, 12, 30),
        timezones=st.just(UTC),
    ),
    st.integers(min_value=-(23 * 60 + 59), max_value=23 * 60 + 59),
)
def test_parse_rfc3339_matches_datetime(dt: datetime, offset_min: int) -> None:
    local = dt.astimezone(timezone(timedelta(minutes=offset_min)))
    text = local.isoformat(timespec="microseconds")
    assert parse_rfc3339(text, "x") == _exact_ms(dt)
    assert parse_rfc3339(local.isoformat(timespec="seconds"), "x") == _exact_ms(
        dt.replace(microsecond=0)
    )


# --------------------------------------------------------------------------- timestamps


@pytest.mark.parametrize(
    ("text", "expected_ms"),
    [
        ("0", 0),
        ("999999", 0),
        ("1000000", 1),
        ("1728432000000000000", CURSOR_EPOCH_MS),
        ("1728432000123456789", CURSOR_EPOCH_MS + 123),
        ("00000000000000000001", 0),  # 20 digits
        ("99999999999999999999", 99_999_999_999_999),
        ("2024-10-09T00:00:00Z", CURSOR_EPOCH_MS),
        ("2024-10-09T00:00:00.123456789Z", CURSOR_EPOCH_MS + 123),
        ("2024-10-09T02:00:00.123456789+02:00", CURSOR_EPOCH_MS + 123),
    ],
)
def test_parse_timestamp_accepts(text: str, expected_ms: int) -> None:
    assert parse_timestamp(text, "Stream-Timestamp") == expected_ms


@pytest.mark.parametrize(
    "text",
    [
        "",
        "-1",
        "+1",
        "1e9",
        "1.5",
        "123456789012345678901",  # 21 digits
        " 1",
        "1 ",
        "0x10",
        "٣",
        "2024-10-09",
        "2024-10-09T00:00:00",
        "yesterday",
    ],
)
@pytest.mark.parametrize("what", ["Stream-Timestamp", "since"])
def test_parse_timestamp_rejects(text: str, what: str) -> None:
    with pytest.raises(WireError, match=what):
        parse_timestamp(text, what)


@given(st.integers(min_value=0, max_value=10**20 - 1))  # every 1-20 digit run
def test_unix_nanos_and_rfc3339nano_agree(nanos: int) -> None:
    seconds, frac = divmod(nanos, 1_000_000_000)
    stamp = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=seconds)
    nano_text = stamp.strftime("%Y-%m-%dT%H:%M:%S") + f".{frac:09d}Z"
    assert parse_timestamp(str(nanos), "since") == parse_timestamp(nano_text, "since")
    assert parse_timestamp(str(nanos), "since") == nanos // 1_000_000


# --------------------------------------------------------------------------- timeout=


@pytest.mark.parametrize(
    ("text", "expected_ms"),
    [
        ("0", 0),
        ("5", 5 * SEC),
        ("30", 30 * SEC),
        ("5s", 5 * SEC),
        ("500ms", 500),
        ("1m", MIN),
        ("0ms", 0),
        ("0s", 0),
        ("05s", 5 * SEC),  # Go's time.ParseDuration tolerates leading zeros
        ("0" * 100 + "1", SEC),
        ("20000ms", 20 * SEC),
    ],
)
def test_parse_timeout_accepts(text: str, expected_ms: int) -> None:
    assert parse_timeout_ms(text) == expected_ms


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "-1",
        "-5s",
        "+5s",
        "1.5s",
        "5S",
        "5 s",
        " 5s",
        "5s ",
        "1h",
        "1d",
        "1m30s",
        "5us",
        "5ns",
        "s",
        "ms",
        "abc",
        "1e3",
        "0x10",
        "٣s",
        "9" * 19,
        "9" * 5000,
    ],
)
def test_parse_timeout_rejects(text: str) -> None:
    with pytest.raises(WireError, match="timeout"):
        parse_timeout_ms(text)


# --------------------------------------------------------------------------- producers


def producer_headers(pid: str = "p1", epoch: str = "0", seq: str = "0") -> dict[str, str]:
    return {"Producer-Id": pid, "Producer-Epoch": epoch, "Producer-Seq": seq}


def test_parse_producer_absent() -> None:
    assert parse_producer({}) is None
    assert parse_producer({"Content-Type": "text/plain", "Stream-Seq": "1"}) is None


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        (producer_headers(), Producer("p1", 0, 0)),
        (producer_headers("ttl-close-producer", "0", "0"), Producer("ttl-close-producer", 0, 0)),
        (producer_headers("a", "2", "17"), Producer("a", 2, 17)),
        (producer_headers("x" * MAX_PRODUCER_ID_LENGTH), Producer("x" * 256, 0, 0)),
        (
            producer_headers("p", str(MAX_SAFE_INTEGER), str(MAX_SAFE_INTEGER)),
            Producer("p", MAX_SAFE_INTEGER, MAX_SAFE_INTEGER),
        ),
        (producer_headers("p", "007", "0000"), Producer("p", 7, 0)),
        (
            {"producer-id": "p", "producer-epoch": "1", "producer-seq": "2"},
            Producer("p", 1, 2),
        ),
        (
            {"PRODUCER-ID": "p", "Producer-EPOCH": "1", "pRoDuCeR-sEq": "2", "other": "x"},
            Producer("p", 1, 2),
        ),
        (producer_headers("with space / and:colon"), Producer("with space / and:colon", 0, 0)),
    ],
)
def test_parse_producer_accepts(headers: dict[str, str], expected: Producer) -> None:
    assert parse_producer(headers) == expected


def test_parse_producer_starlette_headers() -> None:
    from starlette.datastructures import Headers

    raw = [(b"producer-id", b"p"), (b"producer-epoch", b"3"), (b"producer-seq", b"4")]
    assert parse_producer(Headers(raw=raw)) == Producer("p", 3, 4)
    with pytest.raises(WireError):
        parse_producer(Headers(headers={"Producer-Id": "q"}))


@pytest.mark.parametrize(
    "headers",
    [
        {"Producer-Id": "p"},
        {"Producer-Epoch": "0"},
        {"Producer-Seq": "0"},
        {"Producer-Id": "p", "Producer-Epoch": "0"},
        {"Producer-Id": "p", "Producer-Seq": "0"},
        {"Producer-Epoch": "0", "Producer-Seq": "0"},
    ],
)
def test_parse_producer_partial(headers: dict[str, str]) -> None:
    with pytest.raises(WireError, match="together"):
        parse_producer(headers)


@pytest.mark.parametrize(
    ("headers", "names"),
    [
        (producer_headers(pid=""), "Producer-Id"),
        (producer_headers(pid="x" * (MAX_PRODUCER_ID_LENGTH + 1)), "Producer-Id"),
        (producer_headers(epoch="1abc"), "Producer-Epoch"),
        (producer_headers(epoch="0xyz"), "Producer-Epoch"),
        (producer_headers(epoch="1e3"), "Producer-Epoch"),
        (producer_headers(epoch="-1"), "Producer-Epoch"),
        (producer_headers(epoch="+1"), "Producer-Epoch"),
        (producer_headers(epoch=""), "Producer-Epoch"),
        (producer_headers(epoch=" 1"), "Producer-Epoch"),
        (producer_headers(epoch="1.0"), "Producer-Epoch"),
        (producer_headers(epoch="٣"), "Producer-Epoch"),
        (producer_headers(epoch=str(MAX_SAFE_INTEGER + 1)), "Producer-Epoch"),
        (producer_headers(epoch="9" * 5000), "Producer-Epoch"),
        (producer_headers(seq="1abc"), "Producer-Seq"),
        (producer_headers(seq="0xyz"), "Producer-Seq"),
        (producer_headers(seq="1e3"), "Producer-Seq"),
        (producer_headers(seq="-1"), "Producer-Seq"),
        (producer_headers(seq="+1"), "Producer-Seq"),
        (producer_headers(seq=""), "Producer-Seq"),
        (producer_headers(seq="1\n"), "Producer-Seq"),
        (producer_headers(seq=str(2**64)), "Producer-Seq"),
        (producer_headers(seq="0" * 30 + str(MAX_SAFE_INTEGER + 1)), "Producer-Seq"),
    ],
)
def test_parse_producer_rejects(headers: dict[str, str], names: str) -> None:
    with pytest.raises(WireError, match=names):
        parse_producer(headers)


def test_producer_is_frozen() -> None:
    producer = Producer("p", 0, 0)
    with pytest.raises(AttributeError):
        producer.seq = 1  # type: ignore[misc]


# --------------------------------------------------------------------------- content types


@pytest.mark.parametrize(
    ("content_type", "expected"),
    [
        (None, ""),
        ("", ""),
        ("   ", ""),
        ("text/plain", "text/plain"),
        ("TEXT/PLAIN", "text/plain"),
        ("Application/JSON; charset=utf-8", "application/json"),
        ("  application/json ;charset=utf-8", "application/json"),
        ("application/octet-stream", "application/octet-stream"),
        ("text/plain;", "text/plain"),
        ("image/PNG; a=b; c=d", "image/png"),
    ],
)
def test_media_type(content_type: str | None, expected: str) -> None:
    assert media_type(content_type) == expected


@pytest.mark.parametrize(
    ("content_type", "expected"),
    [
        ("application/json", True),
        ("APPLICATION/JSON", True),
        ("application/json; charset=utf-8", True),
        (" application/json ", True),
        ("application/jsonx", False),
        ("application/ld+json", False),
        ("text/json", False),
        ("text/plain", False),
        ("", False),
        (None, False),
    ],
)
def test_is_json_type(content_type: str | None, expected: bool) -> None:
    assert is_json_type(content_type) is expected


@pytest.mark.parametrize(
    ("content_type", "expected"),
    [
        ("application/json", "json"),
        ("Application/JSON; charset=utf-8", "json"),
        ("text/plain", "text"),
        ("TEXT/PLAIN; charset=utf-8", "text"),
        ("text/html", "text"),
        ("text/csv", "text"),
        ("application/octet-stream", "base64"),
        ("application/x-protobuf", "base64"),
        ("image/png", "base64"),
        ("application/ld+json", "base64"),
        ("texts/plain", "base64"),
        ("", "base64"),
    ],
)
def test_sse_encoding(content_type: str, expected: str) -> None:
    assert sse_encoding(content_type) == expected


# --------------------------------------------------------------------------- cursors

NOW = CURSOR_EPOCH_MS + 3_343_336 * CURSOR_INTERVAL_MS + 1234
NOW_INTERVAL = 3_343_336


@pytest.mark.parametrize(
    ("now_ms", "expected"),
    [
        (CURSOR_EPOCH_MS, "0"),
        (CURSOR_EPOCH_MS + CURSOR_INTERVAL_MS - 1, "0"),
        (CURSOR_EPOCH_MS + CURSOR_INTERVAL_MS, "1"),
        (NOW, str(NOW_INTERVAL)),
        (CURSOR_EPOCH_MS - 1, "0"),  # clamped: never negative
        (0, "0"),
    ],
)
def test_stream_cursor_interval(now_ms: int, expected: str) -> None:
    assert stream_cursor(now_ms, None) == expected


def test_cursor_epoch_constant() -> None:
    assert datetime(2024, 10, 9, tzinfo=UTC).timestamp() * 1000 == CURSOR_EPOCH_MS


@pytest.mark.parametrize(
    "client",
    [None, "", "abc", "-5", "+5", "1.5", " 1", "1e9", "٣", "0", str(NOW_INTERVAL - 1), "9" * 33],
)
def test_stream_cursor_ignores_stale_or_bad_client(client: str | None) -> None:
    assert stream_cursor(NOW, client, rand=lambda: 0.5) == str(NOW_INTERVAL)


@pytest.mark.parametrize(
    ("client", "rand_value", "expected"),
    [
        (str(NOW_INTERVAL), 0.0, NOW_INTERVAL + 1),  # ceil(0) = 0 -> at least 1
        (str(NOW_INTERVAL), 1e-12, NOW_INTERVAL + 1),
        (str(NOW_INTERVAL), 0.5, NOW_INTERVAL + 90),
        (str(NOW_INTERVAL), 0.999999, NOW_INTERVAL + 180),
        (str(NOW_INTERVAL + 1000), 0.0, NOW_INTERVAL + 1001),
        ("0" + str(NOW_INTERVAL), 0.0, NOW_INTERVAL + 1),
        ("9" * 32, 0.0, int("9" * 32) + 1),
    ],
)
def test_stream_cursor_bumps_client(client: str, rand_value: float, expected: int) -> None:
    assert stream_cursor(NOW, client, rand=lambda: rand_value) == str(expected)


@given(
    now=st.integers(min_value=CURSOR_EPOCH_MS, max_value=CURSOR_EPOCH_MS + 10**13),
    ahead=st.integers(min_value=0, max_value=10**6),
    rand_value=st.floats(min_value=0.0, max_value=1.0, exclude_max=True),
)
def test_stream_cursor_strictly_increases(now: int, ahead: int, rand_value: float) -> None:
    first = stream_cursor(now, None)
    assert re.fullmatch(r"[0-9]+", first)
    client = int(first) + ahead
    second = stream_cursor(now, str(client), rand=lambda: rand_value)
    assert re.fullmatch(r"[0-9]+", second)
    assert client < int(second) <= client + 180


def test_stream_cursor_default_rand() -> None:
    cursor = stream_cursor(NOW, str(NOW_INTERVAL))
    assert NOW_INTERVAL < int(cursor) <= NOW_INTERVAL + 180


# --------------------------------------------------------------------------- SSE data events


@pytest.mark.parametrize(
    ("payload", "encoding", "expected"),
    [
        (b"hello", "text", b"event: data\ndata:hello\n\n"),
        (b"line1\nline2", "text", b"event: data\ndata:line1\ndata:line2\n\n"),
        (b"a\r\nb\rc\nd", "text", b"event: data\ndata:a\ndata:b\ndata:c\ndata:d\n\n"),
        (b"trailing\n", "text", b"event: data\ndata:trailing\ndata:\n\n"),
        (b"", "text", b"event: data\ndata:\n\n"),
        (b" lead", "text", b"event: data\ndata:  lead\n\n"),
        (b"x\n y", "text", b"event: data\ndata:x\ndata:  y\n\n"),
        (b"data: x", "text", b"event: data\ndata:data: x\n\n"),
        ("héllo €".encode(), "text", "event: data\ndata:héllo €\n\n".encode()),
        (b"bad \xff byte", "text", "event: data\ndata:bad \ufffd byte\n\n".encode()),
        (b"a\x85b\x0bc", "text", "event: data\ndata:a\ufffdb\x0bc\n\n".encode()),
        ("a\u2028b".encode(), "text", "event: data\ndata:a\u2028b\n\n".encode()),
        (
            b'[{"id":1,"message":"hello"}]',
            "json",
            b'event: data\ndata:[{"id":1,"message":"hello"}]\n\n',
        ),
        (b'["a\\nb"]', "json", b'event: data\ndata:["a\\nb"]\n\n'),
        (b"[1,\n2]", "json", b"event: data\ndata:[1,\ndata:2]\n\n"),
        (b"Hello", "base64", b"event: data\ndata:SGVsbG8=\n\n"),
        (b"", "base64", b"event: data\ndata:\n\n"),
        (b"\x00\n\r\xff\xfe", "base64", b"event: data\ndata:AAoN//4=\n\n"),
    ],
)
def test_sse_data_event_exact(payload: bytes, encoding: str, expected: bytes) -> None:
    assert sse_data_event(payload, encoding) == expected  # type: ignore[arg-type]


INJECTIONS = [
    'safe content\r\n\r\nevent: control\r\ndata: {"injected":true}\r\n\r\nmore',
    "start\n\nevent: data\ndata: fake-event\n\nend",
    'start\r\revent: control\rdata: {"cr_injected":true}\r\rend',
    "\n\n\n",
    "\r\r\n\n\r",
    "event: control\ndata:{}\n\n",
]


@pytest.mark.parametrize("text", INJECTIONS)
def test_sse_text_injection_stays_in_one_event(text: str) -> None:
    event = sse_data_event(text.encode(), "text")
    assert_single_data_event(event)
    control = sse_control_event({"streamNextOffset": "0001", "upToDate": True})
    stream = event + control
    events = parse_sse(stream)
    assert [kind for kind, _ in events] == ["data", "control"]
    assert events[0][1] == normalise_breaks(text)
    assert json.loads(events[1][1]) == {"streamNextOffset": "0001", "upToDate": True}
    # Conformance-style checks on the raw text: exactly one of each event type.
    raw = stream.decode()
    assert len(re.findall(r"^event: data$", raw, flags=re.MULTILINE)) == 1
    assert len(re.findall(r"^event: control$", raw, flags=re.MULTILINE)) == 1
    assert len(re.findall(r"^event:", raw, flags=re.MULTILINE)) == 2
    # The pairing tests split the raw stream on blank lines.
    assert raw.split("\n\n") == [event.decode()[:-2], control.decode()[:-2], ""]


def test_sse_text_injection_literal_text_present() -> None:
    text = 'safe content\r\n\r\nevent: control\r\ndata: {"injected":true}'
    raw = sse_data_event(text.encode(), "text").decode()
    assert "data:safe content\n" in raw
    assert "data:event: control\n" in raw
    assert 'data:data: {"injected":true}\n' in raw


@settings(max_examples=300)
@given(st.text())
def test_sse_text_framing_property(text: str) -> None:
    event = sse_data_event(text.encode("utf-8"), "text")
    assert_single_data_event(event)
    lines = event.decode("utf-8").split("\n")
    assert sum(1 for ln in lines if ln.startswith("event:")) == 1
    values = [ln.removeprefix("data:").removeprefix(" ") for ln in data_lines(event)]
    assert "\n".join(values) == normalise_breaks(text)
    assert parse_sse(event) == [("data", normalise_breaks(text))]


@given(st.lists(st.sampled_from(["a", " ", "\r", "\n", "\r\n", ":", "é"])).map("".join))
def test_sse_text_framing_property_break_heavy(text: str) -> None:
    event = sse_data_event(text.encode("utf-8"), "text")
    assert_single_data_event(event)
    assert parse_sse(event) == [("data", normalise_breaks(text))]


@given(st.binary())
def test_sse_text_framing_arbitrary_bytes(payload: bytes) -> None:
    event = sse_data_event(payload, "text")
    assert_single_data_event(event)
    expected = normalise_breaks(payload.decode("utf-8", errors="replace"))
    assert parse_sse(event) == [("data", expected)]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=10,
)


@given(st.lists(json_values, max_size=5), st.sampled_from([None, 0, 2]))
def test_sse_json_framing_roundtrip(messages: list[object], indent: int | None) -> None:
    payload = json.dumps(messages, indent=indent, ensure_ascii=False).encode()
    event = sse_data_event(payload, "json")
    assert_single_data_event(event)
    (kind, data), *rest = parse_sse(event)
    assert (kind, rest) == ("data", [])
    assert json.loads(data) == messages
    if indent is None:
        assert data_lines(event) == ["data:" + payload.decode()]


@given(st.binary(max_size=4096))
def test_sse_base64_roundtrip(payload: bytes) -> None:
    event = sse_data_event(payload, "base64")
    assert_single_data_event(event)
    (line,) = data_lines(event)
    encoded = line.removeprefix("data:")
    assert len(encoded) % 4 == 0
    assert base64.b64decode(encoded, validate=True) == payload


def test_sse_base64_one_kib() -> None:
    payload = bytes(range(256)) * 4
    (line,) = data_lines(sse_data_event(payload, "base64"))
    assert base64.b64decode(line.removeprefix("data:"), validate=True) == payload


# --------------------------------------------------------------------------- SSE control events

CONTROL_RE = re.compile(r"event: control\s*\ndata:({[^}]+})")


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (
            {"streamNextOffset": "0000000000000000_0000000000000005", "streamCursor": "3343336"},
            b'event: control\ndata:{"streamNextOffset":"0000000000000000_0000000000000005",'
            b'"streamCursor":"3343336"}\n\n',
        ),
        (
            {"streamNextOffset": "A", "upToDate": True},
            b'event: control\ndata:{"streamNextOffset":"A","upToDate":true}\n\n',
        ),
        (
            {"streamNextOffset": "A", "streamClosed": True, "n": 1, "x": None},
            b'event: control\ndata:{"streamNextOffset":"A","streamClosed":true,"n":1,"x":null}\n\n',
        ),
        ({}, b"event: control\ndata:{}\n\n"),
        (
            {"s": "line\nbreak\r\u2028é"},
            b'event: control\ndata:{"s":"line\\nbreak\\r\\u2028\\u00e9"}\n\n',
        ),
    ],
)
def test_sse_control_event_exact(fields: dict[str, object], expected: bytes) -> None:
    assert sse_control_event(fields) == expected


def test_sse_control_event_matches_suite_regex() -> None:
    fields = {"streamNextOffset": "01J", "streamCursor": "3343336", "upToDate": True}
    raw = (sse_data_event(b"x", "text") + sse_control_event(fields)).decode()
    match = CONTROL_RE.search(raw)
    assert match is not None
    assert json.loads(match.group(1)) == fields
    assert parse_sse(raw.encode()) == [("data", "x"), ("control", match.group(1))]


def test_sse_control_event_rejects_nested_objects() -> None:
    with pytest.raises(TypeError, match="must not be an object"):
        sse_control_event({"nested": {"a": 1}})


@given(
    st.dictionaries(
        st.text(max_size=10),
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        max_size=5,
    )
)
def test_sse_control_event_roundtrip(fields: dict[str, object]) -> None:
    event = sse_control_event(fields)
    assert event.isascii()
    assert event.startswith(b"event: control\ndata:{")
    assert event.endswith(b"\n\n")
    assert event.count(b"\n") == 3
    assert parse_sse(event) == [("control", event[len("event: control\ndata:") : -2].decode())]
    assert json.loads(event[len("event: control\ndata:") : -2]) == fields


# --------------------------------------------------------------------------- ETags

QUOTED_STRING_RE = re.compile(r'W/"[\x21\x23-\x5b\x5d-\x7e]*"')


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ("0001", "0002", None, "json", None, False),
            'W/"slice:0001:0002:key=:fmt=json:filter="',
        ),
        (
            ("-1", "0002", "user-1", "raw", "a>b", True),
            'W/"slice:-1:0002:key=user-1:fmt=raw:filter=a>b:closed"',
        ),
        (
            ("s", "n", "", "fmt", "", False),
            'W/"slice:s:n:key=:fmt=fmt:filter="',
        ),
        (
            ("s", "n", 'we"ird\\key', "json", 'x="1"', False),
            'W/"slice:s:n:key=we%22ird%5Ckey:fmt=json:filter=x=%221%22"',
        ),
        (
            ("s", "n", "a:b,c d%", "json", "é\n\x7f", False),
            'W/"slice:s:n:key=a%3Ab%2Cc%20d%25:fmt=json:filter=%C3%A9%0A%7F"',
        ),
    ],
)
def test_slice_etag_exact(
    args: tuple[str, str, str | None, str, str | None, bool], expected: str
) -> None:
    assert slice_etag(*args) == expected


@given(
    st.text(),
    st.text(),
    st.none() | st.text(),
    st.text(),
    st.none() | st.text(),
    st.booleans(),
)
def test_slice_etag_is_valid_quoted_string(
    start: str, next_: str, key: str | None, fmt: str, filter_: str | None, closed: bool
) -> None:
    etag = slice_etag(start, next_, key, fmt, filter_, closed)
    assert QUOTED_STRING_RE.fullmatch(etag)
    assert "," not in etag
    assert etag.endswith(':closed"') is closed
    assert etag_matches(etag, etag)


@given(
    st.tuples(st.text(max_size=8), st.none() | st.text(max_size=8)),
    st.tuples(st.text(max_size=8), st.none() | st.text(max_size=8)),
)
def test_slice_etag_distinguishes_key_and_filter(
    a: tuple[str, str | None], b: tuple[str, str | None]
) -> None:
    def norm(pair: tuple[str, str | None]) -> tuple[str, str]:
        return pair[0], pair[1] or ""

    etag_a = slice_etag("1", "2", a[0], "json", a[1], False)
    etag_b = slice_etag("1", "2", b[0], "json", b[1], False)
    assert (etag_a == etag_b) == (norm(a) == norm(b))


def test_slice_etag_changes_with_offsets_and_closed() -> None:
    base = slice_etag("1", "2", None, "json", None, False)
    assert slice_etag("1", "3", None, "json", None, False) != base
    assert slice_etag("0", "2", None, "json", None, False) != base
    assert slice_etag("1", "2", None, "raw", None, False) != base
    assert slice_etag("1", "2", None, "json", None, True) != base
    assert slice_etag("1", "2", "", "json", "", False) == base


TAG = 'W/"slice:1:2:key=:fmt=json:filter="'


@pytest.mark.parametrize(
    ("if_none_match", "etag", "expected"),
    [
        (None, TAG, False),
        ("", TAG, False),
        ("  ", TAG, False),
        (TAG, TAG, True),
        ("*", TAG, True),
        (" * ", TAG, True),
        ('"slice:1:2:key=:fmt=json:filter="', TAG, True),  # missing W/ in the request
        (TAG, '"slice:1:2:key=:fmt=json:filter="', True),  # missing W/ on our side
        ("w/" + TAG[2:], TAG, True),
        ('"wrong-etag"', TAG, False),
        ('"a", ' + TAG, TAG, True),
        (TAG + ' , "a"', TAG, True),
        ('"a","b"', TAG, False),
        ('"a",*', TAG, True),
        ('W/"x,y", "z"', 'W/"x,y"', True),  # comma inside a quoted tag
        ('W/"x,y", "z"', 'W/"x"', False),
        ('W/"x,y", "z"', '"z"', True),
        ('"x', 'W/"x"', False),  # unterminated
        ("abc", '"abc"', True),  # bare token tolerated
        ('"1"', '"12"', False),
        ('"12"', '"1"', False),
        (',,,"a",,', '"a"', True),
        ('W/""', '""', True),
    ],
)
def test_etag_matches(if_none_match: str | None, etag: str, expected: bool) -> None:
    assert etag_matches(if_none_match, etag) is expected


def test_etag_changes_after_append_no_longer_matches() -> None:
    old = slice_etag("-1", "0001", None, "raw", None, False)
    new = slice_etag("-1", "0002", None, "raw", None, False)
    assert etag_matches(old, old)
    assert not etag_matches(old, new)
    assert etag_matches(f"{old}, {new}", new)
