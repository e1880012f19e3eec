"""The dashboard feed (/api/v2, docs/dashboard.md) across OS processes (stand-ins for Lambda
instances), with browser-like SSE clients.

- Two server processes, 50 metrics clients (25 on each) on `/api/v2/stream` and a few
  configuration-stream clients, while 1,000 sentiment items are ingested through both
  processes at once, partly with `POST /api/v2/sentiment` (array, `{"items"}` and single
  object bodies, one retried with its Idempotency-Key) and partly with the plain `/v0`
  append (with a few records that are not valid items, stored but never counted).
  Afterwards every metrics client's last `metrics` event equals a recount computed here
  from the records read back through `/v0` (the doc's definition, rates relative to the
  event's own timestamp), and every configuration client received exactly the items of its
  tickers, in log order, without a gap or a duplicate.
- One configuration is edited mid-run through the other process (the poll path): from
  then on its stream also carries the new ticker's items.
- One configuration client leaves mid-ingest and reconnects to the other process with the
  Last-Event-ID it last saw: it ends with exactly the full sequence.
- The per-instance cap: with HEADWATER_DASHBOARD_MAX_CONNECTIONS=2 a third stream is 503
  with Retry-After: 30 and the contract's body; once one closes a new one is accepted.

No timing assertions: waits are bounded, only states are checked."""

from __future__ import annotations

import json
import random
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

TOPIC = "sentiment"
TICKERS = ["AAPL", "MSFT", "GOOGL", "TSLA", "NVDA", "AMZN", "META", "BRK.B"]
LABELS = ("positive", "neutral", "negative")
ITEMS = 1000
METRICS_CLIENTS_PER_SERVER = 25
WRITERS = 4
DASH_ENV = {
    "HEADWATER_DASHBOARD_HEARTBEAT_MS": "500",
    "HEADWATER_DASHBOARD_METRICS_MIN_INTERVAL_MS": "200",
    "HEADWATER_DASHBOARD_METRICS_INTERVAL_MS": "5000",
    "HEADWATER_DASHBOARD_POLL_MS": "100",
    "HEADWATER_DASHBOARD_CONFIG_POLL_MS": "200",
}
SSE_HEADERS = {
    "content-type": "text/event-stream",
    "cache-control": "no-cache",
    "connection": "keep-alive",
    "x-accel-buffering": "no",
}
TS_RE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
MINUTE_MS = 60_000


