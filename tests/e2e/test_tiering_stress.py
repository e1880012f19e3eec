"""Acceptance (issue 5): while several producer processes append and several reader
processes follow the log through three server processes, every server seals the tail into
S3 segments and trims it (in-process upkeep on appends and on a fast timer). Nothing is
lost, duplicated or reordered, and the log ends up in segments."""

from __future__ import annotations

import multiprocessing as mp
import random
import time
from collections.abc import Callable

import httpx
import pytest

from headwater.engine.ports import SEGMENT_PREFIX
from headwater.settings import Settings
from headwater.storage.clients import AwsClients
from tests.e2e.conftest import Cluster, ServerProcess

pytestmark = [pytest.mark.serial, pytest.mark.e2e]

TOPIC = "tiered"
PRODUCERS = 4
APPENDS = 120
READERS = 3
TIERING_ENV = {
    "HEADWATER_SEAL_RECORDS": "40",
    "HEADWATER_SEAL_AGE_MS": "0",
    "HEADWATER_SEAL_GRACE_MS": "300",
    "HEADWATER_SEGMENT_BLOCK_BYTES": "512",
    "HEADWATER_TIERING_INTERVAL_MS": "150",
}


def _sizes(producer: int) -> list[int]:
    rng = random.Random(1000 + producer)
    return [rng.choice([1, 1, 2, 3, 7]) for _ in range(APPENDS)]


def _producer(args: tuple[int, list[str]]) -> int:
    producer, urls = args
    rng = random.Random(producer)
    item = 0
    with httpx.Client(timeout=60) as http:
        for n in _sizes(producer):
            records = [
                {"data": {"p": producer, "i": item + k, "pad": "x" * rng.randrange(0, 300)}}
                for k in range(n)
            ]
            r = http.post(f"{rng.choice(urls)}/v0/topics/{TOPIC}", json={"records": records})
            assert r.status_code in (200, 201), r.text
            item += n
    return item


def _reader(args: tuple[int, list[str], int]) -> list[tuple[int, int, int]]:
    """Follows the log from 0 through random servers with random limits until `total`
    records were read; returns (seq, producer, item) in the order received."""
    reader, urls, total = args
    rng = random.Random(100 + reader)
    seen: list[tuple[int, int, int]] = []
    cursor = 0
    deadline = time.monotonic() + 180
    with httpx.Client(timeout=60) as http:
        while len(seen) < total and time.monotonic() < deadline:
            r = http.post(
                f"{rng.choice(urls)}/v0/topics/{TOPIC}/diff",
                json={"from_seq": cursor, "limit": rng.choice([1, 5, 50, 300]), "wait_ms": 300},
            )
            if r.status_code == 404:
                time.sleep(0.05)  # not created yet
                continue
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["tombstone"] is None, body
            for rec in body["records"]:
                seen.append((rec["$seq"], rec["data"]["p"], rec["data"]["i"]))
            assert body["next_from_seq"] >= cursor
            cursor = body["next_from_seq"]
    return seen


def test_sealing_under_concurrent_appends_and_reads_loses_nothing(
    cluster: Cluster, start_servers: Callable[..., list[ServerProcess]]
) -> None:
    servers = start_servers(3, **TIERING_ENV)
    urls = [s.url for s in servers]
    expected = {p: sum(_sizes(p)) for p in range(PRODUCERS)}
    total = sum(expected.values())
    ctx = mp.get_context("spawn")
    with ctx.Pool(PRODUCERS + READERS) as pool:
        readers = pool.map_async(_reader, [(r, urls, total) for r in range(READERS)])
        written = pool.map(_producer, [(p, urls) for p in range(PRODUCERS)])
        seen_by = readers.get(timeout=240)
    assert written == [expected[p] for p in range(PRODUCERS)]
    for seen in seen_by:
        # Every seq exactly once, in order; each producer's records in its own order.
        assert [s for s, _, _ in seen] == list(range(1, total + 1))
        for p in range(PRODUCERS):
            assert [i for _, q, i in seen if q == p] == list(range(expected[p]))
    # The history went to S3 while all this happened: segments cover most of the log, the
    # tail behind them was trimmed, and a cold read of everything still agrees.
    deadline = time.monotonic() + 30
    head: dict[str, object] = {}
    while time.monotonic() < deadline:
        head = httpx.get(f"{urls[0]}/v0/topics/{TOPIC}").json()
        if head["sealed_through"] == total:
            break
        time.sleep(0.2)
    assert head["sealed_through"] == total, head
    settings = Settings(resource_prefix=cluster.prefix)
    s3 = AwsClients.create(settings).s3
    listed = s3.list_objects_v2(Bucket=settings.bucket_name, Prefix=SEGMENT_PREFIX)
    assert listed.get("KeyCount", 0) >= total // 80
    cold = _reader((9, [urls[2]], total))
    assert [s for s, _, _ in cold] == list(range(1, total + 1))


def test_an_append_past_a_cap_starts_eviction_by_itself(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    (server,) = start_servers(1, HEADWATER_TIERING_INTERVAL_MS="0")
    url = f"{server.url}/v0/topics/capped"
    with httpx.Client(timeout=30) as http:
        assert http.put(url, json={"cap_records": 5}).status_code == 201
        for i in range(12):
            assert http.post(url, json={"records": [{"data": i}]}).status_code == 200
        deadline = time.monotonic() + 20
        state = http.get(url).json()
        while state["count"] > 5 and time.monotonic() < deadline:
            time.sleep(1.1)  # upkeep starts at most once a second per topic
            http.post(url, json={"records": [{"data": "more"}]})
            state = http.get(url).json()
        assert state["count"] <= 6, state
        body = http.post(f"{url}/diff", json={"from_seq": 1}).json()
        assert body["tombstone"]["reason"] == "cap"
