"""Probes (spec §8): health, ready, metrics (Prometheus text and JSON), and their auth."""

from __future__ import annotations

import re

import pytest
from api_helpers import MakeClient, append, append_data, assert_error, ok, put_topic
from starlette.testclient import TestClient

from headwater import __version__
from headwater.errors import StorageUnavailable

pytestmark = pytest.mark.api

HEALTH = ["/v0/health", "/healthz", "/health"]
READY = ["/v0/ready", "/readyz"]


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def test_health(client: TestClient) -> None:
    for url in HEALTH:
        body = ok(client.get(url))
        assert body["status"] == "ok" and body["version"] == __version__
        assert isinstance(body["uptime_ms"], int) and body["uptime_ms"] >= 0


def test_ready(client: TestClient) -> None:
    put_topic(client, "a")
    put_topic(client, "b")
    # a Durable Stream is a log too (~ds/s), but not one of the topics /v0 shows
    assert client.put("/v1/stream/s", headers={"Content-Type": "text/plain"}).status_code == 201
    for url in READY:
        body = ok(client.get(url))
        assert body["status"] == "ready" and body["wal_replay_complete"] is True
        assert body["topics"] == 2


def test_probes_are_open_with_keys_by_default(make_client: MakeClient) -> None:
    c = make_client(api_keys_raw="k:read,w:write")
    for url in HEALTH + READY:
        ok(c.get(url))
        ok(c.get(url, headers=bearer("wrong")))  # an absent or wrong key does not matter


def test_probe_auth_requires_a_valid_key(make_client: MakeClient) -> None:
    c = make_client(api_keys_raw="k:read,w:write", probe_auth=True)
    for url in HEALTH + READY:
        assert_error(c.get(url), 401, "unauthorized")
        assert_error(c.get(url, headers=bearer("wrong")), 401, "unauthorized")
        ok(c.get(url, headers=bearer("k")))
        ok(c.get(url, headers=bearer("w")))


def test_metrics_are_open_without_keys(client: TestClient) -> None:
    r = client.get("/v0/metrics")
    assert r.status_code == 200, r.text


def test_metrics_need_read_scope_when_keys_are_configured(make_client: MakeClient) -> None:
    c = make_client(api_keys_raw="full,r:read,w:write,d:d+a")
    assert_error(c.get("/v0/metrics"), 401, "unauthorized")
    assert_error(c.get("/v0/metrics", headers=bearer("nope")), 401, "unauthorized")
    assert_error(c.get("/v0/metrics", headers=bearer("w")), 403, "forbidden")
    assert_error(c.get("/v0/metrics", headers=bearer("d")), 403, "forbidden")
    assert c.get("/v0/metrics", headers=bearer("r")).status_code == 200
    assert c.get("/v0/metrics", headers=bearer("full")).status_code == 200
    body = ok(c.get("/v0/metrics", headers={**bearer("r"), "accept": "application/json"}))
    assert "gauges" in body


