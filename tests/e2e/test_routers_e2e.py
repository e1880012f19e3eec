"""Routers between two "nodes" (spec §6) against real uvicorn server processes sharing one
emulator: symmetric A <-> B routers with allow_cycle; node a writes A through one server,
node b writes B through the other. Readers filtering on their own `node` see every record
of the other node and none of their own (no echo), and the topics stop growing (no loop)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]

N = 5


def _diff(url: str, topic: str, **body: Any) -> dict[str, Any]:
    resp = httpx.post(f"{url}/v0/topics/{topic}/diff", json=body, timeout=10)
    assert resp.status_code == 200, resp.text
    out: dict[str, Any] = resp.json()
    return out


def _wait_count(url: str, topic: str, want: int, deadline: float) -> None:
    while True:
        count = httpx.get(f"{url}/v0/topics/{topic}", timeout=10).json()["count"]
        if count >= want or time.monotonic() > deadline:
            assert count == want, f"{topic}: {count} records, wanted {want}"
            return
        time.sleep(0.1)


def test_symmetric_nodes_see_each_other_without_echo_or_loop(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    s1, s2 = start_servers(2)
    # GIVEN topics A and B and routers both ways (an intentional cycle)
    for topic in ("A", "B"):
        assert httpx.put(f"{s1.url}/v0/topics/{topic}", json={}).status_code == 201
    resp = httpx.put(f"{s1.url}/v0/routers/A->B", json={"source": "A", "dest": "B"})
    assert resp.status_code == 201, resp.text
    resp = httpx.put(f"{s1.url}/v0/routers/B->A", json={"source": "B", "dest": "A"})
    assert resp.status_code == 409 and resp.json()["error"]["detail"]["cycle"] == [
        "B",
        "A",
        "B",
    ]
    resp = httpx.put(
        f"{s1.url}/v0/routers/B->A", json={"source": "B", "dest": "A", "allow_cycle": True}
    )
    assert resp.status_code == 201, resp.text
    # WHEN node a writes A on server 1 and node b writes B on server 2
    records_a = [{"data": {"from": "a", "i": i}} for i in range(N)]
    records_b = [{"data": {"from": "b", "i": i}} for i in range(N)]
    r = httpx.post(f"{s1.url}/v0/topics/A", json={"node": "a", "records": records_a})
    assert r.status_code == 200, r.text
    r = httpx.post(f"{s2.url}/v0/topics/B", json={"node": "b", "records": records_b})
    assert r.status_code == 200, r.text
    # THEN each topic holds both nodes' records exactly once
    deadline = time.monotonic() + 15
    _wait_count(s2.url, "A", 2 * N, deadline)
    _wait_count(s2.url, "B", 2 * N, deadline)
    # AND readers filtering on their own node see only the other node's records
    on_a = _diff(s2.url, "A", node="a")["records"]
    on_b = _diff(s1.url, "B", node="b")["records"]
    assert [(x["$node"], x["data"]) for x in on_a] == [("b", rec["data"]) for rec in records_b]
    assert [(x["$node"], x["data"]) for x in on_b] == [("a", rec["data"]) for rec in records_a]
    # AND a long-poll from the last seen position stays quiet: nothing is bouncing around
    head_a = _diff(s2.url, "A", node="a")["next_from_seq"]
    quiet = _diff(s2.url, "A", node="a", from_seq=head_a, wait_ms=1500)
    assert quiet["records"] == []
    for topic in ("A", "B"):
        assert httpx.get(f"{s1.url}/v0/topics/{topic}").json()["count"] == 2 * N
    routers = httpx.get(f"{s2.url}/v0/routers").json()["routers"]
    assert {r["router"]: r["forwarded_total"] for r in routers} == {"A->B": N, "B->A": N}
    # AND deleting A cascades to both routers
    deleted = httpx.delete(f"{s2.url}/v0/topics/A").json()
    assert deleted["routers_removed"] == ["A->B", "B->A"]


def test_a_freshly_started_process_forwards_existing_routers(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    # GIVEN a router created through a server that then stops
    (first,) = start_servers(1)
    assert httpx.put(f"{first.url}/v0/topics/src", json={}).status_code == 201
    resp = httpx.put(f"{first.url}/v0/routers/src->dst", json={"source": "src", "dest": "dst"})
    assert resp.status_code == 201, resp.text
    first.stop()
    # WHEN a new process starts and only ever sees appends (no /v0/routers request)
    (fresh,) = start_servers(1)
    records = [{"data": {"i": i}} for i in range(N)]
    r = httpx.post(f"{fresh.url}/v0/topics/src", json={"records": records}, timeout=10)
    assert r.status_code in (200, 201), r.text
    # THEN it forwards them: the forwarder runs from boot, not from the first router request
    _wait_count(fresh.url, "dst", N, time.monotonic() + 15)
    got = _diff(fresh.url, "dst", from_seq=0)["records"]
    assert [rec["data"]["i"] for rec in got] == list(range(N))
