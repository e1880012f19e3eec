"""Append (spec §0.4, §0.8, §2): seqs, lazy create, idempotency, $-metadata, limits, caps."""

from __future__ import annotations

import base64
import os
import threading
import time
from typing import Any

import pytest
from api_helpers import (
    MakeClient,
    append,
    append_data,
    assert_error,
    diff,
    ok,
    put_topic,
    read_all,
    seqs_of,
    state,
)
from starlette.testclient import TestClient

from headwater.engine.ports import SPILL_PREFIX
from headwater.settings import Limits, Settings
from headwater.storage.clients import AwsClients

pytestmark = pytest.mark.api


def test_seqs_are_contiguous_across_batches(client: TestClient) -> None:
    # GIVEN a first write that creates the topic
    r1 = client.post("/v0/topics/jobs", json={"records": [{"data": i} for i in range(3)]})
    b1 = ok(r1, 201)
    assert b1 == {
        **b1,
        "topic": "jobs",
        "first_seq": 1,
        "last_seq": 3,
        "seqs": [1, 2, 3],
        "head_seq": 3,
        "count": 3,
        "created": True,
        "deduped": False,
    }
    # WHEN a second write follows THEN it is 200 and continues the sequence
    b2 = ok(client.post("/v0/topics/jobs", json={"records": [{"data": "a"}, {"data": "b"}]}), 200)
    assert (b2["seqs"], b2["first_seq"], b2["last_seq"], b2["head_seq"]) == ([4, 5], 4, 5, 5)
    assert b2["count"] == 2 and b2["created"] is False and b2["deduped"] is False
    assert seqs_of(diff(client, "jobs")) == [1, 2, 3, 4, 5]


def test_append_to_put_created_topic_is_200(client: TestClient) -> None:
    put_topic(client, "jobs")
    body = ok(client.post("/v0/topics/jobs", json={"records": [{"data": 1}]}), 200)
    assert body["created"] is False and body["seqs"] == [1]


def test_append_response_performance_fields(client: TestClient) -> None:
    body = append_data(client, "p", 1)
    perf = body["performance"]
    assert isinstance(perf["server_total_ms"], float | int)
    assert perf.get("fsync_ms", 0.0) == 0.0


def test_return_seqs_false_omits_seqs(client: TestClient) -> None:
    r = client.post(
        "/v0/topics/jobs", params={"return_seqs": "false"}, json={"records": [{"data": 1}] * 4}
    )
    body = ok(r, 201)
    assert "seqs" not in body
    assert (body["first_seq"], body["last_seq"], body["head_seq"], body["count"]) == (1, 4, 4, 4)
    r = client.post(
        "/v0/topics/jobs", params={"return_seqs": "true"}, json={"records": [{"data": 1}]}
    )
    assert ok(r)["seqs"] == [5]
    assert_error(
        client.post(
            "/v0/topics/jobs", params={"return_seqs": "maybe"}, json={"records": [{"data": 1}]}
        ),
        400,
        "invalid_request",
    )
    assert state(client, "jobs")["head_seq"] == 5


VERBATIM: list[Any] = [
    None,
    0,
    -1.5,
    "text",
    True,
    [],
    [1, "a", None],
    {},
    {"nested": {"deep": [1, {"x": None}]}},
    "é🙂",
]


def test_data_is_stored_verbatim(client: TestClient) -> None:
    append(client, "v", [{"data": d} for d in VERBATIM])
    recs = diff(client, "v")["records"]
    assert all("data" in r for r in recs)
    assert [r["data"] for r in recs] == VERBATIM
    assert [type(r["data"]) for r in recs] == [type(d) for d in VERBATIM]