def metric_lines(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        out[name] = float(value)
    return out


def test_metrics_prometheus_text(client: TestClient) -> None:
    # GIVEN two topics with records, one durable, and a record delete
    append_data(client, "jobs", 1, 2, 3)
    ok(client.post("/v0/topics/jobs/delete", json={"before_seq": 2}))
    append(client, "events", [{"data": "x"}], config={"durable": True})
    # WHEN scraped
    r = client.get("/v0/metrics")
    # THEN it is the Prometheus text exposition format
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    assert "version=0.0.4" in r.headers["content-type"]
    text = r.text
    assert "# TYPE topics_topic_head_seq gauge" in text
    assert "# HELP topics_topic_head_seq " in text
    m = metric_lines(text)
    assert m["topics_topics"] == 2
    assert m['topics_topic_head_seq{topic="jobs"}'] == 3
    assert m['topics_topic_earliest_seq{topic="jobs"}'] == 2
    assert m['topics_topic_records_live{topic="jobs"}'] == 2
    assert m['topics_topic_head_seq{topic="events"}'] == 1
    assert m['topics_topic_bytes_live{topic="events"}'] > 0
    assert m["topics_records_live"] == 3
    assert m["topics_bytes_live"] > 0
    assert m['topics_topics_by_class{class="fsync"}'] == 1
    assert m['topics_topics_by_class{class="disk"}'] == 1
    assert m["topics_ready"] == 1
    assert m["topics_uptime_ms"] >= 0
    for gauge in (
        "topics_routers",
        "topics_queue_topics",
        "topics_sse_connections",
        "topics_watch_sessions",
    ):
        assert gauge in m
    # every sample line is `name{labels} value`
    for line in text.splitlines():
        if line and not line.startswith("#"):
            assert re.fullmatch(r'[a-z_]+(\{[a-z_]+="[^"]*"\})? -?[0-9.e+]+', line), line


def test_metrics_json(client: TestClient) -> None:
    append_data(client, "jobs", 1, 2)
    body = ok(client.get("/v0/metrics", headers={"accept": "application/json"}))
    assert body["gauges"]["topics_topics"] == 1
    assert body["gauges"]["topics_records_live"] == 2
    assert body["topics"]["jobs"]["head_seq"] == 2
    assert body["topics"]["jobs"]["earliest_seq"] == 1


def test_memory_gauges_show_each_budget_and_stay_within_it(make_client: MakeClient) -> None:
    """GIVEN a 64 KB frame cache and a 16 KB head budget WHEN 40 topics take ~200 KB of
    records THEN the memory gauges show what each cache holds, never past its budget, and
    the process's RSS."""
    c = make_client(frame_cache_bytes=64 << 10, head_cache_bytes=16 << 10)
    for t in range(40):
        append(c, f"m{t}", [{"data": {"pad": "x" * 1000, "i": i}} for i in range(5)])
        assert ok(c.post(f"/v0/topics/m{t}/diff", json={"from_seq": 0}))["records"]
    g = ok(c.get("/v0/metrics", headers={"accept": "application/json"}))["gauges"]
    assert g["headwater_memory_frame_cache_budget_bytes"] == 64 << 10
    assert 32 << 10 < g["headwater_memory_frame_cache_bytes"] <= 64 << 10
    assert g["headwater_memory_head_cache_budget_bytes"] == 16 << 10
    assert 0 < g["headwater_memory_head_cache_bytes"] <= 16 << 10
    assert 0 < g["headwater_memory_known_heads_bytes"] <= 16 << 10
    assert g["headwater_memory_stream_buffers_bytes"] == 0  # no stream open
    assert g["headwater_memory_rss_bytes"] > 10 << 20
    # ...the same in the Prometheus text
    m = metric_lines(c.get("/v0/metrics").text)
    assert m["headwater_memory_frame_cache_budget_bytes"] == 64 << 10


def test_metrics_queue_gauges(client: TestClient) -> None:
    put_topic(client, "work", {"type": "queue"})
    append_data(client, "work", 1, 2, 3)
    put_topic(client, "plain")
    claimed = ok(client.post("/v0/topics/work/claim", json={"node": "w1", "max": 1}))
    assert claimed["count"] == 1
    body = ok(client.get("/v0/metrics", headers={"accept": "application/json"}))
    assert body["gauges"]["topics_queue_topics"] == 1
    assert body["gauges"]["topics_queue_leases_in_flight"] == 1
    assert body["topics"]["work"]["queue_ready"] == 2
    assert body["topics"]["work"]["queue_in_flight"] == 1
    assert "queue_ready" not in body["topics"]["plain"]
    m = metric_lines(client.get("/v0/metrics").text)
    assert m['topics_topic_queue_ready{topic="work"}'] == 2
    assert m['topics_topic_queue_in_flight{topic="work"}'] == 1
    assert 'topics_topic_queue_ready{topic="plain"}' not in m


def test_metrics_escape_topic_labels(client: TestClient) -> None:
    put_topic(client, "a:b.c-d_e")
    assert 'topics_topic_head_seq{topic="a:b.c-d_e"} 0' in client.get("/v0/metrics").text


def test_ready_is_503_not_ready_when_storage_is_unreachable(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = client.app.state.services.get().engine  # type: ignore[attr-defined]

    def broken(*args: object, **kwargs: object) -> None:
        raise StorageUnavailable("storage error: boom")

    # Storage itself fails (at the port), whichever engine call readiness uses.
    monkeypatch.setattr(engine.heads, "count_live", broken)
    monkeypatch.setattr(engine.heads, "list_live", broken)
    for url in READY:
        r = client.get(url)
        err = assert_error(r, 503, "not_ready")
        assert r.headers["retry-after"]
        assert 0.0 <= err["detail"]["replay_progress"] <= 1.0
    ok(client.get("/v0/health"))


def test_ready_is_503_shutting_down_while_draining(client: TestClient) -> None:
    client.app.state.services.get().shutting_down = True  # type: ignore[attr-defined]
    for url in READY:
        r = client.get(url)
        assert_error(r, 503, "shutting_down")
        assert r.headers["retry-after"]
    # metrics still answer 200, reporting not ready
    r = client.get("/v0/metrics")
    assert r.status_code == 200
    assert metric_lines(r.text)["topics_ready"] == 0
