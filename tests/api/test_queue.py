"""Work queues over HTTP (spec §10): claim / ack / nack / extend, counters, errors."""

from __future__ import annotations

from typing import Any

from starlette.testclient import TestClient


def make_queue(client: TestClient, name: str = "jobs", **cfg: Any) -> None:
    r = client.put(f"/v0/topics/{name}", json={"type": "queue", **cfg})
    assert r.status_code == 201, r.text


def produce(client: TestClient, name: str, n: int) -> list[int]:
    r = client.post(f"/v0/topics/{name}", json={"records": [{"data": {"i": i}} for i in range(n)]})
    assert r.status_code in (200, 201), r.text
    return list(r.json()["seqs"])


def test_claim_ack_round_trip(client: TestClient) -> None:
    make_queue(client)
    seqs = produce(client, "jobs", 5)
    r = client.post("/v0/topics/jobs/claim", json={"node": "w1", "max": 3})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [j["$seq"] for j in body["claimed"]] == seqs[:3]
    assert body["count"] == 3 and body["ready"] == 2
    job = body["claimed"][0]
    assert job["lease_id"].startswith("lease_") and job["deliveries"] == 1
    assert job["data"] == {"i": 0}
    r = client.post(
        "/v0/topics/jobs/ack",
        json={"node": "w1", "seqs": [seqs[0], seqs[1], seqs[4]]},
    )
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["acked"] == 2 and out["skipped"] == [seqs[4]]
    assert out["ready"] == 2 and out["in_flight"] == 1
    state = client.get("/v0/topics/jobs").json()
    assert state["queue"] == {"ready": 2, "in_flight": 1, "dead_lettered": 0}
    assert state["count"] == 3