def test_node_tag_meta_are_echoed_as_dollar_fields(client: TestClient) -> None:
    # GIVEN records with and without node/tag/meta, and a batch-level node
    append(
        client,
        "m",
        [
            {
                "data": {"a": 1},
                "tag": "tenant42:job-1",
                "node": "worker-eu-1",
                "meta": {"trace": "abc"},
            },
            {"data": "plain"},
            {"data": 3, "tag": "t3"},
        ],
        node="batch-node",
    )
    # WHEN read with tags and meta
    recs = diff(client, "m", include_tags=True, include_meta=True)["records"]
    # THEN $node/$tag/meta echo what was written; absent ones are omitted, never null
    assert recs[0] == {
        "$seq": 1,
        "$ts": recs[0]["$ts"],
        "$node": "worker-eu-1",
        "$tag": "tenant42:job-1",
        "data": {"a": 1},
        "meta": {"trace": "abc"},
    }
    assert recs[1] == {"$seq": 2, "$ts": recs[1]["$ts"], "$node": "batch-node", "data": "plain"}
    assert recs[2] == {
        "$seq": 3,
        "$ts": recs[2]["$ts"],
        "$node": "batch-node",
        "$tag": "t3",
        "data": 3,
    }
    assert all(isinstance(r["$ts"], int) and r["$ts"] > 1_600_000_000_000 for r in recs)
    assert "type" not in recs[0] and "$type" not in recs[0]


def test_tag_and_meta_only_on_request(client: TestClient) -> None:
    append(client, "m", [{"data": 1, "tag": "t", "meta": {"k": "v"}}])
    default = diff(client, "m")["records"][0]
    assert "$tag" not in default and default["meta"] == {"k": "v"}  # include_meta defaults on
    bare = diff(client, "m", include_tags=False, include_meta=False)["records"][0]
    assert set(bare) == {"$seq", "$ts", "data"}
    tags = diff(client, "m", include_tags=True, include_meta=False)["records"][0]
    assert tags["$tag"] == "t" and "meta" not in tags


def test_dollar_prefixed_record_fields_are_rejected(client: TestClient) -> None:
    for key in ("$seq", "$ts", "$node", "$tag", "$anything"):
        r = client.post("/v0/topics/d", json={"records": [{"data": 1}, {"data": 2, key: 9}]})
        assert_error(r, 400, "invalid_request")
    # THEN nothing was appended, not even the valid record, nor the topic created
    assert_error(client.get("/v0/topics/d"), 404, "topic_not_found")


def test_dollar_keys_inside_data_and_meta_are_user_content(client: TestClient) -> None:
    append(client, "d", [{"data": {"$seq": 99}, "meta": {"$x": 1}}])
    rec = diff(client, "d")["records"][0]
    assert rec["$seq"] == 1 and rec["data"] == {"$seq": 99} and rec["meta"] == {"$x": 1}


def test_create_false_on_missing_topic_is_404(client: TestClient) -> None:
    r = client.post("/v0/topics/typo", json={"records": [{"data": 1}], "create": False})
    err = assert_error(r, 404, "topic_not_found")
    assert err["detail"]["topic"] == "typo"
    assert_error(client.get("/v0/topics/typo"), 404, "topic_not_found")
    # create:false on an existing topic appends normally
    put_topic(client, "typo")
    assert append_data(client, "typo", 1, create=False)["seqs"] == [1]


def test_create_true_auto_creates(client: TestClient) -> None:
    body = ok(client.post("/v0/topics/new", json={"records": [{"data": 1}], "create": True}), 201)
    assert body["created"] is True


def test_inline_config_applies_only_on_create(client: TestClient) -> None:
    # GIVEN a write that creates the topic with inline config
    first = client.post(
        "/v0/topics/c",
        json={
            "records": [{"data": 1}],
            "config": {"ttl_ms": 60000, "cap_records": 100, "priority": 4},
        },
    )
    ok(first, 201)
    cfg = state(client, "c")["config"]
    assert (cfg["ttl_ms"], cfg["cap_records"], cfg["priority"]) == (60000, 100, 4)
    # WHEN a later write carries different config
    later = client.post(
        "/v0/topics/c",
        json={"records": [{"data": 2}], "config": {"ttl_ms": 1, "cap_records": 5, "type": "queue"}},
    )
    # THEN it appends and the config is ignored (changes go through PUT)
    assert ok(later, 200)["seqs"] == [2]
    assert state(client, "c")["config"] == cfg


def test_inline_config_is_ignored_for_put_created_topic(client: TestClient) -> None:
    put_topic(client, "c", {"ttl_ms": 10})
    append_data(client, "c", 1, config={"ttl_ms": 99})
    assert state(client, "c")["config"]["ttl_ms"] == 10