# --- the doc's rules, written out here (not the product's functions) -----------------------
def iso_ms(ms: int) -> str:
    dt = datetime.fromtimestamp(ms // 1000, UTC)
    return f"{dt:%Y-%m-%dT%H:%M:%S}.{ms % 1000:03d}Z"


def ms_of(text: str) -> int:
    dt = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    return (dt - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)


def canonical(data: Any, ts_ms: int) -> dict[str, Any] | None:
    """The item a record's data holds (canonical form), or None when it is not one."""
    if not isinstance(data, dict):
        return None
    ticker = data.get("ticker")
    if not isinstance(ticker, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,15}", ticker):
        return None

    def number(name: str, lo: float, hi: float) -> bool:
        v = data.get(name)
        return not isinstance(v, bool) and isinstance(v, int | float) and lo <= v <= hi

    if not number("score", -1, 1) or not number("confidence", 0, 1):
        return None
    if data.get("label") not in LABELS:
        return None
    source = data.get("source")
    if not isinstance(source, str) or not source.strip() or len(source) > 64:
        return None
    ts = data.get("timestamp")
    return {
        "ticker": ticker.upper(),
        "score": data["score"],
        "label": data["label"],
        "confidence": data["confidence"],
        "source": source,
        "timestamp": iso_ms(ts_ms if ts is None else ms_of(ts)),
    }


def seq_of(event_id: str) -> int:
    """The log seq an event id carries (docs: `evt_` + a UUIDv8 whose top 48 bits are it)."""
    assert event_id.startswith("evt_"), event_id
    value = uuid.UUID(event_id[4:])
    assert value.version == 8, event_id
    return value.int >> 80


@dataclass(frozen=True)
class Logged:
    seq: int
    ts: int
    item: dict[str, Any]


def read_back(url: str) -> tuple[list[Logged], int]:
    """Every item of the topic in log order, and the number of records that are not items."""
    items: list[Logged] = []
    others = 0
    cursor = 0
    with httpx.Client(timeout=60) as http:
        while True:
            r = http.post(f"{url}/v0/topics/{TOPIC}/diff", json={"from_seq": cursor, "limit": 1000})
            assert r.status_code == 200, r.text
            body = r.json()
            for rec in body["records"]:
                item = canonical(rec.get("data"), rec["$ts"])
                if item is None:
                    others += 1
                else:
                    items.append(Logged(rec["$seq"], rec["$ts"], item))
            cursor = body["next_from_seq"]
            if body["caught_up"]:
                return items, others


def recount(items: list[Logged], at_ms: int) -> dict[str, Any]:
    """The metrics event's data at `at_ms` by the doc's definition (timestamp excluded)."""
    by_tag: dict[str, int] = {}
    labels = dict.fromkeys(LABELS, 0)
    for x in items:
        by_tag[x.item["ticker"]] = by_tag.get(x.item["ticker"], 0) + 1
        labels[x.item["label"]] += 1
    minute = at_ms - at_ms % MINUTE_MS

    def rate(minutes: int) -> int:
        since = minute - (minutes - 1) * MINUTE_MS
        return sum(1 for x in items if x.ts - x.ts % MINUTE_MS >= since)

    return {
        "total": len(items),
        **labels,
        "by_tag": dict(sorted(by_tag.items(), key=lambda kv: (-kv[1], kv[0]))),
        "rate_last_hour": rate(60),
        "rate_last_24h": rate(1440),
    }


# --- browser-like SSE clients -------------------------------------------------------------
def sse_frames(response: httpx.Response) -> Iterator[tuple[str, str, str]]:
    """(event, id, data) of each data-bearing frame; `retry:` frames are checked and skipped."""
    event = eid = data = ""
    for line in response.iter_lines():
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("id: "):
            eid = line[4:]
        elif line.startswith("data: "):
            data = line[6:]
        elif line == "":
            if data:
                yield event, eid, data
            event = eid = data = ""


@dataclass
class Follower:
    """An SSE client in a thread. Like EventSource it remembers the last event id it saw;
    `stop` makes it leave after the next event (heartbeats come every 500 ms)."""

    url: str
    path: str
    headers: dict[str, str] = field(default_factory=dict)
    events: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    status: int | None = None
    response_headers: dict[str, str] = field(default_factory=dict)
    error: BaseException | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    connected: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self) -> Follower:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        try:
            with (
                httpx.Client(base_url=self.url, timeout=httpx.Timeout(30.0)) as client,
                client.stream("GET", self.path, headers=self.headers) as r,
            ):
                self.status = r.status_code
                self.response_headers = {k.lower(): v for k, v in r.headers.items()}
                if r.status_code != 200:
                    r.read()
                    return
                for event, eid, data in sse_frames(r):
                    self.events.append((event, eid, json.loads(data)))
                    self.connected.set()
                    if self.stop.is_set():
                        return
        except BaseException as exc:
            self.error = exc
        finally:
            self.connected.set()

    def join(self, timeout: float = 15) -> None:
        self.stop.set()
        assert self.thread is not None
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"{self.path} did not stop"

    @property
    def last_id(self) -> str:
        return self.events[-1][1]

    def updates(self) -> list[tuple[int, dict[str, Any]]]:
        return [(seq_of(i), d) for e, i, d in self.events if e == "sentiment_update"]

    def last_metrics(self) -> dict[str, Any] | None:
        for e, _, d in reversed(self.events):
            if e == "metrics":
                return dict(d)
        return None


def has_updates(f: Follower, n: int) -> Callable[[], bool]:
    return lambda: len(f.updates()) >= n


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


# --- the items ----------------------------------------------------------------------------
def make_item(rng: random.Random, i: int, *, v0: bool) -> dict[str, Any]:
    item: dict[str, Any] = {
        "ticker": rng.choice(TICKERS),
        "score": round(rng.uniform(-1, 1), 4),
        "label": rng.choice(LABELS),
        "confidence": round(rng.uniform(0, 1), 4),
        "source": rng.choice(["tiingo", "finnhub", "reuters"]),
        "timestamp": iso_ms(1_764_670_000_000 + i * 1000),
    }
    kind = i % 5
    if kind == 1:  # no milliseconds, Z
        item["timestamp"] = item["timestamp"][:-5] + "Z"
    elif kind == 2:  # an offset
        item["timestamp"] = item["timestamp"][:-1] + "+02:00"
    elif kind == 3 and v0:  # absent: the record's append time
        del item["timestamp"]
    if i % 7 == 0:
        item["ticker"] = item["ticker"].lower()  # counts as upper case
        item["extra"] = "ignored"
    if i % 11 == 0:
        item["score"] = rng.choice([-1, 0, 1])  # integers are numbers
    return item


