"""Acceptance (issue 9): dashboard metrics equal a brute-force recount of the ingested items
when part of them is sealed and rolled up by the Glue job (the feed starts from the
job's sentiment rollup and reads only the records after it) and the rest is in the tail,
including after records already rolled up are deleted."""

from __future__ import annotations

import random
import re
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pyspark.sql import SparkSession
from rollup.job import main

from headwater.dev.emulator import MotoServer
from headwater.settings import Settings
from headwater.storage.bootstrap import ensure_resources
from headwater.storage.clients import AwsClients
from tests.e2e.conftest import Cluster, ServerProcess, _session

pytestmark = pytest.mark.glue

TICKERS = ["AAPL", "MSFT", "GOOGL", "TSLA"]
LABELS = ["positive", "neutral", "negative"]
SERVER_ENV = {
    "HEADWATER_SEAL_RECORDS": "10",
    "HEADWATER_SEAL_AGE_MS": "0",
    "HEADWATER_TIERING_INTERVAL_MS": "100",
}


@pytest.fixture(scope="module")
def emulator() -> Iterator[MotoServer]:
    with MotoServer() as server:
        yield server


def item(rng: random.Random) -> dict[str, Any]:
    return {
        "ticker": rng.choice(TICKERS).lower() if rng.random() < 0.2 else rng.choice(TICKERS),
        "score": round(rng.uniform(-1, 1), 3),
        "label": rng.choice(LABELS),
        "confidence": round(rng.random(), 3),
        "source": "test",
    }


def recount(items: list[dict[str, Any]]) -> dict[str, Any]:
    labels = Counter(i["label"] for i in items)
    return {
        "total": len(items),
        "positive": labels["positive"],
        "neutral": labels["neutral"],
        "negative": labels["negative"],
        "by_tag": dict(Counter(i["ticker"].upper() for i in items)),
    }


def metrics_of(http: httpx.Client, base: str) -> dict[str, Any]:
    got = http.get(f"{base}/api/v2/metrics").json()
    return {k: got[k] for k in ("total", "positive", "neutral", "negative", "by_tag")}


def wait_sealed(http: httpx.Client, url: str, through: int) -> None:
    deadline = time.monotonic() + 20
    while http.get(url).json()["sealed_through"] < through and time.monotonic() < deadline:
        time.sleep(0.1)
    assert http.get(url).json()["sealed_through"] == through


def rollup_through(log_path: str) -> list[int]:
    """How far the rollup each feed build started from reached (0: no rollup used)."""
    lines = Path(log_path).read_text().splitlines()
    found = [re.search(r"dashboard feed built .* \(rollup through (\d+),", ln) for ln in lines]
    return [int(m.group(1)) for m in found if m]


def test_metrics_are_exact_over_rolled_up_sealed_and_tail_items(
    spark: SparkSession, emulator: MotoServer, tmp_path: Path
) -> None:
    prefix = f"dash-{uuid.uuid4().hex[:8]}"
    settings = Settings(resource_prefix=prefix)
    ensure_resources(settings, AwsClients.create(settings, session=_session(emulator)))
    cluster = Cluster(emulator, prefix)
    args = [
        "--bucket",
        settings.bucket_name,
        "--resource-prefix",
        prefix,
        "--endpoint-url",
        emulator.url,
        "--sentiment-topics",
        "sentiment",
    ]
    rng = random.Random(9)
    servers: list[ServerProcess] = []
    try:
        first = cluster.start_server(str(tmp_path), **SERVER_ENV)
        servers.append(first)
        topic = f"{first.url}/v0/topics/sentiment"
        with httpx.Client(timeout=30) as http:
            # GIVEN 30 items: 20 through the ingest route, 10 records through /v0 of which
            # 4 are not items (never counted)
            items = [item(rng) for _ in range(20)]
            assert http.post(f"{first.url}/api/v2/sentiment", json=items).status_code == 201
            v0_items = [item(rng) for _ in range(6)]
            junk: list[Any] = [{"ticker": "AAPL"}, "text", {**item(rng), "score": 7}, [1]]
            body = {"records": [{"data": d} for d in [*v0_items, *junk]]}
            assert http.post(topic, json=body).status_code in (200, 201)
            items += v0_items
            # sealed into S3 segments, and rolled up by the Glue job
            wait_sealed(http, topic, 30)
            assert main(args, spark=spark) == 0
            # AND more items after the rollup (in the tail)
            tail = [item(rng) for _ in range(7)]
            assert http.post(f"{first.url}/api/v2/sentiment", json=tail).status_code == 201
            items += tail

            # WHEN a fresh process builds its feed
            second = cluster.start_server(str(tmp_path))
            servers.append(second)
            # THEN its metrics equal the recount, and it started from the rollup
            assert metrics_of(http, second.url) == recount(items)
            assert rollup_through(second.log_path) == [30]
            assert metrics_of(http, first.url) == recount(items)

            # GIVEN rolled-up items deleted (the rollup no longer matches the history)
            gone = http.post(f"{topic}/delete", json={"before_seq": 6}).json()
            assert gone["deleted"] == 5
            remaining = items[5:]
            # THEN every process recounts without them
            assert metrics_of(http, second.url) == recount(remaining)
            third = cluster.start_server(str(tmp_path))
            servers.append(third)
            assert metrics_of(http, third.url) == recount(remaining)
            assert rollup_through(third.log_path) == [0]

            # AND after the job runs again, a fresh process starts from the new rollup
            assert main(args, spark=spark) == 0
            fourth = cluster.start_server(str(tmp_path))
            servers.append(fourth)
            assert metrics_of(http, fourth.url) == recount(remaining)
            # (the server's upkeep may have sealed the later items too by then)
            assert rollup_through(fourth.log_path)[0] >= 30
    finally:
        for srv in servers:
            srv.stop()
