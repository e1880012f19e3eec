"""/api/v2 streams (spec: dashboard-sse-contract.txt; docs/dashboard.md "Streams"): headers,
`retry: 3000`, event ids and exact data shapes, heartbeats, metrics on change, ticker
filtering, live configuration edits and deletes, `?user_id=`, Last-Event-ID resume and its
window, the per-instance connection cap and /api/v2/stream/status. Expected updates are the
canonical forms of what each test posted (written out by hand in dashboard_helpers)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from api_helpers import MakeClient
from dashboard_helpers import (
    CONFIGS,
    METRICS,
    STATUS,
    STREAM,
    Sse,
    assert_metrics,
    canonical,
    create_config,
    event_uuid,
    fast,
    item,
    open_stream,
    parse_iso_ms,
    post_items,
    recount,
    refused,
    status,
    user,
    wait_connections,
    wall_ms,
)
from starlette.testclient import TestClient
from test_tiering import services

from headwater.dashboard.ids import event_id, topic_check

pytestmark = pytest.mark.api


def cfg_url(cfg: dict[str, Any]) -> str:
    return f"{CONFIGS}/{cfg['config_id']}/stream"


def by_source(src: str) -> Callable[[dict[str, Any]], bool]:
    return lambda d: d["source"] == src


def sources(frames: list[Any]) -> list[str]:
    return [f.data["source"] for f in frames]


def metrics_total(sse: Sse, total: int, timeout_s: float = 10.0) -> dict[str, Any]:
    """The first metrics event showing `total` items (the feed has synced that far)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        fr = sse.next_of("metrics", timeout_s)
        if fr.data["total"] == total:
            return fr.data
    raise AssertionError(f"no metrics with total {total} within {timeout_s}s")


@pytest.fixture
def dc(make_client: MakeClient) -> TestClient:
    return make_client(dashboard=fast())


# --- the metrics stream -----------------------------------------------------------------------
def test_metrics_stream_events_and_heartbeats(dc: TestClient) -> None:
    with open_stream(dc, STREAM, **{"Last-Event-ID": "evt_abc123"}) as sse:
        first = sse.event()
        assert first.event == "metrics"
        assert_metrics(first.data, recount([], 0))  # no topic yet: zeros
        assert event_uuid(first.id).version == 8
        beats = [sse.next_of("heartbeat") for _ in range(3)]
        stamps = [parse_iso_ms(b.data["timestamp"]) for b in beats]
        assert all(b - a >= 90 for a, b in itertools.pairwise(stamps)), stamps
        for b in beats:
            assert b.data["connections"] == 1, b.data
        assert len({b.id for b in beats} | {first.id}) == 4  # every event its own id
        # Items posted while streaming: the next metrics event reflects them.
        posted = [item("AAPL"), item("msft", "negative"), item("AAPL", "neutral")]
        post_items(dc, posted)
        fr = sse.next_of("metrics")
        assert_metrics(
            fr.data,
            recount([(x, 0) for x in posted], 0) | {"rate_last_hour": 3, "rate_last_24h": 3},
        )
        more = [item("TSLA", "positive")]
        post_items(dc, more)
        fr = sse.next_of("metrics")
        assert_metrics(
            fr.data,
            recount([(x, 0) for x in posted + more], 0) | {"rate_last_hour": 4, "rate_last_24h": 4},
        )
        # Records that are not items do not change the metrics' counts.
        resp = dc.post("/v0/topics/sentiment", json={"records": [{"data": {"x": 1}}]})
        assert resp.status_code == 200, resp.text
        post_items(dc, item("NVDA"))
        fr = sse.next_of("metrics")
        assert fr.data["total"] in (4, 5), fr.data  # at most one event per change
        if fr.data["total"] == 4:
            fr = sse.next_of("metrics")
        assert fr.data["total"] == 5 and fr.data["by_tag"]["NVDA"] == 1, fr.data


