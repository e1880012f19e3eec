"""/v0/metrics content negotiation (spec §8.3): the Prometheus text format 0.0.4 by default,
OpenMetrics for `Accept: application/openmetrics-text` (what Prometheus itself asks for
first), JSON for `Accept: application/json`. Both text bodies are read back with
prometheus_client's parsers, so they are valid expositions carrying the same samples."""

from __future__ import annotations

import pytest
from api_helpers import append_data, ok, put_topic
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as parse_openmetrics,
)
from prometheus_client.parser import text_string_to_metric_families as parse_prometheus
from starlette.testclient import TestClient

# What a Prometheus server (2.x, 3.x) sends when it scrapes.
PROMETHEUS_SCRAPE_ACCEPT = (
    "application/openmetrics-text;version=1.0.0;q=0.5,"
    "application/openmetrics-text;version=0.0.1;q=0.4,"
    "text/plain;version=0.0.4;q=0.3,*/*;q=0.1"
)


def samples(families: object) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in families:  # type: ignore[attr-defined]
        assert family.type == "gauge", family
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def seed(client: TestClient) -> None:
    append_data(client, "jobs", 1, 2, 3)
    put_topic(client, "work", {"type": "queue"})
    append_data(client, "work", "a")
    ok(client.post("/v0/topics/work/claim", json={"node": "w1"}))


@pytest.mark.parametrize(
    "accept",
    [
        "application/openmetrics-text",
        "application/openmetrics-text; version=1.0.0",
        PROMETHEUS_SCRAPE_ACCEPT,
    ],
)
def test_openmetrics_is_served_when_asked_for(client: TestClient, accept: str) -> None:
    seed(client)
    r = client.get("/v0/metrics", headers={"accept": accept})
    assert r.status_code == 200
    ctype = r.headers["content-type"]
    assert ctype.startswith("application/openmetrics-text; version=1.0.0"), ctype
    assert r.text.endswith("# EOF\n")  # OpenMetrics' terminator; the 0.0.4 format has none
    got = samples(parse_openmetrics(r.text))
    assert got[("topics_topics", ())] == 2
    assert got[("topics_queue_leases_in_flight", ())] == 1
    assert got[("topics_topic_head_seq", (("topic", "jobs"),))] == 3
    assert got[("topics_topic_queue_in_flight", (("topic", "work"),))] == 1
    assert ("topics_topic_queue_ready", (("topic", "jobs"),)) not in got
    assert got[("topics_topics_by_class", (("class", "disk"),))] == 2


@pytest.mark.parametrize("accept", [None, "text/plain", "*/*", "text/plain;version=0.0.4"])
def test_prometheus_text_stays_the_default(client: TestClient, accept: str | None) -> None:
    seed(client)
    r = client.get("/v0/metrics", headers={"accept": accept} if accept else {})
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert "# EOF" not in r.text
    got = samples(parse_prometheus(r.text))
    assert got[("topics_topics", ())] == 2
    assert got[("topics_topic_head_seq", (("topic", "jobs"),))] == 3
    assert got[("topics_topic_records_live", (("topic", "work"),))] == 1
    # the same numbers as the OpenMetrics body (but the clock's and the process's RSS)
    moving = ("topics_uptime_ms", "headwater_memory_rss_bytes")
    om = client.get("/v0/metrics", headers={"accept": "application/openmetrics-text"}).text
    assert {k: v for k, v in samples(parse_openmetrics(om)).items() if k[0] not in moving} == {
        k: v for k, v in got.items() if k[0] not in moving
    }


def test_json_wins_over_the_text_formats(client: TestClient) -> None:
    seed(client)
    body = ok(
        client.get(
            "/v0/metrics",
            headers={"accept": "application/json, application/openmetrics-text"},
        )
    )
    assert body["gauges"]["topics_topics"] == 2
    assert body["gauges"]['topics_topics_by_class{class="disk"}'] == 2
