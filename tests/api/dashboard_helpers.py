"""Helpers for the /api/v2 dashboard API tests (docs/dashboard.md and the spec
docs/specs/dashboard-sse-contract.txt): item factories, an independent model of the
metrics (a brute-force recount of what a test posted, never the product's Tally), an SSE
frame reader with bounded waits, and a settable clock for the app's engine."""

from __future__ import annotations

import calendar
import contextlib
import json
import re
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
from starlette.testclient import TestClient
from test_tiering import services

from headwater.settings import DashboardSettings

V2 = "/api/v2"
SENTIMENT = f"{V2}/sentiment"
METRICS = f"{V2}/metrics"
STREAM = f"{V2}/stream"
STATUS = f"{V2}/stream/status"
CONFIGS = f"{V2}/configurations"

TS_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
MINUTE = 60_000
HOUR = 3_600_000

# Spec, "Event Schemas": the data fields of each event, in the spec's order.
HEARTBEAT_KEYS = ["timestamp", "connections", "uptime_seconds"]
METRICS_KEYS = [
    "total",
    "positive",
    "neutral",
    "negative",
    "by_tag",
    "rate_last_hour",
    "rate_last_24h",
    "timestamp",
]
ITEM_KEYS = ["ticker", "score", "label", "confidence", "source", "timestamp"]
SSE_HEADERS = {
    "content-type": "text/event-stream",
    "cache-control": "no-cache",
    "connection": "keep-alive",
    "x-accel-buffering": "no",
}


def fast(**overrides: Any) -> DashboardSettings:
    """Short intervals for tests: a heartbeat every 100 ms bounds every read."""
    cfg: dict[str, Any] = {
        "heartbeat_ms": 100,
        "metrics_min_interval_ms": 20,
        "metrics_interval_ms": 600_000,
        "poll_ms": 50,
        "config_poll_ms": 100,
    }
    cfg.update(overrides)
    return DashboardSettings(**cfg)


def item(
    ticker: str = "AAPL",
    label: str = "positive",
    score: float = 0.5,
    confidence: float = 0.9,
    source: str = "tiingo",
    timestamp: str | None = "2025-12-02T10:30:00.000Z",
    **extra: Any,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "ticker": ticker,
        "score": score,
        "label": label,
        "confidence": confidence,
        "source": source,
    }
    if timestamp is not None:
        out["timestamp"] = timestamp
    out.update(extra)
    return out


def canonical(it: dict[str, Any]) -> dict[str, Any]:
    """The canonical form of an item with an explicit `Z` millisecond timestamp (as the
    factory makes them), written out by hand: upper-case ticker, the six fields only."""
    assert TS_RE.match(it["timestamp"]), it
    return {
        "ticker": it["ticker"].upper(),
        "score": it["score"],
        "label": it["label"],
        "confidence": it["confidence"],
        "source": it["source"],
        "timestamp": it["timestamp"],
    }


def post_items(client: TestClient, body: Any, status: int = 201, **headers: str) -> dict[str, Any]:
    resp = client.post(SENTIMENT, json=body, headers=headers)
    assert resp.status_code == status, resp.text
    out: dict[str, Any] = resp.json()
    return out


def detail(resp: httpx.Response, status: int, message: str | None = None) -> dict[str, Any]:
    """The /api/v2 error shape: JSON {"detail": "<message>", ...}."""
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json"), resp.headers
    body: dict[str, Any] = resp.json()
    assert isinstance(body.get("detail"), str) and body["detail"], body
    if message is not None:
        assert body["detail"] == message, body
    return body


def user(uid: str) -> dict[str, str]:
    return {"X-User-ID": uid}


def create_config(
    client: TestClient, uid: str, tickers: list[str], name: str = "watchlist"
) -> dict[str, Any]:
    resp = client.post(CONFIGS, json={"name": name, "tickers": tickers}, headers=user(uid))
    assert resp.status_code == 201, resp.text
    out: dict[str, Any] = resp.json()
    return out


def read_log(client: TestClient, topic: str = "sentiment") -> list[dict[str, Any]]:
    """Every live record of the topic through the /v0 read route (diff)."""
    out: list[dict[str, Any]] = []
    cursor = 0
    while True:
        resp = client.post(f"/v0/topics/{topic}/diff", json={"from_seq": cursor, "limit": 1000})
        if resp.status_code == 404:
            return out
        assert resp.status_code == 200, resp.text
        d = resp.json()
        out.extend(d["records"])
        cursor = d["next_from_seq"]
        if d["caught_up"]:
            return out