def test_invalid_inline_config_is_400(client: TestClient) -> None:
    for config in ({"ttl_ms": "x"}, {"nope": 1}, [1], {"dead_letter": "c"}):
        r = client.post("/v0/topics/c", json={"records": [{"data": 1}], "config": config})
        assert_error(r, 400, "invalid_request")
    assert_error(client.get("/v0/topics/c"), 404, "topic_not_found")


# --- idempotency (§0.8) ----------------------------------------------------------------


def test_idempotency_key_in_body_dedupes(client: TestClient) -> None:
    append_data(client, "i", "before")
    body = {"records": [{"data": "a"}, {"data": "b"}], "idempotency_key": "batch-7f3a"}
    first = ok(client.post("/v0/topics/i", json=body), 200)
    assert first["seqs"] == [2, 3] and first["deduped"] is False
    append_data(client, "i", "after")
    # WHEN the same write is retried
    retry = ok(client.post("/v0/topics/i", json=body), 200)
    # THEN the original seqs come back, deduped, and nothing new was appended
    assert retry["seqs"] == [2, 3] and (retry["first_seq"], retry["last_seq"]) == (2, 3)
    assert retry["deduped"] is True and retry["created"] is False
    st = state(client, "i")
    assert (st["head_seq"], st["count"]) == (4, 4)
    assert [r["data"] for r in read_all(client, "i")] == ["before", "a", "b", "after"]


def test_idempotency_key_on_creating_write(client: TestClient) -> None:
    body = {"records": [{"data": 1}], "idempotency_key": "k"}
    assert ok(client.post("/v0/topics/i", json=body), 201)["created"] is True
    retry = ok(client.post("/v0/topics/i", json=body), 200)
    assert retry["seqs"] == [1] and retry["deduped"] is True and retry["created"] is False
    assert state(client, "i")["head_seq"] == 1


def test_idempotency_key_header(client: TestClient) -> None:
    append_data(client, "i", 0)
    hdr = {"Idempotency-Key": "hdr-1"}
    first = ok(client.post("/v0/topics/i", json={"records": [{"data": 1}]}, headers=hdr))
    retry = ok(client.post("/v0/topics/i", json={"records": [{"data": 1}]}, headers=hdr))
    assert retry["seqs"] == first["seqs"] == [2] and retry["deduped"] is True
    # the header and body namespaces are the same key space
    same = ok(
        client.post("/v0/topics/i", json={"records": [{"data": 1}], "idempotency_key": "hdr-1"})
    )
    assert same["deduped"] is True and same["seqs"] == [2]
    assert state(client, "i")["head_seq"] == 2


def test_idempotency_body_key_wins_over_header(client: TestClient) -> None:
    append_data(client, "i", 0, idempotency_key="h1")  # seq 1 under key h1
    # WHEN the body carries a new key and the header an already-used one
    r = client.post(
        "/v0/topics/i",
        json={"records": [{"data": 1}], "idempotency_key": "b1"},
        headers={"Idempotency-Key": "h1"},
    )
    # THEN the body key decides: a fresh append
    body = ok(r)
    assert body["deduped"] is False and body["seqs"] == [2]
    r = client.post(
        "/v0/topics/i",
        json={"records": [{"data": 1}], "idempotency_key": "b1"},
        headers={"Idempotency-Key": "fresh"},
    )
    assert ok(r)["deduped"] is True and ok(r)["seqs"] == [2]
    assert state(client, "i")["head_seq"] == 2


def test_idempotency_is_scoped_per_topic(client: TestClient) -> None:
    a = append_data(client, "a", 1, idempotency_key="same")
    b = append_data(client, "b", 1, idempotency_key="same")
    assert a["deduped"] is False and b["deduped"] is False


def test_idempotency_state_goes_with_a_deleted_topic(client: TestClient) -> None:
    append_data(client, "i", 1, 2, idempotency_key="k")
    ok(client.delete("/v0/topics/i"))
    again = ok(
        client.post("/v0/topics/i", json={"records": [{"data": 1}], "idempotency_key": "k"}), 201
    )
    assert again["deduped"] is False and again["seqs"] == [1]


