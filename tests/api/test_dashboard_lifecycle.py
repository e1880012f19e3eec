"""/api/v2 streams' ends and limits (docs/dashboard.md): the maximum duration, a server
shutdown (open streams end, new ones are 503, slots freed), ingest batch caps, a feed that
keeps following through a storage failure, and the HEADWATER_DASHBOARD_* settings."""

from __future__ import annotations

import time
from typing import Any

import pytest
from api_helpers import MakeClient
from dashboard_helpers import STREAM, detail, fast, item, open_stream, post_items, status
from starlette.testclient import TestClient
from test_tiering import services

from headwater.errors import ConfigurationError, StorageUnavailable
from headwater.settings import Limits, Settings

pytestmark = pytest.mark.api


def read_to_end(sse: Any, timeout_s: float = 10.0) -> list[str]:
    """Event names until the stream ends (EOFError), bounded."""
    names: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            fr = sse.frame()
        except EOFError:
            return names
        if fr.event:
            names.append(fr.event)
    raise AssertionError(f"the stream did not end within {timeout_s}s: {names}")


def test_a_stream_ends_at_its_maximum_duration_and_frees_its_slot(
    make_client: MakeClient,
) -> None:
    client = make_client(dashboard=fast(max_connection_sec=1))
    t0 = time.monotonic()
    with open_stream(client, STREAM) as sse:
        names = read_to_end(sse, timeout_s=10)
    assert 0.9 <= time.monotonic() - t0 < 10
    assert names[0] == "metrics" and "heartbeat" in names
    assert status(client)["connections"] == 0


def test_shutdown_ends_open_streams_and_refuses_new_ones(make_client: MakeClient) -> None:
    client = make_client(dashboard=fast())
    with open_stream(client, STREAM) as sse:
        assert sse.event().event == "metrics"
        assert status(client)["connections"] == 1
        # WHEN the server starts shutting down (on its loop, as the dev server does)
        svc = services(client)
        client.portal.call(svc.begin_shutdown)  # type: ignore[union-attr]
        # THEN the open stream ends
        read_to_end(sse)
    # AND its slot is free, and a new stream is 503 with Retry-After 30
    assert status(client)["connections"] == 0
    with client.stream("GET", STREAM) as resp:
        resp.read()
        body = detail(resp, 503, "Server is shutting down. Try again later.")
    assert body["retry_after"] == 30 and resp.headers["retry-after"] == "30"


def test_ingest_batch_over_the_record_cap_is_refused_whole(make_client: MakeClient) -> None:
    client = make_client(limits=Limits(max_batch_records=3))
    resp = client.post("/api/v2/sentiment", json=[item() for _ in range(4)])
    body = detail(resp, 400, "at most 3 items per request")
    assert body["count"] == 4
    post_items(client, [item() for _ in range(3)])
    assert client.get("/api/v2/metrics").json()["total"] == 3


def test_at_most_100_item_errors_are_reported(client: TestClient) -> None:
    resp = client.post("/api/v2/sentiment", json=[{"ticker": "AAPL"}] * 150)
    body = detail(resp, 400, "invalid sentiment item")
    assert len(body["errors"]) == 100
    assert [e["index"] for e in body["errors"]] == list(range(100))
    assert client.get("/api/v2/metrics").json()["total"] == 0


def test_the_feed_keeps_following_through_a_storage_failure(
    make_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = make_client(dashboard=fast())
    post_items(client, [item(ticker="AAPL")])
    with open_stream(client, STREAM) as sse:
        assert sse.next_of("metrics").data["total"] == 1
        # GIVEN reads of the topic's records fail for a while
        engine = services(client).engine
        real = engine.read_range
        failures = {"left": 3}

        async def flaky(*args: Any, **kwargs: Any) -> Any:
            if failures["left"] > 0:
                failures["left"] -= 1
                raise StorageUnavailable("storage error: injected")
            return await real(*args, **kwargs)

        monkeypatch.setattr(engine, "read_range", flaky)
        post_items(client, [item(ticker="MSFT")])
        # THEN the stream stays open and the metrics catch up once storage is back
        deadline = time.monotonic() + 15
        while True:
            fr = sse.next_of("metrics", timeout_s=15)
            if fr.data["total"] == 2:
                break
            assert time.monotonic() < deadline, fr.data
    assert failures["left"] == 0


def test_dashboard_settings_from_the_environment() -> None:
    s = Settings.from_env(
        {
            "HEADWATER_DASHBOARD_TOPIC": "scores",
            "HEADWATER_DASHBOARD_MAX_CONNECTIONS": "7",
            "HEADWATER_DASHBOARD_HEARTBEAT_MS": "1500",
            "HEADWATER_DASHBOARD_BUFFER_EVENTS": "10",
            "HEADWATER_POLL_INTERVAL_MS": "300",
        }
    ).dashboard
    assert (s.topic, s.max_connections, s.heartbeat_ms, s.buffer_events) == ("scores", 7, 1500, 10)
    assert s.poll_ms == 300 and s.config_poll_ms == 1000  # locally: the engine's poll interval
    on_lambda = Settings.from_env(
        {"AWS_LAMBDA_FUNCTION_NAME": "fn", "HEADWATER_LAMBDA_TIMEOUT_SEC": "900"}
    ).dashboard
    # on Lambda: the contract's 5 s poll, and streams close inside the invocation limit
    assert on_lambda.poll_ms == 5000 and on_lambda.config_poll_ms == 5000
    assert on_lambda.max_connection_sec == 840
    with pytest.raises(ConfigurationError):
        Settings.from_env({"HEADWATER_DASHBOARD_TOPIC": "not a topic"})
    with pytest.raises(ConfigurationError):
        Settings.from_env({"HEADWATER_DASHBOARD_MAX_CONNECTIONS": "-1"})