def parse_iso_ms(text: str) -> int:
    assert TS_RE.match(text), text
    dt = datetime.strptime(text[:-5], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    return calendar.timegm(dt.timetuple()) * 1000 + int(text[-4:-1])


# --- the metrics model ------------------------------------------------------------------------
@dataclass
class Posted:
    """What a test appended: (canonical item or None for a non-item, append time ms)."""

    entries: list[tuple[dict[str, Any] | None, int]] = field(default_factory=list)

    def add(self, items: Iterable[dict[str, Any] | None], ts_ms: int) -> None:
        self.entries.extend((i, ts_ms) for i in items)


def recount(items: Iterable[tuple[dict[str, Any] | None, int]], now_ms: int) -> dict[str, Any]:
    """The metrics event's data by the docs' definitions, counted from scratch: labels and
    tickers (upper case) of the valid items; rates by append time, the current UTC minute and
    the 59 (1,439) minutes before it."""
    labels: Counter[str] = Counter()
    tickers: Counter[str] = Counter()
    total = hour = day = 0
    now_minute = now_ms // MINUTE
    for it, ts in items:
        if it is None:
            continue
        total += 1
        labels[it["label"]] += 1
        tickers[it["ticker"].upper()] += 1
        age = now_minute - ts // MINUTE
        if age <= 59:
            hour += 1
        if age <= 1439:
            day += 1
    ordered = sorted(tickers.items(), key=lambda kv: (-kv[1], kv[0]))
    return {
        "total": total,
        "positive": labels["positive"],
        "neutral": labels["neutral"],
        "negative": labels["negative"],
        "by_tag": dict(ordered),
        "rate_last_hour": hour,
        "rate_last_24h": day,
    }


def assert_metrics(data: dict[str, Any], expected: dict[str, Any]) -> None:
    assert list(data) == METRICS_KEYS, data
    assert TS_RE.match(data["timestamp"]), data
    got = {k: v for k, v in data.items() if k != "timestamp"}
    assert got == expected, (got, expected)
    assert list(got["by_tag"]) == list(expected["by_tag"]), "by_tag order"


# --- SSE ----------------------------------------------------------------------------------------
@dataclass
class Frame:
    event: str | None = None
    id: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    raw_data: str = ""
    retry: int | None = None
    lines: list[str] = field(default_factory=list)


class Sse:
    """Frames of an open /api/v2 stream. With a heartbeat every ~100 ms a frame arrives
    regularly, so every wait below is bounded by its deadline."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._lines: Iterator[str] = response.iter_lines()

    def frame(self) -> Frame:
        fr = Frame()
        for line in self._lines:
            if line == "":
                if fr.lines:
                    return fr
                continue
            fr.lines.append(line)
            key, sep, value = line.partition(": ")
            assert sep, f"unexpected SSE line {line!r}"
            if key == "event":
                assert fr.event is None, fr.lines
                fr.event = value
            elif key == "id":
                assert fr.id is None, fr.lines
                fr.id = value
            elif key == "data":
                assert not fr.raw_data, fr.lines  # one data line per event (compact JSON)
                fr.raw_data = value
                fr.data = json.loads(value)
            elif key == "retry":
                fr.retry = int(value)
            else:
                raise AssertionError(f"unexpected SSE field {line!r}")
        raise EOFError("stream ended")

    def event(self, timeout_s: float = 10.0) -> Frame:
        """The next event frame (checked against the spec's shapes)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            fr = self.frame()
            if fr.event is not None:
                check_event(fr)
                return fr
        raise AssertionError(f"no event within {timeout_s}s")

    def next_of(self, name: str, timeout_s: float = 10.0) -> Frame:
        """The next event named `name` (others skipped)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            fr = self.event(timeout_s)
            if fr.event == name:
                return fr
        raise AssertionError(f"no {name} event within {timeout_s}s")

    def updates_until(self, predicate: Any, timeout_s: float = 10.0) -> list[Frame]:
        """The sentiment_update frames up to and including the first matching `predicate`
        (heartbeats skipped)."""
        out: list[Frame] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            fr = self.event(timeout_s)
            if fr.event == "sentiment_update":
                out.append(fr)
                if predicate(fr.data):
                    return out
            else:
                assert fr.event == "heartbeat", fr
        raise AssertionError(f"no matching sentiment_update within {timeout_s}s: {out}")

    def heartbeat_after(self, wall_ms: int, timeout_s: float = 10.0) -> list[Frame]:
        """Read up to a heartbeat stamped after `wall_ms` (a sync point: the stream's loop
        ran after that moment); the events before it are returned."""
        out: list[Frame] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            fr = self.event(timeout_s)
            if fr.event == "heartbeat" and parse_iso_ms(fr.data["timestamp"]) > wall_ms:
                return out
            if fr.event != "heartbeat":
                out.append(fr)
        raise AssertionError(f"no heartbeat after {wall_ms} within {timeout_s}s")


def event_uuid(event_id: str | None) -> uuid.UUID:
    assert event_id is not None and event_id.startswith("evt_"), event_id
    return uuid.UUID(event_id[4:])


def check_event(fr: Frame) -> None:
    """Spec, 'Event Schemas' + 'SSE Format': an id `evt_<uuid>`, compact JSON data with
    exactly the event's fields and types."""
    assert fr.retry is None, fr.lines
    assert len(fr.lines) == 3 and fr.lines[0].startswith("event: "), fr.lines
    assert fr.lines[1].startswith("id: ") and fr.lines[2].startswith("data: "), fr.lines
    u = event_uuid(fr.id)
    assert fr.id == "evt_" + str(u), fr.id  # canonical lower-case hyphenated form
    compact = json.dumps(fr.data, separators=(",", ":"), ensure_ascii=False)
    assert fr.raw_data == compact, (fr.raw_data, compact)
    d = fr.data
    if fr.event == "heartbeat":
        assert list(d) == HEARTBEAT_KEYS, d
        assert TS_RE.match(d["timestamp"]), d
        for k in ("connections", "uptime_seconds"):
            assert type(d[k]) is int and d[k] >= 0, d
    elif fr.event == "metrics":
        assert list(d) == METRICS_KEYS, d
        assert TS_RE.match(d["timestamp"]), d
        for k in METRICS_KEYS:
            if k not in ("by_tag", "timestamp"):
                assert type(d[k]) is int and d[k] >= 0, d
        assert isinstance(d["by_tag"], dict), d
        assert all(type(v) is int and v > 0 for v in d["by_tag"].values()), d
        assert d["positive"] + d["neutral"] + d["negative"] == d["total"], d
        assert sum(d["by_tag"].values()) == d["total"], d
        assert d["rate_last_hour"] <= d["rate_last_24h"], d
    elif fr.event == "sentiment_update":
        assert list(d) == ITEM_KEYS, d
        assert isinstance(d["ticker"], str) and d["ticker"] == d["ticker"].upper(), d
        for k in ("score", "confidence"):
            assert type(d[k]) in (int, float), d
        assert d["label"] in ("positive", "neutral", "negative"), d
        assert isinstance(d["source"], str), d
        assert TS_RE.match(d["timestamp"]), d
    else:
        raise AssertionError(f"unexpected event {fr.event!r}")


def check_sse_headers(resp: httpx.Response) -> None:
    for name, value in SSE_HEADERS.items():
        assert resp.headers.get(name) == value, (name, resp.headers)


@contextlib.contextmanager
def open_stream(client: TestClient, url: str, **headers: str) -> Iterator[Sse]:
    """An open stream: 200 with the contract's headers, the first frame `retry: 3000`."""
    with client.stream("GET", url, headers={"Accept": "text/event-stream", **headers}) as resp:
        assert resp.status_code == 200, resp.read()
        check_sse_headers(resp)
        sse = Sse(resp)
        first = sse.frame()
        assert first.lines == ["retry: 3000"], first.lines
        yield sse


def refused(client: TestClient, url: str, **headers: str) -> httpx.Response:
    """A stream request that must fail before the stream starts (never hangs on a 200)."""
    with client.stream("GET", url, headers=headers) as resp:
        assert resp.status_code != 200, "the stream started"
        resp.read()
        return resp


def status(client: TestClient) -> dict[str, Any]:
    resp = client.get(STATUS)
    assert resp.status_code == 200, resp.text
    out: dict[str, Any] = resp.json()
    return out


def wait_connections(client: TestClient, n: int, timeout_s: float = 10.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        st = status(client)
        if st["connections"] == n:
            return st
        assert time.monotonic() < deadline, f"connections still {st} after {timeout_s}s"
        time.sleep(0.02)


def wall_ms() -> int:
    return int(time.time() * 1000)


# --- a settable clock -----------------------------------------------------------------------
class Clock:
    """Epoch ms the app's engine (append times) and dashboard (metrics timestamps, rates) read
    instead of the wall clock."""

    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def set_clock(client: TestClient, clock: Clock) -> None:
    svc = services(client)
    svc.engine.clock = clock
    svc.dashboard.clock = clock
    svc.dashboard.feed.clock = clock
