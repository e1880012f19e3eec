"""Acceptance: several OS processes appending to one topic through two server processes
that share one emulator never lose, duplicate or reorder data."""

from __future__ import annotations

import multiprocessing as mp
import random
from collections.abc import Callable

import httpx
import pytest

from tests.e2e.conftest import ServerProcess

pytestmark = [pytest.mark.serial, pytest.mark.e2e]

PRODUCERS = 8
APPENDS_PER_PRODUCER = 250
# Each idempotent append is sent twice (to both servers): fewer of them keep the run short;
# lost-response retries under injected faults are covered by tests/e2e/test_faults.py.
IDEMPOTENT_APPENDS_PER_PRODUCER = 120
TOPIC = "shared-log"


def _producer(args: tuple[int, list[str], bool, int]) -> list[tuple[int, int, list[int]]]:
    """Sends APPENDS_PER_PRODUCER (IDEMPOTENT_... when sent twice) appends of 1..10 records;
    returns (index, n, seqs)."""
    producer, urls, send_twice, seed = args
    appends = IDEMPOTENT_APPENDS_PER_PRODUCER if send_twice else APPENDS_PER_PRODUCER
    rng = random.Random(seed)
    out: list[tuple[int, int, list[int]]] = []
    item = 0
    with httpx.Client(timeout=60) as http:
        for i in range(appends):
            n = rng.choice([1, 1, 1, 2, 5, 10])
            records = [
                {"data": {"p": producer, "i": item + k}, "node": f"p{producer}"} for k in range(n)
            ]
            body: dict[str, object] = {"records": records}
            if send_twice:
                body["idempotency_key"] = f"p{producer}-{i}"
            first = rng.choice(urls)
            r = http.post(f"{first}/v0/topics/{TOPIC}", json=body)
            assert r.status_code in (200, 201), r.text
            seqs = r.json()["seqs"]
            if send_twice:
                # The retry goes to the other server process.
                other = urls[1] if first == urls[0] else urls[0]
                r2 = http.post(f"{other}/v0/topics/{TOPIC}", json=body)
                assert r2.status_code == 200, r2.text
                assert r2.json()["deduped"] is True, r2.text
                assert r2.json()["seqs"] == seqs
            out.append((item, n, seqs))
            item += n
    return out


def _read_all(url: str) -> list[dict[str, object]]:
    records: list[dict[str, object]] = []
    cursor = 0
    with httpx.Client(timeout=60) as http:
        while True:
            r = http.post(f"{url}/v0/topics/{TOPIC}/diff", json={"from_seq": cursor, "limit": 1000})
            assert r.status_code == 200, r.text
            body = r.json()
            records.extend(body["records"])
            cursor = body["next_from_seq"]
            if body["caught_up"]:
                return records


def _run(servers: list[ServerProcess], send_twice: bool) -> None:
    urls = [s.url for s in servers]
    ctx = mp.get_context("spawn")
    with ctx.Pool(PRODUCERS) as pool:
        results = pool.map(_producer, [(p, urls, send_twice, 1000 + p) for p in range(PRODUCERS)])
    expected_total = sum(n for res in results for (_i, n, _s) in res)

    # Every server process sees the same complete log.
    logs = [_read_all(u) for u in urls]
    assert logs[0] == logs[1]
    log = logs[0]
    seqs = [r["$seq"] for r in log]
    assert seqs == list(range(1, expected_total + 1)), "seqs must be exactly 1..N"

    seen: dict[tuple[int, int], int] = {}
    for r in log:
        data = r["data"]
        assert isinstance(data, dict)
        key = (data["p"], data["i"])
        assert key not in seen, f"duplicate record {key}"
        seen[key] = r["$seq"]  # type: ignore[assignment]
    for p, res in enumerate(results):
        for item, n, returned in res:
            # Each batch landed contiguously at exactly the seqs the server acknowledged...
            assert returned == list(range(returned[0], returned[0] + n))
            assert [seen[(p, item + k)] for k in range(n)] == returned
        # ...and each producer's order is preserved.
        order = [seen[(p, i)] for i in range(sum(n for _i, n, _s in res))]
        assert order == sorted(order)


def test_two_servers_eight_producers_no_loss_no_dup_no_reorder(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    servers = start_servers(2)
    _run(servers, send_twice=False)


def test_idempotent_retries_across_servers_never_duplicate(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    servers = start_servers(2)
    _run(servers, send_twice=True)