def test_rejected_write_leaves_no_idempotency_record(client: TestClient) -> None:
    put_topic(client, "i", {"cap_records": 1, "discard": "reject"})
    append_data(client, "i", 0)
    body = {"records": [{"data": 1}], "idempotency_key": "k"}
    assert_error(client.post("/v0/topics/i", json=body), 422, "topic_full")
    ok(client.post("/v0/topics/i/delete", json={"before_seq": 2}))
    retry = ok(client.post("/v0/topics/i", json=body))
    assert retry["deduped"] is False and retry["seqs"] == [2]


def test_idempotency_key_expires_after_the_window(client: TestClient) -> None:
    # (A window long enough that the retry surely lands inside it on a loaded machine.)
    put_topic(client, "i", {"idempotency_window_ms": 1000})
    append_data(client, "i", 1, idempotency_key="k")
    assert append_data(client, "i", 1, idempotency_key="k")["deduped"] is True
    time.sleep(1.2)
    again = append_data(client, "i", 1, idempotency_key="k")
    assert again["deduped"] is False and again["seqs"] == [2]
    assert append_data(client, "i", 1, idempotency_key="k")["seqs"] == [2]


def test_idempotency_window_zero_disables_dedupe(client: TestClient) -> None:
    put_topic(client, "i", {"idempotency_window_ms": 0})
    append_data(client, "i", 1, idempotency_key="k")
    again = append_data(client, "i", 1, idempotency_key="k")
    assert again["deduped"] is False and again["seqs"] == [2]