def test_metrics_at_least_every_interval(make_client: MakeClient) -> None:
    c = make_client(dashboard=fast(metrics_interval_ms=150, heartbeat_ms=60_000))
    post_items(c, item())
    with open_stream(c, STREAM) as sse:
        events = [sse.event() for _ in range(3)]
        assert [e.event for e in events] == ["metrics"] * 3
        assert all(e.data["total"] == 1 for e in events)


def slow_head_reads(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The instance's head reads take 300 ms (as a slow DynamoDB call may)."""
    engine = services(client).engine
    real = engine.head_of

    async def slow_head_of(topic: str, *, consistent: bool = True) -> Any:
        await asyncio.sleep(0.3)
        return await real(topic, consistent=consistent)

    monkeypatch.setattr(engine, "head_of", slow_head_of)


def test_first_metrics_is_current_after_appends_while_nobody_streamed(
    make_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN an instance whose feed was built (a GET) and which then streamed nothing while
    # items arrived through another instance
    a = make_client(dashboard=fast())
    b = make_client(dashboard=fast())
    post_items(a, item("AAPL"))
    assert b.get(METRICS).json()["total"] == 1
    posted = [item("AAPL"), item("MSFT", "negative"), item("TSLA", "neutral")]
    post_items(a, posted)
    slow_head_reads(b, monkeypatch)
    # WHEN a stream opens on it, THEN the first metrics event is the current state
    with open_stream(b, STREAM) as sse:
        fr = sse.event()
        assert fr.event == "metrics"
        assert fr.data["total"] == 4, fr.data


# --- the configuration stream -----------------------------------------------------------------
def test_config_stream_filters_by_ticker(dc: TestClient) -> None:
    post_items(dc, item("NVDA", source="before"))  # the topic exists
    cfg = create_config(dc, "alice", ["aapl", "MSFT"])
    with open_stream(dc, cfg_url(cfg), **user("alice")) as sse:
        first = sse.event()
        assert first.event == "heartbeat" and first.data["connections"] == 1, first
        posted = [
            item("AAPL", source="a1"),
            item("TSLA", source="t1"),
            item("msft", "negative", source="m1", timestamp="2025-12-02T11:30:00.123+01:00"),
            item("NVDA", source="n1"),
            item("aapl", "neutral", source="a2", extra="dropped"),
        ]
        post_items(dc, posted[:2])
        dc.post(
            "/v0/topics/sentiment",
            json={"records": [{"data": posted[2]}, {"data": {"ticker": "AAPL"}}]},
        )
        post_items(dc, posted[3:])
        post_items(dc, item("MSFT", source="end"))
        got = sse.updates_until(by_source("end"))
        assert [f.data for f in got] == [
            canonical(posted[0]),
            {**canonical({**posted[2], "timestamp": "2025-12-02T10:30:00.123Z"})},
            canonical(posted[4]),
            canonical(item("MSFT", source="end")),
        ]
        ids = [event_uuid(f.id) for f in got]
        assert len(set(ids)) == 4 and all(u.version == 8 for u in ids)


def test_config_stream_without_the_topic_yet(dc: TestClient) -> None:
    # The dashboard's first items: the topic does not exist when the stream opens.
    cfg = create_config(dc, "alice", ["AAPL"])
    with open_stream(dc, cfg_url(cfg), **user("alice")) as sse:
        assert sse.event().event == "heartbeat"
        post_items(dc, [item("AAPL", source="first"), item("AAPL", source="second")])
        post_items(dc, item("AAPL", source="end"))
        got = sse.updates_until(by_source("end"))
        assert sources(got) == ["first", "second", "end"]


def test_config_edit_applies_without_reconnecting(dc: TestClient) -> None:
    post_items(dc, item("NVDA"))
    cfg = create_config(dc, "alice", ["AAPL"])
    with open_stream(dc, cfg_url(cfg), **user("alice")) as sse:
        post_items(dc, [item("AAPL", source="a1"), item("TSLA", source="t1")])
        post_items(dc, item("AAPL", source="end1"))
        assert sources(sse.updates_until(by_source("end1"))) == ["a1", "end1"]
        resp = dc.put(
            f"{CONFIGS}/{cfg['config_id']}", json={"tickers": ["tsla"]}, headers=user("alice")
        )
        assert resp.status_code == 200, resp.text
        # A heartbeat stamped after the edit: the stream's loop has run since.
        assert sse.heartbeat_after(wall_ms()) == []
        post_items(dc, [item("AAPL", source="a2"), item("TSLA", source="t2")])
        post_items(dc, item("TSLA", source="end2"))
        assert sources(sse.updates_until(by_source("end2"))) == ["t2", "end2"]
        # A rename alone keeps the tickers.
        resp = dc.put(
            f"{CONFIGS}/{cfg['config_id']}", json={"name": "renamed"}, headers=user("alice")
        )
        assert resp.status_code == 200, resp.text
        assert sse.heartbeat_after(wall_ms()) == []
        post_items(dc, [item("AAPL", source="a3"), item("TSLA", source="end3")])
        assert sources(sse.updates_until(by_source("end3"))) == ["end3"]


def test_config_edit_through_another_instance_is_polled(make_client: MakeClient) -> None:
    a = make_client(dashboard=fast(config_poll_ms=100))
    b = make_client(dashboard=fast())
    post_items(a, item("NVDA"))
    cfg = create_config(a, "alice", ["AAPL"])
    with open_stream(a, cfg_url(cfg), **user("alice")) as sse:
        assert sse.event().event == "heartbeat"
        resp = b.put(
            f"{CONFIGS}/{cfg['config_id']}", json={"tickers": ["TSLA"]}, headers=user("alice")
        )
        assert resp.status_code == 200, resp.text
        # Two poll intervals later the stream has re-read the configuration.
        assert sse.heartbeat_after(wall_ms() + 200) == []
        post_items(a, [item("AAPL", source="a1"), item("TSLA", source="t1")])
        post_items(a, item("TSLA", source="end"))
        assert sources(sse.updates_until(by_source("end"))) == ["t1", "end"]


def test_config_delete_through_another_instance_ends_the_stream(
    make_client: MakeClient,
) -> None:
    a = make_client(dashboard=fast(config_poll_ms=100))
    b = make_client(dashboard=fast())
    post_items(a, item("NVDA"))
    cfg = create_config(a, "alice", ["AAPL"])
    with open_stream(a, cfg_url(cfg), **user("alice")) as sse:
        assert sse.event().event == "heartbeat"
        # WHEN another instance deletes the configuration (a's shared poller finds it gone)
        assert b.delete(f"{CONFIGS}/{cfg['config_id']}", headers=user("alice")).status_code == 204
        deadline = time.monotonic() + 10
        with pytest.raises(EOFError):
            while time.monotonic() < deadline:
                sse.frame()
    wait_connections(a, 0)


def test_one_configuration_poll_serves_every_stream_of_a_process(
    make_client: MakeClient,
) -> None:
    a = make_client(dashboard=fast(config_poll_ms=100))
    post_items(a, item("NVDA"))
    configs = [create_config(a, f"user{i}", ["AAPL"]) for i in range(3)]
    store = services(a).dashboard.configs
    calls: list[int] = []
    real = store.get_many

    def counting(keys: list[tuple[str, str]]) -> Any:
        calls.append(len(keys))
        return real(keys)

    store.get_many = counting  # type: ignore[method-assign]
    with contextlib.ExitStack() as stack:
        streams = [
            stack.enter_context(open_stream(a, cfg_url(c), **user(f"user{i}")))
            for i, c in enumerate(configs)
        ]
        for sse in streams:
            assert sse.event().event == "heartbeat"
        time.sleep(0.5)
    # THEN once all three were open, a poll read the three configurations in one call
    assert calls and max(calls) == 3


def test_config_delete_ends_the_stream_and_frees_the_slot(dc: TestClient) -> None:
    post_items(dc, item("NVDA"))
    cfg = create_config(dc, "alice", ["AAPL"])
    with open_stream(dc, cfg_url(cfg), **user("alice")) as sse:
        assert sse.event().event == "heartbeat"
        assert status(dc)["connections"] == 1
        assert dc.delete(f"{CONFIGS}/{cfg['config_id']}", headers=user("alice")).status_code == 204
        deadline = time.monotonic() + 10
        with pytest.raises(EOFError):
            while time.monotonic() < deadline:
                sse.frame()
    wait_connections(dc, 0)
    resp = refused(dc, cfg_url(cfg), **user("alice"))
    assert resp.status_code == 404 and resp.json() == {"detail": "Configuration not found"}


def test_config_stream_identification(dc: TestClient) -> None:
    post_items(dc, item("NVDA"))
    cfg = create_config(dc, "alice", ["AAPL"])
    url = cfg_url(cfg)
    for headers in ({}, {"X-User-ID": ""}, {"X-User-ID": "  "}):
        resp = refused(dc, url, **headers)
        assert resp.status_code == 401 and resp.json() == {"detail": "Missing user identification"}
    resp = refused(dc, url + "?user_id=")
    assert resp.status_code == 401 and resp.json() == {"detail": "Missing user identification"}
    for kwargs in ({"X-User-ID": "bob"}, {}):
        target = url if kwargs else url + "?user_id=bob"
        resp = refused(dc, target, **kwargs)
        assert resp.status_code == 404 and resp.json() == {"detail": "Configuration not found"}
    resp = refused(dc, f"{CONFIGS}/{uuid.uuid4()}/stream", **user("alice"))
    assert resp.status_code == 404 and resp.json() == {"detail": "Configuration not found"}
    # The header wins over ?user_id=.
    resp = refused(dc, url + "?user_id=alice", **user("bob"))
    assert resp.status_code == 404, resp.text
    assert status(dc)["connections"] == 0  # refused requests took no slot
    # ?user_id= alone (EventSource cannot send headers) works.
    with open_stream(dc, url + "?user_id=alice") as sse:
        assert sse.event().event == "heartbeat"
        post_items(dc, item("AAPL", source="q"))
        assert sources(sse.updates_until(by_source("q"))) == ["q"]


# --- resume (Last-Event-ID) -------------------------------------------------------------------
def test_last_event_id_replays_the_matching_items_after_it(dc: TestClient) -> None:
    post_items(dc, item("NVDA"))
    cfg = create_config(dc, "alice", ["AAPL", "MSFT"])
    with open_stream(dc, cfg_url(cfg), **user("alice")) as sse:
        post_items(
            dc, [item("AAPL", source="a1"), item("TSLA", source="t1"), item("MSFT", source="m1")]
        )
        got = sse.updates_until(by_source("m1"))
        assert sources(got) == ["a1", "m1"]
        resume_id = got[0].id
    missed = [
        item("TSLA", source="t2"),
        item("AAPL", source="a2"),
        item("msft", "negative", source="m2"),
        item("NVDA", source="n2"),
        item("AAPL", "neutral", source="a3"),
    ]
    post_items(dc, missed[:2])
    post_items(dc, missed[2:])
    assert resume_id is not None
    with open_stream(dc, cfg_url(cfg), **user("alice"), **{"Last-Event-ID": resume_id}) as sse:
        post_items(dc, item("AAPL", source="end"))
        got = sse.updates_until(by_source("end"))
        assert [f.data for f in got] == [
            canonical(item("MSFT", source="m1")),
            canonical(missed[1]),
            canonical(missed[2]),
            canonical(missed[4]),
            canonical(item("AAPL", source="end")),
        ]
        last_id = got[-1].id
    # Resuming from the newest id replays nothing.
    assert last_id is not None
    with open_stream(dc, cfg_url(cfg), **user("alice"), **{"Last-Event-ID": last_id}) as sse:
        post_items(dc, item("MSFT", source="end2"))
        assert sources(sse.updates_until(by_source("end2"))) == ["end2"]


@pytest.mark.parametrize(
    "last_id",
    [
        "evt_abc123",
        "evt_b3a3e584-469b-4ff5-946d-06079829fd39",  # a v4 uuid: not one of ours
        "garbage",
        "evt_",
        "evt_" + "f" * 200,
        event_id(topic_check("other"), 1, 1),  # an id of another topic
        event_id(topic_check("sentiment"), 7, 1),  # another incarnation of the topic
    ],
    ids=["short", "foreign-uuid", "garbage", "bare-prefix", "long", "other-topic", "old-topic"],
)
def test_unknown_last_event_id_starts_from_the_current_state(dc: TestClient, last_id: str) -> None:
    post_items(dc, [item("AAPL", source="old1"), item("AAPL", source="old2")])
    cfg = create_config(dc, "alice", ["AAPL"])
    with open_stream(dc, cfg_url(cfg), **user("alice"), **{"Last-Event-ID": last_id}) as sse:
        assert sse.event().event == "heartbeat"
        post_items(dc, item("AAPL", source="end"))
        assert sources(sse.updates_until(by_source("end"))) == ["end"]


def test_resume_window(make_client: MakeClient) -> None:
    c = make_client(dashboard=fast(buffer_events=3))
    post_items(c, item("NVDA"))  # seq 1
    cfg = create_config(c, "alice", ["AAPL"])
    with open_stream(c, STREAM) as live:  # keeps this instance's feed following
        metrics_total(live, 1)
        with open_stream(c, cfg_url(cfg), **user("alice")) as sse:
            post_items(c, [item("AAPL", source=f"a{i}") for i in (1, 2, 3)])  # seqs 2..4
            got = sse.updates_until(by_source("a3"))
            ids = {f.data["source"]: f.id for f in got}
        post_items(c, [item("AAPL", source=f"a{i}") for i in (4, 5, 6)])  # seqs 5..7
        metrics_total(live, 7)
        # The window holds seqs 5..7: resuming from a3 (seq 4) loses nothing.
        with open_stream(c, cfg_url(cfg), **user("alice"), **{"Last-Event-ID": ids["a3"]}) as sse:
            post_items(c, item("AAPL", source="end1"))  # seq 8
            assert sources(sse.updates_until(by_source("end1"))) == ["a4", "a5", "a6", "end1"]
        metrics_total(live, 8)
        # From a2 (seq 3) the item after it (seq 4) has left the window: no replay.
        for name, end in (("a2", "end2"), ("a1", "end3")):
            with open_stream(
                c, cfg_url(cfg), **user("alice"), **{"Last-Event-ID": ids[name]}
            ) as sse:
                post_items(c, item("AAPL", source=end))
                assert sources(sse.updates_until(by_source(end))) == [end], name


def test_resume_on_an_instance_that_streamed_nothing_since(
    make_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a resume window of 3, an id issued by instance A, and instance B whose feed was
    # built before the items after that id arrived (B streamed nothing meanwhile)
    a = make_client(dashboard=fast(buffer_events=3))
    b = make_client(dashboard=fast(buffer_events=3))
    post_items(a, item("NVDA"))
    cfg = create_config(a, "alice", ["AAPL"])
    with open_stream(a, cfg_url(cfg), **user("alice")) as sse:
        post_items(a, item("AAPL", source="a1"))
        resume_id = sse.updates_until(by_source("a1"))[0].id
    assert b.get(METRICS).json()["total"] == 2
    post_items(a, [item("AAPL", source=f"x{i}") for i in range(1, 6)])
    slow_head_reads(b, monkeypatch)
    # WHEN the stream resumes on B: five items followed a1, only three are in the window, so
    # the id is outside it (no replay) -- replaying x3..x5 alone would skip x1 and x2
    assert resume_id is not None
    with open_stream(b, cfg_url(cfg), **user("alice"), **{"Last-Event-ID": resume_id}) as sse:
        post_items(b, item("AAPL", source="end"))
        got = sources(sse.updates_until(by_source("end")))
        assert got in (["end"], ["x1", "x2", "x3", "x4", "x5", "end"]), got


# --- connection cap and status ------------------------------------------------------------------
def test_connection_limit_and_status(make_client: MakeClient) -> None:
    c = make_client(dashboard=fast(max_connections=2))
    post_items(c, item("NVDA"))
    cfg = create_config(c, "alice", ["AAPL"])
    st = status(c)
    assert list(st) == ["connections", "max_connections", "available", "uptime_seconds"], st
    assert (st["connections"], st["max_connections"], st["available"]) == (0, 2, 2)
    assert type(st["uptime_seconds"]) is int and st["uptime_seconds"] >= 0
    with open_stream(c, STREAM) as s1:
        s1.event()
        st = status(c)
        assert (st["connections"], st["available"]) == (1, 1), st
        with open_stream(c, cfg_url(cfg), **user("alice")) as s2:
            hb = s2.event()
            assert hb.event == "heartbeat" and hb.data["connections"] == 2, hb.data
            st = status(c)
            assert (st["connections"], st["max_connections"], st["available"]) == (2, 2, 0)
            for url, headers in ((STREAM, {}), (cfg_url(cfg), user("alice"))):
                resp = refused(c, url, **headers)
                assert resp.status_code == 503, resp.text
                assert resp.headers["retry-after"] == "30"
                assert resp.headers["content-type"].startswith("application/json")
                assert resp.json() == {
                    "detail": "Connection limit reached. Try again later.",
                    "max_connections": 2,
                    "retry_after": 30,
                }
            # 401 and 404 are answered before a slot is looked at.
            assert refused(c, cfg_url(cfg)).status_code == 401
            assert refused(c, cfg_url(cfg), **user("bob")).status_code == 404
            assert status(c)["connections"] == 2
            # Both streams still work.
            post_items(c, item("AAPL", source="live"))
            assert sources(s2.updates_until(by_source("live"))) == ["live"]
            metrics_total(s1, 2)
        # The config stream ended by a delete frees its slot.
    c2 = make_client(dashboard=fast(max_connections=1))
    cfg2 = create_config(c2, "bob", ["AAPL"])
    with open_stream(c2, cfg_url(cfg2), **user("bob")) as sse:
        sse.event()
        assert refused(c2, STREAM).status_code == 503
        assert c2.delete(f"{CONFIGS}/{cfg2['config_id']}", headers=user("bob")).status_code == 204
        with pytest.raises(EOFError):
            for _ in range(1000):
                sse.frame()
    wait_connections(c2, 0)
    with open_stream(c2, STREAM) as sse:
        assert sse.event().event == "metrics"
        assert status(c2)["connections"] == 1


def test_a_client_that_leaves_frees_its_slot(make_client: MakeClient) -> None:
    c = make_client(dashboard=fast(max_connections=1))
    post_items(c, item("NVDA"))
    with open_stream(c, STREAM) as sse:
        sse.event()
        assert status(c)["connections"] == 1
    # The client went away (the test client cancels the request's task, as an ASGI server
    # may): the slot comes back.
    wait_connections(c, 0, timeout_s=5)
    with open_stream(c, STREAM) as sse:
        assert sse.event().event == "metrics"


def test_status_counts_streams_of_both_routes(dc: TestClient) -> None:
    post_items(dc, item("NVDA"))
    cfg = create_config(dc, "alice", ["AAPL"])
    with open_stream(dc, STREAM) as s1, open_stream(dc, cfg_url(cfg), **user("alice")) as s2:
        s1.event()
        s2.event()
        st = dc.get(STATUS).json()
        assert (st["connections"], st["available"]) == (2, 98), st
        hb = s1.next_of("heartbeat")
        assert hb.data["connections"] == 2