INVALID_V0 = [
    {"ticker": "AAPL", "score": 2.0, "label": "positive", "confidence": 0.5, "source": "x"},
    {"ticker": "MSFT", "score": 0.1, "label": "great", "confidence": 0.5, "source": "x"},
    {"score": 0.1, "label": "neutral", "confidence": 0.5, "source": "x"},
    {"ticker": "TSLA", "score": True, "label": "neutral", "confidence": 0.5, "source": "x"},
    {"ticker": "NVDA", "score": 0.1, "label": "neutral", "confidence": 1.5, "source": "x"},
    "not an object",
    {"ticker": "-BAD", "score": 0.1, "label": "neutral", "confidence": 0.5, "source": "x"},
    {"ticker": "AMZN", "score": 0.1, "label": "negative", "confidence": 0.5, "source": ""},
]


@dataclass
class Chunk:
    route: str  # "v2-array" | "v2-items" | "v2-one" | "v0"
    items: list[Any]
    invalid: int = 0
    retry: bool = False


def plan_chunks(rng: random.Random) -> list[Chunk]:
    chunks: list[Chunk] = []
    i = 0
    bad = list(INVALID_V0)
    while i < ITEMS:
        n = min(rng.randint(5, 30), ITEMS - i)
        route = rng.choice(["v2-array", "v2-items", "v2-items", "v0", "v0"])
        if n <= 6 and route != "v0":
            route = "v2-one"
            n = 1
        items = [make_item(rng, i + k, v0=route == "v0") for k in range(n)]
        chunk = Chunk(route, items)
        if route == "v0" and bad:
            pos = rng.randint(0, len(items))
            chunk.items.insert(pos, bad.pop())
            chunk.invalid = 1
        chunks.append(chunk)
        i += n
    assert not bad, "too few /v0 chunks for the invalid records"
    for c in chunks:
        if c.route == "v2-items":
            c.retry = True  # the first {"items"} batch is sent twice with its key
            break
    return chunks


def send(http: httpx.Client, chunk: Chunk, key: str) -> int:
    """Send one chunk; the number of records written."""
    if chunk.route == "v0":
        r = http.post(f"/v0/topics/{TOPIC}", json={"records": [{"data": x} for x in chunk.items]})
        assert r.status_code in (200, 201), r.text
        return len(chunk.items)
    body: Any = {
        "v2-array": chunk.items,
        "v2-items": {"items": chunk.items},
        "v2-one": chunk.items[0],
    }[chunk.route]
    headers = {"Idempotency-Key": key}
    r = http.post("/api/v2/sentiment", json=body, headers=headers)
    assert r.status_code == 201, r.text
    doc = r.json()
    assert doc["topic"] == TOPIC and doc["accepted"] == len(chunk.items) and not doc["deduped"]
    assert doc["last_seq"] - doc["first_seq"] + 1 == len(chunk.items), doc
    if chunk.retry:
        again = http.post("/api/v2/sentiment", json=body, headers=headers)
        assert again.status_code == 200 and again.json()["deduped"] is True, again.text
    return len(chunk.items)