def test_concurrent_idempotent_retries_append_once(client: TestClient) -> None:
    put_topic(client, "i")
    results: list[dict[str, Any]] = []
    lock = threading.Lock()

    def send() -> None:
        r = client.post("/v0/topics/i", json={"records": [{"data": 1}] * 3, "idempotency_key": "x"})
        with lock:
            results.append(ok(r))

    threads = [threading.Thread(target=send) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {tuple(r["seqs"]) for r in results} == {(1, 2, 3)}
    assert sum(1 for r in results if not r["deduped"]) == 1
    assert state(client, "i")["head_seq"] == 3


def test_bad_idempotency_key_is_400(client: TestClient) -> None:
    for key in ("", "x" * 257, 5, ["k"]):
        r = client.post("/v0/topics/i", json={"records": [{"data": 1}], "idempotency_key": key})
        assert_error(r, 400, "invalid_request")
    assert_error(client.get("/v0/topics/i"), 404, "topic_not_found")


def test_idempotency_key_of_256_chars_is_accepted(client: TestClient) -> None:
    assert append_data(client, "i", 1, idempotency_key="k" * 256)["seqs"] == [1]


# --- limits (§2) -----------------------------------------------------------------------


def test_batch_too_large(make_client: MakeClient) -> None:
    small = make_client(limits=Limits(max_batch_records=5))
    assert ok(small.post("/v0/topics/b", json={"records": [{"data": i} for i in range(5)]}), 201)
    r = small.post("/v0/topics/b", json={"records": [{"data": i} for i in range(6)]})
    assert_error(r, 400, "batch_too_large")
    assert state(small, "b")["head_seq"] == 5


def test_empty_or_missing_records_is_400(client: TestClient) -> None:
    for body in ({"records": []}, {}, {"records": None}, {"records": {"data": 1}}):
        assert_error(client.post("/v0/topics/b", json=body), 400, "invalid_request")


def test_default_batch_limit_is_10000(client: TestClient) -> None:
    r = client.post("/v0/topics/b", json={"records": [{"data": 0}] * 10_001})
    assert_error(r, 400, "batch_too_large")
    assert_error(client.get("/v0/topics/b"), 404, "topic_not_found")


def test_ten_thousand_record_batch(client: TestClient) -> None:
    # GIVEN a maximal batch after one record
    append_data(client, "big", "first")
    body = ok(client.post("/v0/topics/big", json={"records": [{"data": i} for i in range(10_000)]}))
    # THEN it gets 10,000 contiguous seqs and reads back in order
    assert body["seqs"] == list(range(2, 10_002)) and body["count"] == 10_000
    recs = read_all(client, "big")
    assert [r["$seq"] for r in recs] == list(range(1, 10_002))
    assert [r["data"] for r in recs[1:]] == list(range(10_000))
    assert append_data(client, "big", "last")["seqs"] == [10_002]


def test_large_batch_spills_to_s3_and_reads_back_intact(
    client: TestClient, settings: Settings, aws: AwsClients
) -> None:
    # GIVEN ~600 KB of incompressible payload in one batch (over the 300 KB spill threshold)
    payloads = [base64.b64encode(os.urandom(768)).decode() for _ in range(600)]
    append_data(client, "spill", "small")
    body = append(
        client, "spill", [{"data": p, "tag": f"t{i % 3}"} for i, p in enumerate(payloads)]
    )
    assert body["seqs"] == list(range(2, 602))
    # THEN the frame went to S3
    listed = aws.s3.list_objects_v2(Bucket=settings.bucket_name, Prefix=SPILL_PREFIX)
    assert listed.get("KeyCount", 0) >= 1
    # AND a diff returns every record intact, in order
    recs = read_all(client, "spill", include_tags=True)
    assert [r["data"] for r in recs] == ["small", *payloads]
    assert [r.get("$tag") for r in recs[1:]] == [f"t{i % 3}" for i in range(600)]
    # AND a tag delete reaches into the spilled frame
    deleted = ok(client.post("/v0/topics/spill/delete", json={"match": "t1"}))["deleted"]
    assert deleted == 200
    assert len(read_all(client, "spill")) == 401


def test_record_too_large_default_one_mib(client: TestClient) -> None:
    # data is a JSON string: 2 quote bytes + content
    fits = "x" * ((1 << 20) - 2)
    assert append_data(client, "r", fits)["seqs"] == [1]
    r = client.post("/v0/topics/r", json={"records": [{"data": "x" * (1 << 20)}]})
    assert_error(r, 400, "record_too_large")
    assert state(client, "r")["head_seq"] == 1


def test_record_too_large_counts_data_plus_meta(make_client: MakeClient) -> None:
    small = make_client(limits=Limits(max_record_bytes=100))
    assert append(small, "r", [{"data": "x" * 50, "meta": {"m": "y" * 30}}])["seqs"] == [1]
    r = small.post("/v0/topics/r", json={"records": [{"data": "x" * 60, "meta": {"m": "y" * 40}}]})
    assert_error(r, 400, "record_too_large")
    r = small.post("/v0/topics/r", json={"records": [{"data": 1}, {"data": "x" * 200}]})
    assert_error(r, 400, "record_too_large")
    assert state(small, "r")["head_seq"] == 1


def test_tag_length_limit_is_in_bytes(client: TestClient) -> None:
    assert append(client, "t", [{"data": 1, "tag": "t" * 256}])["seqs"] == [1]
    for tag in ("t" * 257, "é" * 129):
        assert_error(
            client.post("/v0/topics/t", json={"records": [{"data": 1, "tag": tag}]}),
            400,
            "invalid_request",
        )
    assert_error(
        client.post("/v0/topics/t", json={"records": [{"data": 1, "tag": 5}]}),
        400,
        "invalid_request",
    )


def test_node_length_limit(client: TestClient) -> None:
    assert append(client, "n", [{"data": 1, "node": "n" * 128}])["seqs"] == [1]
    assert append(client, "n", [{"data": 1}], node="n" * 128)["seqs"] == [2]
    bad = [
        {"records": [{"data": 1, "node": "n" * 129}]},
        {"records": [{"data": 1}], "node": "n" * 129},
        {"records": [{"data": 1, "node": 7}]},
        {"records": [{"data": 1}], "node": ["a"]},
    ]
    for body in bad:
        assert_error(client.post("/v0/topics/n", json=body), 400, "invalid_request")
    assert state(client, "n")["head_seq"] == 2


def test_meta_limits(client: TestClient) -> None:
    ok64 = {f"k{i}": i for i in range(64)}
    assert append(client, "m", [{"data": 1, "meta": ok64}])["seqs"] == [1]
    too_many = {f"k{i}": i for i in range(65)}
    too_big = {"k": "v" * (16 << 10)}
    for meta in (too_many, too_big, [1], "m", 5):
        r = client.post("/v0/topics/m", json={"records": [{"data": 1, "meta": meta}]})
        assert_error(r, 400, "invalid_request")
    assert state(client, "m")["head_seq"] == 1


def test_meta_just_under_16_kib_is_accepted(client: TestClient) -> None:
    meta = {"k": "v" * ((16 << 10) - 20)}
    assert append(client, "m", [{"data": 1, "meta": meta}])["seqs"] == [1]
    assert diff(client, "m")["records"][0]["meta"] == meta


# --- caps with discard:"reject" --------------------------------------------------------


def test_discard_reject_cap_records_is_422_and_appends_nothing(client: TestClient) -> None:
    put_topic(client, "full", {"cap_records": 3, "discard": "reject"})
    append_data(client, "full", 1, 2)
    # WHEN a batch would overflow the cap
    r = client.post("/v0/topics/full", json={"records": [{"data": 3}, {"data": 4}]})
    # THEN 422 topic_full and nothing of the batch was appended
    assert_error(r, 422, "topic_full")
    st = state(client, "full")
    assert (st["head_seq"], st["count"]) == (2, 2)
    assert [x["data"] for x in read_all(client, "full")] == [1, 2]
    # AND a batch that fits still goes in, then the next one is refused
    assert append_data(client, "full", 3)["seqs"] == [3]
    assert_error(client.post("/v0/topics/full", json={"records": [{"data": 4}]}), 422, "topic_full")
    assert state(client, "full")["head_seq"] == 3


def test_discard_reject_frees_room_after_delete(client: TestClient) -> None:
    put_topic(client, "full", {"cap_records": 2, "discard": "reject"})
    append_data(client, "full", 1, 2)
    assert_error(client.post("/v0/topics/full", json={"records": [{"data": 3}]}), 422, "topic_full")
    ok(client.post("/v0/topics/full/delete", json={"before_seq": 2}))
    assert append_data(client, "full", 3)["seqs"] == [3]


def test_discard_reject_cap_bytes(client: TestClient) -> None:
    put_topic(client, "fb", {"cap_bytes": 2000, "discard": "reject"})
    append_data(client, "fb", "x" * 900)
    r = client.post("/v0/topics/fb", json={"records": [{"data": "y" * 1500}]})
    assert_error(r, 422, "topic_full")
    assert state(client, "fb")["head_seq"] == 1


def test_discard_reject_on_creating_write(client: TestClient) -> None:
    r = client.post(
        "/v0/topics/fc",
        json={
            "records": [{"data": i} for i in range(3)],
            "config": {"cap_records": 2, "discard": "reject"},
        },
    )
    assert_error(r, 422, "topic_full")
    got = client.get("/v0/topics/fc", params={"touch": "false"})
    if got.status_code == 200:
        assert got.json()["head_seq"] == 0
    else:
        assert_error(got, 404, "topic_not_found")


def test_discard_old_accepts_writes_over_cap(client: TestClient) -> None:
    put_topic(client, "o", {"cap_records": 2, "discard": "old"})
    assert append_data(client, "o", 1, 2, 3)["seqs"] == [1, 2, 3]


# --- group commit ----------------------------------------------------------------------


def test_concurrent_appends_get_unique_contiguous_seqs(client: TestClient) -> None:
    put_topic(client, "gc")
    per_thread: dict[int, list[int]] = {}
    errors: list[str] = []

    def producer(n: int) -> None:
        mine: list[int] = []
        for i in range(15):
            r = client.post("/v0/topics/gc", json={"records": [{"data": [n, i]}] * (1 + i % 3)})
            if r.status_code != 200:
                errors.append(r.text)
                return
            mine.extend(r.json()["seqs"])
        per_thread[n] = mine

    threads = [threading.Thread(target=producer, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    all_seqs = sorted(s for seqs in per_thread.values() for s in seqs)
    assert all_seqs == list(range(1, len(all_seqs) + 1))
    for seqs in per_thread.values():
        assert seqs == sorted(seqs)
    recs = read_all(client, "gc")
    assert len(recs) == len(all_seqs)
    for n, seqs in per_thread.items():
        order = [r["data"][1] for r in recs if r["data"][0] == n]
        assert order == sorted(order)
        assert len(order) == len(seqs)
