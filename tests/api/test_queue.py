"""Work queues over HTTP (spec §10): claim / ack / nack / extend, counters, errors.

Time-dependent tests drive the engine's injected clock (LogEngine.clock) instead of sleeping."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from api_helpers import MakeClient, assert_error, ok, put_topic, read_all, seqs_of, state
from starlette.testclient import TestClient

from headwater.engine.queue_core import ClaimResult
from headwater.settings import Settings
from headwater.storage.clients import AwsClients

pytestmark = pytest.mark.api

SSE = {"accept": "text/event-stream"}
LEASE_RE = re.compile(r"lease_[0-9a-f]+")
VERBS = ("claim", "ack", "nack", "extend")


def make_queue(client: TestClient, name: str = "jobs", **cfg: Any) -> None:
    r = client.put(f"/v0/topics/{name}", json={"type": "queue", **cfg})
    assert r.status_code == 201, r.text


def produce(client: TestClient, name: str, n: int) -> list[int]:
    r = client.post(f"/v0/topics/{name}", json={"records": [{"data": {"i": i}} for i in range(n)]})
    assert r.status_code in (200, 201), r.text
    return list(r.json()["seqs"])


class FakeClock:
    def __init__(self) -> None:
        self.now = time.time_ns() // 1_000_000

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


def fake_clock(client: TestClient) -> FakeClock:
    clock = FakeClock()
    client.app.state.services.get().engine.clock = clock  # type: ignore[attr-defined]
    return clock


def call(client: TestClient, verb: str, topic: str = "jobs", **body: Any) -> Any:
    return client.post(f"/v0/topics/{topic}/{verb}", json=body)


def claim(client: TestClient, node: str = "w1", topic: str = "jobs", **kw: Any) -> dict[str, Any]:
    return ok(call(client, "claim", topic, node=node, **kw))


def op(
    client: TestClient, verb: str, seqs: list[int], node: str = "w1", topic: str = "jobs", **kw: Any
) -> dict[str, Any]:
    return ok(call(client, verb, topic, node=node, seqs=seqs, **kw))


def seqs(body: dict[str, Any]) -> list[int]:
    return [j["$seq"] for j in body["claimed"]]


def counters(client: TestClient, topic: str = "jobs") -> dict[str, Any]:
    return dict(state(client, topic)["queue"])


def valid_body(verb: str) -> dict[str, Any]:
    body: dict[str, Any] = {"node": "w1"}
    if verb != "claim":
        body["seqs"] = [1]
    if verb == "extend":
        body["lease_ms"] = 1000
    return body


# --- errors -------------------------------------------------------------------------------


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


def test_queue_routes_on_a_log_topic_are_409_not_a_queue(client: TestClient) -> None:
    put_topic(client, "plain")
    produce(client, "plain", 2)
    for verb in VERBS:
        assert_error(call(client, verb, "plain", **valid_body(verb)), 409, "not_a_queue")
    r = client.get("/v0/topics/plain/work", params={"node": "w1"}, headers=SSE)
    assert_error(r, 409, "not_a_queue")
    r = client.get("/v0/topics/plain/work", params={"node": "w1"})
    assert_error(r, 406, "not_acceptable")
    st = state(client, "plain")
    assert "queue" not in st and st["count"] == 2
    assert seqs_of(ok(client.post("/v0/topics/plain/diff", json={}))) == [1, 2]


def test_queue_routes_on_a_missing_topic_are_404_and_never_create_it(client: TestClient) -> None:
    for verb in VERBS:
        assert_error(call(client, verb, "ghost", **valid_body(verb)), 404, "topic_not_found")
    r = client.get("/v0/topics/ghost/work", params={"node": "w1"}, headers=SSE)
    assert_error(r, 404, "topic_not_found")
    assert_error(client.get("/v0/topics/ghost"), 404, "topic_not_found")
    assert ok(client.get("/v0/topics"))["topics"] == []


@pytest.mark.parametrize(
    ("verb", "body", "field"),
    [
        ("claim", {}, "node"),
        ("claim", {"node": 7}, "node"),
        ("claim", {"node": ""}, "node"),
        ("claim", {"node": "n" * 129}, "node"),
        ("claim", {"node": "w1", "max": "2"}, "max"),
        ("claim", {"node": "w1", "max": -1}, "max"),
        ("claim", {"node": "w1", "max": 1.5}, "max"),
        ("claim", {"node": "w1", "max": True}, "max"),
        ("claim", {"node": "w1", "lease_ms": "1000"}, "lease_ms"),
        ("claim", {"node": "w1", "lease_ms": -5}, "lease_ms"),
        ("ack", {"seqs": [1]}, "node"),
        ("ack", {"node": ["w1"], "seqs": [1]}, "node"),
        ("ack", {"node": "w1"}, "seqs"),
        ("ack", {"node": "w1", "seqs": []}, "seqs"),
        ("ack", {"node": "w1", "seqs": 1}, "seqs"),
        ("ack", {"node": "w1", "seqs": [1.5]}, "seqs"),
        ("ack", {"node": "w1", "seqs": ["1"]}, "seqs"),
        ("ack", {"node": "w1", "seqs": [0]}, "seqs"),
        ("ack", {"node": "w1", "seqs": [1, 2], "lease_ids": ["lease_ab"]}, "lease_ids"),
        ("ack", {"node": "w1", "seqs": [1], "lease_ids": ["nope"]}, "lease_ids"),
        ("ack", {"node": "w1", "seqs": [1], "lease_ids": [12]}, "lease_ids"),
        ("nack", {"node": "w1"}, "seqs"),
        ("nack", {"node": "w1", "seqs": [1], "delay_ms": "5"}, "delay_ms"),
        ("nack", {"node": "w1", "seqs": [1], "delay_ms": -1}, "delay_ms"),
        ("nack", {"node": "w1", "seqs": [1, 2], "lease_ids": ["lease_ab"]}, "lease_ids"),
        ("extend", {"node": "w1", "seqs": [1]}, "lease_ms"),
        ("extend", {"node": "w1", "seqs": [1], "lease_ms": "1000"}, "lease_ms"),
        ("extend", {"node": "w1", "seqs": [1], "lease_ms": 1000, "lease_ids": ["x"]}, "lease_ids"),
    ],
)
def test_invalid_bodies_are_400(
    client: TestClient, verb: str, body: dict[str, Any], field: str
) -> None:
    make_queue(client)
    produce(client, "jobs", 2)
    claim(client, max=2)
    err = assert_error(call(client, verb, **body), 400, "invalid_request")
    assert err["detail"]["field"] == field
    # nothing was leased, released or acked by the rejected call
    assert counters(client) == {"ready": 0, "in_flight": 2, "dead_lettered": 0}


def test_non_object_body_and_bad_work_query_are_400(client: TestClient) -> None:
    make_queue(client)
    for verb in VERBS:
        assert_error(client.post(f"/v0/topics/jobs/{verb}", json=[1]), 400, "invalid_request")
    for params in ({}, {"node": ""}, {"node": "w1", "max": "x"}, {"node": "w1", "max": "0"}):
        r = client.get("/v0/topics/jobs/work", params=params, headers=SSE)
        assert_error(r, 400, "invalid_request")


def test_seqs_beyond_max_claim_are_batch_too_large_and_claim_max_is_clamped(
    make_client: MakeClient, settings: Settings
) -> None:
    c = make_client(limits=dataclasses.replace(settings.limits, max_claim=3))
    make_queue(c)
    produce(c, "jobs", 5)
    for verb in ("ack", "nack", "extend"):
        body = {**valid_body(verb), "seqs": [1, 2, 3, 4]}
        err = assert_error(call(c, verb, **body), 400, "batch_too_large")
        assert err["detail"]["field"] == "seqs"
    got = claim(c, max=10)
    assert seqs(got) == [1, 2, 3] and got["count"] == 3 and got["ready"] == 2
    # exactly max_claim seqs is fine
    assert op(c, "ack", [1, 2, 3])["acked"] == 3


def test_put_cannot_change_topic_type(client: TestClient) -> None:
    put_topic(client, "plain")
    make_queue(client)
    r = client.put("/v0/topics/plain", json={"type": "queue"})
    assert_error(r, 409, "topic_exists_incompatible")
    assert_error(
        client.put("/v0/topics/jobs", json={"type": "log"}), 409, "topic_exists_incompatible"
    )
    # other fields stay mutable, and omitting type keeps the queue a queue
    body = ok(client.put("/v0/topics/jobs", json={"lease_ms": 5000}))
    assert body["config"]["type"] == "queue" and body["config"]["lease_ms"] == 5000
    assert state(client, "jobs")["type"] == "queue"
    assert "queue" not in state(client, "plain")


# --- claim --------------------------------------------------------------------------------


def test_claim_returns_ascending_jobs_with_lease_fields(client: TestClient) -> None:
    clock = fake_clock(client)
    make_queue(client, lease_ms=5000)
    records = [
        {"data": {"n": 0}, "tag": "tenant42:job-1", "meta": {"trace": "z9"}},
        {"data": "plain"},
        {"data": [1, 2], "tag": "t3"},
    ]
    ok(client.post("/v0/topics/jobs", json={"records": records}), 200, 201)
    body = claim(client, max=10)
    assert body["topic"] == "jobs" and body["count"] == 3 and body["ready"] == 0
    jobs = body["claimed"]
    assert seqs(body) == [1, 2, 3]
    for job in jobs:
        assert LEASE_RE.fullmatch(job["lease_id"]), job
        assert job["deadline"] == clock.now + 5000
        assert job["deliveries"] == 1
        assert job["$ts"] == clock.now
    assert len({j["lease_id"] for j in jobs}) == 3
    base = {"$seq", "$ts", "data", "lease_id", "deadline", "deliveries"}
    assert set(jobs[0]) == base | {"$tag", "meta"}
    assert (jobs[0]["$tag"], jobs[0]["meta"], jobs[0]["data"]) == (
        "tenant42:job-1",
        {"trace": "z9"},
        {"n": 0},
    )
    assert set(jobs[1]) == base and jobs[1]["data"] == "plain"
    assert set(jobs[2]) == base | {"$tag"} and jobs[2]["$tag"] == "t3"
    # an empty queue answers count 0, never an error
    again = claim(client, "w2", max=5)
    assert (again["claimed"], again["count"], again["ready"]) == ([], 0, 0)


def test_claim_default_max_is_one_and_short_queue_returns_fewer(client: TestClient) -> None:
    make_queue(client)
    produce(client, "jobs", 3)
    zero = claim(client, max=0)  # leases nothing, still reports the ready counter
    assert (zero["count"], zero["ready"]) == (0, 3)
    one = claim(client)
    assert seqs(one) == [1] and one["count"] == 1 and one["ready"] == 2
    rest = claim(client, max=5)
    assert seqs(rest) == [2, 3] and rest["count"] == 2 < 5 and rest["ready"] == 0


def test_claim_lease_ms_defaults_overrides_and_clamps(client: TestClient) -> None:
    clock = fake_clock(client)
    make_queue(client)  # topic default lease_ms = 30000
    make_queue(client, "short", lease_ms=7000)
    produce(client, "jobs", 5)
    produce(client, "short", 1)
    cases = [(None, 30_000), (2000, 2000), (5, 100), (0, 100), (10**9, 86_400_000)]
    for lease_ms, expect in cases:
        kw = {} if lease_ms is None else {"lease_ms": lease_ms}
        (job,) = claim(client, **kw)["claimed"]
        assert job["deadline"] == clock.now + expect, (lease_ms, job)
    (job,) = claim(client, topic="short")["claimed"]
    assert job["deadline"] == clock.now + 7000


# --- visibility timeout -------------------------------------------------------------------


def test_expired_lease_is_reclaimed_with_a_new_lease(client: TestClient) -> None:
    clock = fake_clock(client)
    make_queue(client)
    produce(client, "jobs", 1)
    (first,) = claim(client, lease_ms=1000)["claimed"]
    clock.advance(999)
    assert claim(client, "w2")["count"] == 0
    assert counters(client) == {"ready": 0, "in_flight": 1, "dead_lettered": 0}
    clock.advance(2)
    assert counters(client) == {"ready": 1, "in_flight": 0, "dead_lettered": 0}
    (again,) = claim(client, "w2", lease_ms=1000)["claimed"]
    assert again["$seq"] == first["$seq"] and again["deliveries"] == 2
    assert again["lease_id"] != first["lease_id"] and LEASE_RE.fullmatch(again["lease_id"])
    assert again["deadline"] == clock.now + 1000
    assert again["data"] == first["data"]


def test_lease_is_still_held_at_exactly_its_deadline(client: TestClient) -> None:
    # §10.3: the lease expires once now > deadline, so at now == deadline it is still held.
    clock = fake_clock(client)
    make_queue(client)
    produce(client, "jobs", 1)
    (job,) = claim(client, lease_ms=1000)["claimed"]
    clock.now = job["deadline"]
    assert counters(client) == {"ready": 0, "in_flight": 1, "dead_lettered": 0}
    assert claim(client, "w2")["count"] == 0
    clock.advance(1)
    assert seqs(claim(client, "w2")) == [job["$seq"]]


def test_reclaim_freelist_is_drained_before_fresh_jobs(client: TestClient) -> None:
    clock = fake_clock(client)
    make_queue(client)
    produce(client, "jobs", 2)
    assert seqs(claim(client, max=2, lease_ms=1000)) == [1, 2]
    produce(client, "jobs", 3)  # fresh 3, 4, 5
    clock.advance(1001)
    (job,) = claim(client, "w2")["claimed"]  # max 1: the reclaim wins over fresh 3
    assert (job["$seq"], job["deliveries"]) == (1, 2)
    body = claim(client, "w3", max=2)
    assert [(j["$seq"], j["deliveries"]) for j in body["claimed"]] == [(2, 2), (3, 1)]
    assert body["ready"] == 2


# --- ack ----------------------------------------------------------------------------------


def test_ack_only_by_the_holder_and_idempotent(client: TestClient) -> None:
    make_queue(client)
    s1, s2, s3 = produce(client, "jobs", 3)
    claim(client, max=2)
    other = op(client, "ack", [s1, s2], node="w2")
    assert (other["acked"], other["skipped"]) == (0, [s1, s2])
    done = op(client, "ack", [s1])
    assert (done["acked"], done["skipped"], done["ready"], done["in_flight"]) == (1, [], 1, 1)
    assert done["topic"] == "jobs"
    dup = op(client, "ack", [s1])
    assert (dup["acked"], dup["skipped"]) == (0, [s1])
    twice = op(client, "ack", [s2, s2], node="w2")  # not held by w2: nothing deleted
    assert twice["acked"] == 0 and state(client, "jobs")["count"] == 2
    # never-claimed and never-existing seqs are skipped too
    assert op(client, "ack", [s3, 999])["skipped"] == [s3, 999]
    st = state(client, "jobs")
    assert st["count"] == 2 and st["queue"] == {"ready": 1, "in_flight": 1, "dead_lettered": 0}
    assert [r["$seq"] for r in read_all(client, "jobs")] == [s2, s3]


def test_ack_after_expiry_by_holder_and_after_reclaim_by_old_holder(client: TestClient) -> None:
    clock = fake_clock(client)
    make_queue(client)
    s1, s2 = produce(client, "jobs", 2)
    claim(client, max=2, lease_ms=1000)
    clock.advance(5000)
    # s1: expired but nobody reclaimed it, its holder may still ack
    assert op(client, "ack", [s1])["acked"] == 1
    # s2: reclaimed by w2, the old holder's ack is skipped
    assert seqs(claim(client, "w2")) == [s2]
    late = op(client, "ack", [s2])
    assert (late["acked"], late["skipped"], late["in_flight"]) == (0, [s2], 1)
    assert op(client, "ack", [s2], node="w2")["acked"] == 1
    assert state(client, "jobs")["count"] == 0


def test_ack_performance_reports_fsync_ms(client: TestClient) -> None:
    make_queue(client)
    produce(client, "jobs", 1)
    claim(client)
    perf = op(client, "ack", [1])["performance"]
    assert perf.get("fsync_ms") == 0.0, perf


# --- fencing ------------------------------------------------------------------------------


def test_stale_lease_ids_are_fenced_after_a_same_node_reclaim(client: TestClient) -> None:
    clock = fake_clock(client)
    make_queue(client)
    (s1,) = produce(client, "jobs", 1)
    (old,) = claim(client, lease_ms=1000)["claimed"]
    clock.advance(1001)
    (new,) = claim(client, lease_ms=1000)["claimed"]  # same node, same seq, new lease
    assert (new["$seq"], new["deliveries"]) == (s1, 2) and new["lease_id"] != old["lease_id"]
    stale = [old["lease_id"]]
    assert op(client, "ack", [s1], lease_ids=stale)["skipped"] == [s1]
    assert op(client, "nack", [s1], lease_ids=stale)["skipped"] == [s1]
    ext = op(client, "extend", [s1], lease_ids=stale, lease_ms=5000)
    assert (ext["extended"], ext["skipped"], ext["deadlines"]) == (0, [s1], {})
    assert op(client, "ack", [s1], lease_ids=["lease_deadbeef"])["skipped"] == [s1]
    assert counters(client)["in_flight"] == 1
    ext = op(client, "extend", [s1], lease_ids=[new["lease_id"]], lease_ms=5000)
    assert ext["deadlines"] == {str(s1): clock.now + 5000}
    assert op(client, "ack", [s1], lease_ids=[new["lease_id"]])["acked"] == 1


# --- nack ---------------------------------------------------------------------------------


def test_nack_without_delay_is_claimable_at_once(client: TestClient) -> None:
    make_queue(client)
    s1, _ = produce(client, "jobs", 2)
    claim(client, max=2)
    assert op(client, "nack", [s1], node="w2")["skipped"] == [s1]
    out = op(client, "nack", [s1], delay_ms=0)
    assert (out["nacked"], out["skipped"], out["ready"], out["in_flight"]) == (1, [], 1, 1)
    assert counters(client) == {"ready": 1, "in_flight": 1, "dead_lettered": 0}
    # a released job is no longer held by anyone
    assert op(client, "nack", [s1])["skipped"] == [s1]
    assert op(client, "ack", [s1])["skipped"] == [s1]
    (job,) = claim(client, "w2", max=5)["claimed"]
    assert (job["$seq"], job["deliveries"]) == (s1, 2)


def test_delayed_nack_is_invisible_until_the_delay_passes(client: TestClient) -> None:
    clock = fake_clock(client)
    make_queue(client)
    (s1,) = produce(client, "jobs", 1)
    claim(client)
    out = op(client, "nack", [s1], delay_ms=5000)
    assert (out["nacked"], out["ready"], out["in_flight"]) == (1, 0, 0)
    st = state(client, "jobs")
    assert st["count"] == 1 and st["queue"] == {"ready": 0, "in_flight": 0, "dead_lettered": 0}
    clock.advance(4999)
    assert claim(client, "w2")["count"] == 0
    clock.advance(1)
    assert counters(client)["ready"] == 1
    (job,) = claim(client, "w2")["claimed"]
    assert (job["$seq"], job["deliveries"]) == (s1, 2)
    # delay_ms is clamped to one day
    op(client, "nack", [s1], node="w2", delay_ms=10**12)
    clock.advance(86_400_000 - 1)
    assert claim(client, "w3")["count"] == 0
    clock.advance(1)
    assert claim(client, "w3")["claimed"][0]["deliveries"] == 3


# --- extend -------------------------------------------------------------------------------


def test_extend_sets_the_deadline_from_now(client: TestClient) -> None:
    clock = fake_clock(client)
    make_queue(client)
    s1, s2 = produce(client, "jobs", 2)
    (job, _) = claim(client, max=2, lease_ms=1000)["claimed"]
    t0 = clock.now
    clock.advance(500)
    out = op(client, "extend", [s1], lease_ms=2000)
    assert out == {
        "topic": "jobs",
        "extended": 1,
        "skipped": [],
        "deadlines": {str(s1): t0 + 2500},
        "performance": out["performance"],
    }
    assert op(client, "extend", [s1], node="w2", lease_ms=2000)["skipped"] == [s1]
    clock.now = t0 + 1001  # past the original deadline: s2 expired, s1 is still held
    assert counters(client) == {"ready": 1, "in_flight": 1, "dead_lettered": 0}
    assert seqs(claim(client, "w2", max=2)) == [s2]
    # extend sets (here shortens), it does not add; lease_ms is clamped to >= 100
    assert op(client, "extend", [s1], lease_ms=1)["deadlines"] == {str(s1): t0 + 1101}
    clock.advance(101)
    (again,) = claim(client, "w2")["claimed"]
    assert (again["$seq"], again["deliveries"]) == (s1, 2)  # extend never counted a delivery
    assert again["lease_id"] != job["lease_id"]


def test_extend_skips_released_and_acked_jobs(client: TestClient) -> None:
    make_queue(client)
    s1, s2 = produce(client, "jobs", 2)
    claim(client, max=2)
    op(client, "nack", [s1])
    op(client, "ack", [s2])
    out = op(client, "extend", [s1, s2], lease_ms=1000)
    assert (out["extended"], out["skipped"], out["deadlines"]) == (0, [s1, s2], {})


# --- dead letter --------------------------------------------------------------------------


def test_dead_letter_after_max_deliveries(client: TestClient) -> None:
    clock = fake_clock(client)
    make_queue(client, max_deliveries=2, dead_letter="jobs.dlq", lease_ms=1000)
    rec = {"data": {"k": 1}, "tag": "tenant:poison", "meta": {"trace": "z9"}}
    ok(client.post("/v0/topics/jobs", json={"records": [rec]}), 200, 201)
    for n in (1, 2):
        (job,) = claim(client)["claimed"]
        assert (job["$seq"], job["deliveries"]) == (1, n)
        clock.advance(1001)
    (s2,) = produce(client, "jobs", 1)
    # third delivery attempt: the poison job is moved; the fresh job is delivered instead
    body = claim(client, max=1)
    assert [(j["$seq"], j["deliveries"]) for j in body["claimed"]] == [(s2, 1)]
    assert body["ready"] == 0
    dlq = state(client, "jobs.dlq")
    assert dlq["count"] == 1 and dlq.get("type", "log") == "log"
    (moved,) = read_all(client, "jobs.dlq", include_tags=True)
    assert moved["data"] == {"k": 1} and moved["$tag"] == "tenant:poison"
    assert moved["meta"] == {
        "trace": "z9",
        "$dead_letter_from": "jobs",
        "$dead_letter_deliveries": 2,
        "$dead_letter_src_seq": 1,
    }
    st = state(client, "jobs")
    assert st["count"] == 1
    assert st["queue"] == {"ready": 0, "in_flight": 1, "dead_lettered": 1}
    assert [r["$seq"] for r in read_all(client, "jobs")] == [s2]
    clock.advance(10_000)
    assert [(j["$seq"], j["deliveries"]) for j in claim(client, max=5)["claimed"]] == [(s2, 2)]


def test_nacks_count_toward_dead_lettering(client: TestClient) -> None:
    make_queue(client, max_deliveries=1, dead_letter="dlq")
    produce(client, "jobs", 1)
    claim(client)
    op(client, "nack", [1])
    assert claim(client)["count"] == 0
    assert counters(client) == {"ready": 0, "in_flight": 0, "dead_lettered": 1}
    (moved,) = read_all(client, "dlq")
    assert moved["data"] == {"i": 0}
    assert moved["meta"] == {
        "$dead_letter_from": "jobs",
        "$dead_letter_deliveries": 1,
        "$dead_letter_src_seq": 1,
    }


def test_without_dead_letter_topic_jobs_are_redelivered_forever(client: TestClient) -> None:
    clock = fake_clock(client)
    make_queue(client, max_deliveries=2, dead_letter=None, lease_ms=1000)
    produce(client, "jobs", 1)
    for n in (1, 2, 3, 4, 5):
        (job,) = claim(client)["claimed"]
        assert job["deliveries"] == n
        clock.advance(1001)
    assert counters(client) == {"ready": 1, "in_flight": 0, "dead_lettered": 0}
    assert_error(client.get("/v0/topics/jobs.dlq"), 404, "topic_not_found")


# --- counters and reads -------------------------------------------------------------------


def test_counters_through_a_scripted_sequence(client: TestClient) -> None:
    clock = fake_clock(client)
    make_queue(client)

    def check(ready: int, in_flight: int, count: int, delayed: int = 0) -> None:
        st = state(client, "jobs")
        assert st["type"] == "queue" and st["count"] == count
        assert st["queue"] == {"ready": ready, "in_flight": in_flight, "dead_lettered": 0}
        assert ready + in_flight + delayed == count

    check(0, 0, 0)
    s = produce(client, "jobs", 5)
    check(5, 0, 5)
    assert claim(client, max=3, lease_ms=1000)["ready"] == 2
    check(2, 3, 5)
    assert (op(client, "ack", [s[0]])["ready"], op(client, "ack", [s[0]])["in_flight"]) == (2, 2)
    check(2, 2, 4)
    op(client, "nack", [s[1]])
    check(3, 1, 4)
    op(client, "nack", [s[2]], delay_ms=60_000)
    check(3, 0, 4, delayed=1)
    claim(client, "w2", max=10, lease_ms=120_000)  # s1 (released) and s3, s4 (fresh)
    check(0, 3, 4, delayed=1)
    clock.advance(60_000)
    check(1, 3, 4)
    clock.advance(60_001)
    check(4, 0, 4)


def test_diff_reads_a_queue_without_claiming(client: TestClient) -> None:
    make_queue(client)
    s = produce(client, "jobs", 3)
    d = ok(client.post("/v0/topics/jobs/diff", json={}))
    assert seqs_of(d) == s
    assert counters(client) == {"ready": 3, "in_flight": 0, "dead_lettered": 0}
    body = claim(client, max=3)
    assert seqs(body) == s and all(j["deliveries"] == 1 for j in body["claimed"])
    # leased jobs remain visible to readers
    assert seqs_of(ok(client.post("/v0/topics/jobs/diff", json={}))) == s


# --- cohorts ------------------------------------------------------------------------------


def run_claims(client: TestClient, topic: str, wants: list[int]) -> list[ClaimResult]:
    svc = client.app.state.services.get()  # type: ignore[attr-defined]

    async def many() -> list[ClaimResult]:
        return list(
            await asyncio.gather(
                *(svc.queues.claim(topic, f"n{i}", w, None) for i, w in enumerate(wants))
            )
        )

    assert client.portal is not None
    return client.portal.call(many)


def test_cohort_in_a_coalescing_window_splits_jobs_evenly(client: TestClient) -> None:
    make_queue(client, claim_jitter_ms=200)
    produce(client, "jobs", 6)
    svc = client.app.state.services.get()  # type: ignore[attr-defined]
    passes = svc.queues.passes
    results = run_claims(client, "jobs", [4, 4, 4])
    got = [[j.seq for j in r.jobs] for r in results]
    assert [len(g) for g in got] == [2, 2, 2], got
    assert sorted(s for g in got for s in g) == [1, 2, 3, 4, 5, 6]
    assert all(g == sorted(g) for g in got)
    assert svc.queues.passes - passes == 1  # one batched pass served the whole cohort
    assert all(r.ready == 0 for r in results)


def test_greedy_claims_are_disjoint(client: TestClient) -> None:
    make_queue(client)
    produce(client, "jobs", 6)
    results = run_claims(client, "jobs", [4, 4, 4])
    got = [[j.seq for j in r.jobs] for r in results]
    assert all(len(g) <= 4 for g in got)
    assert sorted(s for g in got for s in g) == [1, 2, 3, 4, 5, 6], got
    assert counters(client) == {"ready": 0, "in_flight": 6, "dead_lettered": 0}


# --- lifecycle ----------------------------------------------------------------------------


def test_delete_and_recreate_starts_a_clean_queue(client: TestClient) -> None:
    make_queue(client, max_deliveries=1, dead_letter="dlq")
    produce(client, "jobs", 3)
    old = claim(client, max=2)["claimed"]
    op(client, "nack", [old[0]["$seq"]])
    assert claim(client)["count"] == 1  # old[0] dead-lettered, seq 3 delivered
    assert counters(client)["dead_lettered"] == 1
    assert ok(client.delete("/v0/topics/jobs"))["deleted"] is True
    make_queue(client)
    assert counters(client) == {"ready": 0, "in_flight": 0, "dead_lettered": 0}
    new = produce(client, "jobs", 3)
    body = claim(client, "w2", max=5)
    assert seqs(body) == new and body["count"] == 3
    assert all(j["deliveries"] == 1 for j in body["claimed"])
    # the old instance's leases are not honoured on the new one
    stale = op(client, "ack", [j["$seq"] for j in old], lease_ids=[j["lease_id"] for j in old])
    assert stale["acked"] == 0
    assert counters(client) == {"ready": 0, "in_flight": 3, "dead_lettered": 0}


def test_work_stream_pushes_jobs_and_releases_them_on_close(client: TestClient) -> None:
    make_queue(client)
    produce(client, "jobs", 3)
    frames: list[dict[str, Any]] = []
    with client.stream(
        "GET", "/v0/topics/jobs/work", params={"node": "w1", "max": 2}, headers=SSE
    ) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        # Keep the line iterator referenced: dropping it closes the response (a disconnect).
        lines = r.iter_lines()
        event = None
        while len(frames) < 2:
            line = next(lines)
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: ") and event == "job":
                frames.append(json.loads(line[6:]))
        time.sleep(0.3)  # the stream stays open: its leases stay held
        assert counters(client) == {"ready": 1, "in_flight": 2, "dead_lettered": 0}
        # an ack frees a slot: the stream leases and pushes the next job
        assert op(client, "ack", [1])["acked"] == 1
        while len(frames) < 3:
            line = next(lines)
            if line.startswith("data: "):
                frames.append(json.loads(line[6:]))
        assert counters(client) == {"ready": 0, "in_flight": 2, "dead_lettered": 0}
    assert [(f["topic"], f["$seq"], f["deliveries"]) for f in frames] == [
        ("jobs", 1, 1),
        ("jobs", 2, 1),
        ("jobs", 3, 1),
    ]
    assert all(LEASE_RE.fullmatch(f["lease_id"]) for f in frames)
    deadline = time.monotonic() + 5
    while counters(client)["in_flight"] and time.monotonic() < deadline:
        time.sleep(0.02)
    assert counters(client) == {"ready": 2, "in_flight": 0, "dead_lettered": 0}
    assert [(j["$seq"], j["deliveries"]) for j in claim(client, max=3)["claimed"]] == [
        (2, 2),
        (3, 2),
    ]


# --- auth ---------------------------------------------------------------------------------


def test_queue_scopes(make_client: MakeClient) -> None:
    c = make_client(api_keys_raw="full-key,reader:read,writer:w,rw-key:rw")

    def h(key: str) -> dict[str, str]:
        return {"authorization": f"Bearer {key}"}

    ok(c.put("/v0/topics/jobs", json={"type": "queue"}, headers=h("full-key")), 201)
    records = [{"data": 1}, {"data": 2}]
    ok(c.post("/v0/topics/jobs", json={"records": records}, headers=h("full-key")))
    for key in ("reader", "writer"):
        r = c.post("/v0/topics/jobs/claim", json={"node": "w1", "max": 2}, headers=h(key))
        assert_error(r, 403, "forbidden")
        r = c.get("/v0/topics/jobs/work", params={"node": "w1"}, headers={**SSE, **h(key)})
        assert_error(r, 403, "forbidden")
    assert_error(c.post("/v0/topics/jobs/claim", json={"node": "w1"}), 401, "unauthorized")
    st = ok(c.get("/v0/topics/jobs", headers=h("reader")))
    assert st["queue"] == {"ready": 2, "in_flight": 0, "dead_lettered": 0}
    got = ok(c.post("/v0/topics/jobs/claim", json={"node": "w1", "max": 2}, headers=h("rw-key")))
    assert got["count"] == 2
    calls = [
        ("extend", {"node": "w1", "seqs": [1], "lease_ms": 5000}),
        ("nack", {"node": "w1", "seqs": [1]}),
        ("ack", {"node": "w1", "seqs": [2]}),
    ]
    for verb, body in calls:
        r = c.post(f"/v0/topics/jobs/{verb}", json=body, headers=h("reader"))
        assert_error(r, 403, "forbidden")
        out = ok(c.post(f"/v0/topics/jobs/{verb}", json=body, headers=h("writer")))
        assert out["skipped"] == [], (verb, out)
    st = ok(c.get("/v0/topics/jobs", headers=h("reader")))
    assert st["count"] == 1 and st["queue"] == {"ready": 1, "in_flight": 0, "dead_lettered": 0}


# --- larger batches, deleted jobs, several processes ---------------------------------------


def test_batches_beyond_one_transaction(client: TestClient) -> None:
    # 120 jobs in 120 frames: every claim / extend / nack / ack spans several transactions
    make_queue(client)
    for i in range(120):
        ok(client.post("/v0/topics/jobs", json={"records": [{"data": i}]}), 200, 201)
    all_seqs = list(range(1, 121))
    body = claim(client, max=200)
    assert seqs(body) == all_seqs and body["ready"] == 0
    ext = op(client, "extend", all_seqs, lease_ms=60_000)
    assert ext["extended"] == 120 and len(ext["deadlines"]) == 120 and ext["skipped"] == []
    nack = op(client, "nack", all_seqs)
    assert (nack["nacked"], nack["ready"], nack["in_flight"]) == (120, 120, 0)
    again = claim(client, "w2", max=200)
    assert seqs(again) == all_seqs and {j["deliveries"] for j in again["claimed"]} == {2}
    done = op(client, "ack", all_seqs, node="w2")
    assert (done["acked"], done["skipped"], done["ready"], done["in_flight"]) == (120, [], 0, 0)
    st = state(client, "jobs")
    assert st["count"] == 0 and st["queue"] == {"ready": 0, "in_flight": 0, "dead_lettered": 0}
    assert read_all(client, "jobs") == []


def test_counters_after_a_leased_job_is_deleted_by_a_record_delete(client: TestClient) -> None:
    clock = fake_clock(client)
    make_queue(client)
    _, s2 = produce(client, "jobs", 2)
    claim(client, lease_ms=1000)  # s1 leased to w1
    ok(client.post("/v0/topics/jobs/delete", json={"before_seq": s2}))
    st = state(client, "jobs")
    assert st["count"] == 1
    # s2 is claimable; the deleted s1 is no job at all (§10.7: ready + in_flight == count)
    assert st["queue"]["ready"] == 1, st["queue"]
    assert st["queue"]["ready"] + st["queue"]["in_flight"] == 1
    assert seqs(claim(client, "w2", max=5)) == [s2]
    clock.advance(1001)
    assert claim(client, "w3", max=5)["count"] == 0  # the deleted job is never redelivered
    assert counters(client) == {"ready": 0, "in_flight": 1, "dead_lettered": 0}


def test_two_processes_never_hand_out_a_job_twice(
    make_client: MakeClient, aws: AwsClients, monkeypatch: pytest.MonkeyPatch
) -> None:
    # moto is not thread-safe; DynamoDB is: make each call atomic, as the real service is.
    lock = threading.Lock()
    real = aws.dynamodb._make_api_call

    def atomic(*args: Any, **kwargs: Any) -> Any:
        with lock:
            return real(*args, **kwargs)

    monkeypatch.setattr(aws.dynamodb, "_make_api_call", atomic)
    apps = [make_client(), make_client()]
    make_queue(apps[0])
    produce(apps[0], "jobs", 40)
    for app in apps:  # warm each app up (first-request setup) before the threads race
        assert claim(app, "warm-up", max=0)["ready"] == 40

    def drain(k: int) -> list[int]:
        got: list[int] = []
        while True:
            body = claim(apps[k % 2], f"n{k}", max=3)
            if not body["count"]:
                return got
            got += seqs(body)

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(drain, range(4)))
    everything = sorted(s for r in results for s in r)
    assert everything == list(range(1, 41)), results
    assert counters(apps[1]) == {"ready": 0, "in_flight": 40, "dead_lettered": 0}