# --- the test -----------------------------------------------------------------------------
def test_dashboard_feed_across_two_processes(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    a, b = start_servers(2, **DASH_ENV)
    rng = random.Random(20251202)
    user = {"X-User-ID": "user-e2e"}
    # the topic exists before the streams start (the streams' first position is then known)
    with httpx.Client(timeout=30) as http:
        assert http.put(f"{a.url}/v0/topics/{TOPIC}", json={}).status_code in (200, 201)

    def create(server: ServerProcess, name: str, tickers: list[str]) -> str:
        r = httpx.post(
            f"{server.url}/api/v2/configurations",
            json={"name": name, "tickers": tickers},
            headers=user,
            timeout=30,
        )
        assert r.status_code == 201, r.text
        assert r.json()["tickers"] == [t.upper() for t in tickers]
        return str(r.json()["config_id"])

    plain_a = create(a, "big tech", ["aapl", "MSFT"])
    plain_b = create(b, "cars", ["TSLA", "BRK.B"])
    edited = create(a, "chips", ["NVDA"])
    resumed = create(b, "ads", ["GOOGL", "META"])

    def config_follower(server: ServerProcess, cid: str, **headers: str) -> Follower:
        path = f"/api/v2/configurations/{cid}/stream"
        return Follower(server.url, path, {**user, **headers}).start()

    metrics_clients = [
        Follower(s.url, "/api/v2/stream").start()
        for s in (a, b)
        for _ in range(METRICS_CLIENTS_PER_SERVER)
    ]
    cfg_clients = {
        "plain_a": config_follower(a, plain_a),  # stream and configuration on A
        "plain_b_on_a": config_follower(a, plain_b),  # configuration made through B
        "plain_b": Follower(  # EventSource style: ?user_id= instead of the header
            b.url, f"/api/v2/configurations/{plain_b}/stream?user_id=user-e2e"
        ).start(),
        "edited": config_follower(a, edited),  # edited through B below
    }
    resume_first = config_follower(a, resumed)
    everyone = [*metrics_clients, *cfg_clients.values(), resume_first]
    try:
        for f in everyone:
            assert f.connected.wait(30), f.path
            assert f.error is None and f.status == 200, (f.path, f.status, f.error)
            assert {k: f.response_headers.get(k) for k in SSE_HEADERS} == SSE_HEADERS
        for f in metrics_clients:
            first = f.events[0]
            assert first[0] == "metrics" and first[2]["total"] == 0, first
        for f in [*cfg_clients.values(), resume_first]:
            assert f.events[0][0] == "heartbeat", f.events[0]

        # --- ingest through both processes, several writers at once ---------------------
        chunks = plan_chunks(rng)
        todo = list(enumerate(chunks))
        todo_lock = threading.Lock()
        done = [0]
        gate_at = int(len(chunks) * 0.6)
        gate = threading.Event()
        failures: list[BaseException] = []

        def writer(w: int) -> None:
            try:
                with (
                    httpx.Client(base_url=a.url, timeout=60) as ha,
                    httpx.Client(base_url=b.url, timeout=60) as hb,
                ):
                    while True:
                        with todo_lock:
                            if not todo:
                                return
                            k, chunk = todo.pop(0)
                        if k >= gate_at:
                            assert gate.wait(60), "the mid-run actions never finished"
                        send(ha if k % 2 == 0 else hb, chunk, f"chunk-{k}")
                        with todo_lock:
                            done[0] += 1
            except BaseException as exc:
                failures.append(exc)
                gate.set()

        writers = [threading.Thread(target=writer, args=(w,), daemon=True) for w in range(WRITERS)]
        for t in writers:
            t.start()

        # --- mid-run: edit one configuration through B, move one client from A to B ---
        wait_until(lambda: done[0] >= len(chunks) // 4 or bool(failures), 120, "a quarter")
        assert not failures, failures
        r = httpx.put(
            f"{b.url}/api/v2/configurations/{edited}",
            json={"tickers": ["NVDA", "AMZN"]},
            headers=user,
            timeout=30,
        )
        assert r.status_code == 200 and r.json()["tickers"] == ["NVDA", "AMZN"], r.text
        resume_first.join()
        last_seen = resume_first.last_id
        resume_second = config_follower(b, resumed, **{"Last-Event-ID": last_seen})
        everyone.append(resume_second)
        gate.set()
        for t in writers:
            t.join(180)
        assert not failures, failures
        assert done[0] == len(chunks)

        # --- what was accepted, read back through /v0 ----------------------------------
        logged, not_items = read_back(a.url)
        assert len(logged) == ITEMS
        assert not_items == len(INVALID_V0)
        by_ticker: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        for x in logged:
            by_ticker.setdefault(x.item["ticker"], []).append((x.seq, x.item))

        def expected_for(*tickers: str) -> list[tuple[int, dict[str, Any]]]:
            return sorted((u for t in tickers for u in by_ticker.get(t, [])), key=lambda u: u[0])

        # --- every metrics client ends at the recount ----------------------------------
        def settled(f: Follower) -> Callable[[], bool]:
            def check() -> bool:
                m = f.last_metrics()
                return f.error is not None or (m is not None and m["total"] == ITEMS)

            return check

        for f in metrics_clients:
            wait_until(settled(f), 20, f"{f.url} metrics")
            assert f.error is None, f.error
        for f in metrics_clients:
            m = f.last_metrics()
            assert m is not None
            assert TS_RE.fullmatch(m["timestamp"]), m
            seen = {k: v for k, v in m.items() if k != "timestamp"}
            recounted = recount(logged, ms_of(m["timestamp"]))
            assert seen == recounted
            # by_tag is sorted by count, then name
            assert list(seen["by_tag"]) == list(recounted["by_tag"])
            for e, eid, _ in f.events:
                assert e in ("metrics", "heartbeat"), e
                seq_of(eid)
            totals = [d["total"] for e, _, d in f.events if e == "metrics"]
            assert totals == sorted(totals)  # no server rolls its tally back
        # the REST twin agrees
        rest = httpx.get(f"{b.url}/api/v2/metrics", timeout=30).json()
        assert {k: v for k, v in rest.items() if k != "timestamp"} == recount(
            logged, ms_of(rest["timestamp"])
        )

        # --- configuration streams: exactly their tickers' items, in log order ---------
        wanted = {
            "plain_a": expected_for("AAPL", "MSFT"),
            "plain_b_on_a": expected_for("TSLA", "BRK.B"),
            "plain_b": expected_for("TSLA", "BRK.B"),
        }
        for name, expect in wanted.items():
            f = cfg_clients[name]
            wait_until(has_updates(f, len(expect)), 20, name)
            assert f.error is None, (name, f.error)
            assert f.updates() == expect, name

        # edited mid-run through B: all NVDA items; AMZN items from some point on (when A's
        # stream re-read the configuration), every one of them after that point
        nvda, amzn = expected_for("NVDA"), expected_for("AMZN")
        f = cfg_clients["edited"]
        last = max(nvda + amzn, key=lambda u: u[0])
        wait_until(lambda: bool(f.updates()) and f.updates()[-1] == last, 20, "edit")
        received = f.updates()
        got_amzn = [u for u in received if u[1]["ticker"] == "AMZN"]
        assert got_amzn, "the edit never reached the stream"
        cut = got_amzn[0][0]
        assert received == sorted(nvda + [u for u in amzn if u[0] >= cut], key=lambda u: u[0])
        assert got_amzn[-1] == amzn[-1]

        # left A mid-ingest, resumed on B with its Last-Event-ID: the whole sequence
        expect = expected_for("GOOGL", "META")
        wait_until(
            lambda: len(resume_first.updates()) + len(resume_second.updates()) >= len(expect),
            20,
            "resume",
        )
        assert resume_second.status == 200 and resume_second.error is None
        first_part, second_part = resume_first.updates(), resume_second.updates()
        assert first_part, "the client left before it saw an update"
        assert second_part, "the client left after the last update"
        assert first_part + second_part == expect
        # heartbeats carry the feed position too: ids never go back within a connection
        # except for the replay (which starts after the Last-Event-ID)
        assert seq_of(last_seen) < second_part[0][0]
    finally:
        for f in everyone:
            f.stop.set()
        for f in everyone:
            if f.thread is not None:
                f.thread.join(15)


def test_connection_limit_per_instance(start_servers: Callable[..., list[ServerProcess]]) -> None:
    (s,) = start_servers(1, **DASH_ENV, HEADWATER_DASHBOARD_MAX_CONNECTIONS="2")
    user = {"X-User-ID": "user-cap"}
    r = httpx.post(
        f"{s.url}/api/v2/configurations",
        json={"name": "one", "tickers": ["AAPL"]},
        headers=user,
        timeout=30,
    )
    assert r.status_code == 201, r.text
    cid = r.json()["config_id"]
    held = [
        Follower(s.url, "/api/v2/stream").start(),
        Follower(s.url, f"/api/v2/configurations/{cid}/stream", user).start(),
    ]
    try:
        for f in held:
            assert f.connected.wait(30) and f.status == 200, (f.status, f.error)
        status = httpx.get(f"{s.url}/api/v2/stream/status", timeout=30).json()
        assert status["connections"] == 2 and status["available"] == 0, status
        # both routes count against the one cap
        for path, headers in (
            ("/api/v2/stream", {}),
            (f"/api/v2/configurations/{cid}/stream", user),
        ):
            refused = httpx.get(f"{s.url}{path}", headers=headers, timeout=30)
            assert refused.status_code == 503, refused.text
            assert refused.headers["retry-after"] == "30"
            assert refused.headers["content-type"].startswith("application/json")
            assert refused.json() == {
                "detail": "Connection limit reached. Try again later.",
                "max_connections": 2,
                "retry_after": 30,
            }
        held.pop(0).join()
        # the slot is freed when the client leaves (noticed at the next write: bounded wait)
        wait_until(
            lambda: httpx.get(f"{s.url}/api/v2/stream/status", timeout=30).json()["available"] == 1,
            15,
            "the slot to be freed",
        )
        again = Follower(s.url, "/api/v2/stream").start()
        held.append(again)
        assert again.connected.wait(30) and again.status == 200, (again.status, again.error)
        assert again.events[0][0] == "metrics"
    finally:
        for f in held:
            f.stop.set()
        for f in held:
            if f.thread is not None:
                f.thread.join(15)


# --- single-process regressions (each failed before the fix its docstring names) ----------
def _post_items(url: str, n: int, ticker: str = "AAPL") -> None:
    items = [
        {"ticker": ticker, "score": 0.5, "label": "positive", "confidence": 0.9, "source": "t"}
        for _ in range(n)
    ]
    r = httpx.post(f"{url}/api/v2/sentiment", json=items, timeout=30)
    assert r.status_code == 201, r.text


def _config(url: str, user: dict[str, str], tickers: list[str]) -> str:
    r = httpx.post(
        f"{url}/api/v2/configurations",
        json={"name": "x", "tickers": tickers},
        headers=user,
        timeout=30,
    )
    assert r.status_code == 201, r.text
    return str(r.json()["config_id"])


def test_stream_opened_before_the_topic_exists_gets_the_first_items(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    """A configuration stream opened before the topic exists gets the items of the append
    that creates it (fixed in 0badae1; before, the first epoch looked like a recreate)."""
    (s,) = start_servers(1, **DASH_ENV)
    user = {"X-User-ID": "user-early"}
    cid = _config(s.url, user, ["AAPL"])
    f = Follower(s.url, f"/api/v2/configurations/{cid}/stream", user).start()
    try:
        assert f.connected.wait(30) and f.status == 200, (f.status, f.error)
        _post_items(s.url, 3)  # creates the topic
        _post_items(s.url, 2)
        wait_until(lambda: len(f.updates()) >= 5, 10, "5 updates")
    finally:
        f.join()
    seqs = [q for q, _ in f.updates()]
    assert seqs == [1, 2, 3, 4, 5], seqs


def test_a_resume_heartbeat_id_does_not_skip_the_replay(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    """A browser that drops right after the first event of a resumed stream (a heartbeat)
    and reconnects with that heartbeat's id still gets the updates the replay would have
    sent (fixed in 535695b: the heartbeat id carries the stream's own position)."""
    (s,) = start_servers(1, **DASH_ENV)
    httpx.put(f"{s.url}/v0/topics/{TOPIC}", json={}, timeout=30)
    user = {"X-User-ID": "user-resume"}
    cid = _config(s.url, user, ["AAPL"])
    path = f"/api/v2/configurations/{cid}/stream"
    keeper = Follower(s.url, "/api/v2/stream").start()  # keeps the feed current
    try:
        assert keeper.connected.wait(30) and keeper.status == 200
        first = Follower(s.url, path, user).start()
        assert first.connected.wait(30) and first.status == 200
        first.join()
        h0 = first.last_id
        _post_items(s.url, 5)
        wait_until(lambda: (keeper.last_metrics() or {}).get("total") == 5, 10, "the feed")
        # the browser reconnects with h0, sees the first event (a heartbeat), drops ...
        second = Follower(s.url, path, {**user, "Last-Event-ID": h0})
        second.stop.set()
        second.start().join()
        assert second.events[0][0] == "heartbeat"
        h1 = second.last_id
        # ... and reconnects with the id it last saw: the 5 updates must still come
        third = Follower(s.url, path, {**user, "Last-Event-ID": h1}).start()
        try:
            wait_until(lambda: len(third.updates()) >= 5, 10, "the replay")
        finally:
            third.join()
        seqs = [q for q, _ in third.updates()]
        assert seqs == sorted(set(seqs)) and len(seqs) == 5 and seqs[0] > seq_of(h0)
    finally:
        keeper.join()


def test_first_metrics_after_an_idle_period_is_current(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    """After the last stream of a process closed (the feed stops following), the next
    stream's first metrics event is current, not the stale tally (fixed in 0badae1)."""
    (s,) = start_servers(1, **DASH_ENV)
    httpx.put(f"{s.url}/v0/topics/{TOPIC}", json={}, timeout=30)
    first = Follower(s.url, "/api/v2/stream").start()
    assert first.connected.wait(30) and first.status == 200
    first.join()
    wait_until(
        lambda: httpx.get(f"{s.url}/api/v2/stream/status", timeout=30).json()["connections"] == 0,
        15,
        "the stream to close",
    )
    _post_items(s.url, 4)
    second = Follower(s.url, "/api/v2/stream")
    second.stop.set()
    second.start().join()
    m = second.events[0]
    assert m[0] == "metrics" and m[2]["total"] == 4, m
