"""One topic, many writers, as standard Lambda runs them (docs/storage.md "The sequencer"):
N server processes, one writer bound to each, so every process serves one request at a
time and never shares a group commit. Every request reaches DynamoDB through a counting
proxy (tests/faults/proxy.py, no faults), so the test sees what storage saw.

With seqs from the topic's counter, no write is ever refused: each append is one reservation
(UpdateItem) and one frame put (PutItem), whatever the number of writers. Before the
sequencer every process raced the others for the next frame key and a lost race was a
refused, billed write (issue 41: 2.3 lost races per record with 8 writers)."""

from __future__ import annotations

import threading

import httpx
import pytest

from tests.e2e.conftest import Cluster
from tests.faults.harness import FaultProxyProcess

pytestmark = [pytest.mark.serial, pytest.mark.e2e, pytest.mark.timeout(300)]

TOPIC = "many-writers"
WRITERS = 4
APPENDS = 60


def test_writers_in_one_request_processes_never_race(cluster: Cluster, tmp_path: object) -> None:
    with FaultProxyProcess(cluster.emulator.url, seed=1) as proxy:
        env = {"AWS_ENDPOINT_URL_DYNAMODB": proxy.url, "HEADWATER_TIERING_INTERVAL_MS": "0"}
        servers = [cluster.start_server(str(tmp_path), **env) for _ in range(WRITERS)]
        r = httpx.put(f"{servers[0].url}/v0/topics/{TOPIC}", json={}, timeout=30)
        assert r.status_code in (200, 201), r.text
        before = proxy.stats()
        acked: dict[int, list[int]] = {}
        errors: list[str] = []

        def writer(w: int) -> None:
            seqs: list[int] = []
            with httpx.Client(timeout=60) as http:
                for i in range(APPENDS):
                    body = {"records": [{"data": {"w": w, "i": i, "pad": "x" * 900}}]}
                    resp = http.post(f"{servers[w].url}/v0/topics/{TOPIC}", json=body)
                    if resp.status_code != 200:
                        errors.append(resp.text)
                        return
                    seqs.append(resp.json()["first_seq"])
            acked[w] = seqs

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        after = proxy.stats()
        total = WRITERS * APPENDS

        def delta(api: str) -> int:
            return int(after["forwarded_by_api"].get(api, 0)) - int(
                before["forwarded_by_api"].get(api, 0)
            )

        # THEN storage refused nothing: no lost race, no retry
        assert after["refused"] - before["refused"] == 0, after["by_api"]
        # AND each append was one reservation and one frame put, nothing else written
        assert delta("UpdateItem") == total
        assert delta("PutItem") == total
        assert delta("TransactWriteItems") == 0
        # AND the history holds every record once, at its acknowledged seq, seqs dense
        records: list[dict[str, object]] = []
        cursor = 0
        while True:
            body = httpx.post(
                f"{servers[0].url}/v0/topics/{TOPIC}/diff",
                json={"from_seq": cursor, "limit": 1000},
                timeout=30,
            ).json()
            records += body["records"]
            cursor = body["next_from_seq"]
            if body["caught_up"]:
                break
        assert [r["$seq"] for r in records] == list(range(1, total + 1))
        by_seq = {r["$seq"]: r["data"] for r in records}
        for w, seqs in acked.items():
            assert [by_seq[s] for s in seqs] == [  # type: ignore[index]
                {"w": w, "i": i, "pad": "x" * 900} for i in range(APPENDS)
            ]
            assert seqs == sorted(seqs)


def test_a_saturated_topic_answers_429_at_once_unless_the_writer_opts_out(
    cluster: Cluster, tmp_path: object
) -> None:
    """DynamoDB throttling the topic's head key (past ~1,000 writes a second): the
    reservation is not retried in the server (botocore would back off for seconds of billed
    Lambda time); the client gets 429 with Retry-After, as the spec's backpressure says. With
    `disable_backpressure` the server waits it out instead."""
    with FaultProxyProcess(cluster.emulator.url, seed=5) as proxy:
        env = {"AWS_ENDPOINT_URL_DYNAMODB": proxy.url, "HEADWATER_TIERING_INTERVAL_MS": "0"}
        server = cluster.start_server(str(tmp_path), **env)
        url = f"{server.url}/v0/topics/hot"
        assert httpx.post(url, json={"records": [{"data": 1}]}, timeout=30).status_code == 201
        # GIVEN every reservation is throttled
        proxy.set(throttle=1.0, only=["UpdateItem"])
        before = proxy.stats()
        # WHEN an append is sent THEN it is 429 throttled with Retry-After, after one attempt
        r = httpx.post(url, json={"records": [{"data": 2}]}, timeout=60)
        assert r.status_code == 429, r.text
        assert r.json()["error"]["code"] == "throttled" and r.headers["retry-after"] == "1"
        # (a sub-second hint, spread so that writers do not come back together)
        assert 20 <= r.json()["error"]["detail"]["retry_after_ms"] <= 200
        after = proxy.stats()
        assert (
            after["by_api"]["UpdateItem"]["throttle"]
            - before["by_api"].get("UpdateItem", {}).get("throttle", 0)
            == 1
        )
        # AND a Durable Streams append is told the same way (the protocol's 429 backpressure)
        proxy.calm()
        ds = f"{server.url}/v1/stream/hot-ds"
        json_type = {"Content-Type": "application/json"}
        assert httpx.put(ds, headers=json_type, timeout=30).status_code == 201
        proxy.set(throttle=1.0, only=["UpdateItem"])
        r = httpx.post(ds, content=b'{"x": 1}', headers=json_type, timeout=60)
        assert r.status_code == 429, r.text
        assert r.headers["retry-after"] == "1"
        # AND with half the reservations throttled, one that opts out is written after the
        # server's own retries
        proxy.set(throttle=0.5, only=["UpdateItem"])
        r = httpx.post(
            url, json={"records": [{"data": 3}], "disable_backpressure": True}, timeout=120
        )
        assert r.status_code == 200, r.text
        proxy.calm()
        body = httpx.post(f"{url}/diff", json={"from_seq": 0}, timeout=30).json()
        assert [rec["data"] for rec in body["records"]] == [1, 3]
