"""Topic lifecycle (spec §0.10, §1): PUT upsert, GET state, list, DELETE, name rules."""

from __future__ import annotations

import time
from typing import Any

import pytest
from api_helpers import (
    append_data,
    assert_error,
    diff,
    ok,
    path,
    put_topic,
    seqs_of,
    state,
)
from starlette.testclient import TestClient

pytestmark = pytest.mark.api

DEFAULT_CONFIG: dict[str, Any] = {
    "type": "log",
    "ttl_ms": 0,
    "cap_records": 0,
    "cap_bytes": 0,
    "discard": "old",
    "durable": False,
    "durability": "disk",
    "priority": None,
    "auto_priority": True,
    "auto_create": True,
    "idempotency_window_ms": 120000,
    "dedupe_node": True,
    "lease_ms": 30000,
    "claim_jitter_ms": 0,
    "max_deliveries": 0,
    "dead_letter": None,
    "leases_durable": False,
}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# --- PUT /v0/topics/:topic -------------------------------------------------------------


def test_put_creates_with_full_default_config(client: TestClient) -> None:
    # GIVEN no topic WHEN PUT with an empty object
    r = client.put("/v0/topics/jobs", json={})
    # THEN 201, created, and all 17 config fields echoed with their defaults
    body = ok(r, 201)
    assert body["topic"] == "jobs" and body["created"] is True
    assert body["config"] == DEFAULT_CONFIG


def test_put_without_body_creates_with_defaults(client: TestClient) -> None:
    body = ok(client.put("/v0/topics/bare"), 201)
    assert body["config"] == DEFAULT_CONFIG


def test_put_identical_is_noop_200(client: TestClient) -> None:
    # GIVEN a configured topic
    cfg = {
        "ttl_ms": 60000,
        "cap_records": 1000000,
        "discard": "old",
        "durable": True,
        "priority": 10,
    }
    first = ok(client.put("/v0/topics/jobs", json=cfg), 201)
    # WHEN the same PUT is repeated, and an empty PUT follows
    again = ok(client.put("/v0/topics/jobs", json=cfg), 200)
    empty = ok(client.put("/v0/topics/jobs", json={}), 200)
    # THEN both are 200 no-ops echoing the unchanged config
    assert again["created"] is False and empty["created"] is False
    assert again["config"] == first["config"] == empty["config"]
    assert first["config"] == {
        **DEFAULT_CONFIG,
        "ttl_ms": 60000,
        "cap_records": 1000000,
        "durable": True,
        "durability": "fsync",
        "priority": 10,
    }


def test_put_changed_config_applies_diff_and_echoes_full_object(client: TestClient) -> None:
    put_topic(client, "jobs", {"ttl_ms": 1000, "priority": 3})
    # WHEN only some fields change
    body = ok(client.put("/v0/topics/jobs", json={"cap_bytes": 4096, "dedupe_node": False}), 200)
    # THEN the response is 200, not created, with the merged full config
    assert body["created"] is False
    expected = {
        **DEFAULT_CONFIG,
        "ttl_ms": 1000,
        "priority": 3,
        "cap_bytes": 4096,
        "dedupe_node": False,
    }
    assert body["config"] == expected
    assert state(client, "jobs")["config"] == expected


def test_put_queue_topic_accepts_queue_fields(client: TestClient) -> None:
    cfg = {
        "type": "queue",
        "durable": True,
        "discard": "reject",
        "lease_ms": 30000,
        "claim_jitter_ms": 0,
        "max_deliveries": 5,
        "dead_letter": "jobs.dlq",
        "leases_durable": True,
    }
    body = ok(client.put("/v0/topics/jobs", json=cfg), 201)
    assert body["config"] == {**DEFAULT_CONFIG, **cfg, "durability": "fsync"}


@pytest.mark.parametrize(("first", "second"), [("log", "queue"), ("queue", "log")])
def test_put_changing_type_is_409(client: TestClient, first: str, second: str) -> None:
    put_topic(client, "t", {"type": first})
    err = assert_error(
        client.put("/v0/topics/t", json={"type": second}), 409, "topic_exists_incompatible"
    )
    assert err["message"]
    # THEN the topic keeps its type, and naming the same type is still fine
    assert state(client, "t")["config"]["type"] == first
    assert ok(client.put("/v0/topics/t", json={"type": first}), 200)["created"] is False


def test_put_implicit_log_type_on_existing_queue_is_not_a_type_change(client: TestClient) -> None:
    put_topic(client, "q", {"type": "queue"})
    body = ok(client.put("/v0/topics/q", json={"ttl_ms": 5}), 200)
    assert body["config"]["type"] == "queue"


def test_dead_letter_must_differ_from_topic(client: TestClient) -> None:
    assert_error(
        client.put("/v0/topics/jobs", json={"type": "queue", "dead_letter": "jobs"}),
        400,
        "invalid_request",
    )
    assert client.get("/v0/topics/jobs").status_code == 404
    body = ok(client.put("/v0/topics/jobs", json={"dead_letter": "jobs.dlq"}), 201)
    assert body["config"]["dead_letter"] == "jobs.dlq"
    assert_error(
        client.put("/v0/topics/jobs", json={"dead_letter": ".bad"}), 400, "invalid_request"
    )


CLAMPS: list[tuple[str, Any, Any]] = [
    ("lease_ms", 5, 100),
    ("lease_ms", 0, 100),
    ("lease_ms", 10**12, 86_400_000),
    ("lease_ms", 45_000, 45_000),
    ("claim_jitter_ms", 99_999, 5000),
    ("claim_jitter_ms", 250, 250),
    ("priority", 5000, 1000),
    ("priority", -5000, -1000),
    ("priority", -7, -7),
    ("priority", None, None),
]


def test_config_values_are_clamped(client: TestClient) -> None:
    for i, (field, given, stored) in enumerate(CLAMPS):
        body = ok(client.put(f"/v0/topics/c{i}", json={field: given}), 201)
        assert body["config"][field] == stored, (field, given)
        assert state(client, f"c{i}")["config"][field] == stored


DURABILITY: list[tuple[dict[str, Any], str, bool]] = [
    ({}, "disk", False),
    ({"durable": True}, "fsync", True),
    ({"durable": False}, "disk", False),
    ({"durability": "ephemeral"}, "ephemeral", False),
    ({"durability": "memory"}, "memory", False),
    ({"durability": "disk"}, "disk", False),
    ({"durability": "fsync"}, "fsync", True),
    # an explicit durability always wins over the durable shorthand
    ({"durable": True, "durability": "memory"}, "memory", False),
    ({"durable": False, "durability": "fsync"}, "fsync", True),
]


def test_durability_resolution_on_create(client: TestClient) -> None:
    for i, (given, durability, durable) in enumerate(DURABILITY):
        body = ok(client.put(f"/v0/topics/d{i}", json=given), 201)
        assert body["config"]["durability"] == durability, given
        assert body["config"]["durable"] is durable, given
        st = state(client, f"d{i}")
        assert (st["config"]["durability"], st["config"]["durable"]) == (durability, durable)


def test_durability_is_mutable_in_place(client: TestClient) -> None:
    put_topic(client, "d", {"durable": True})
    body = ok(client.put("/v0/topics/d", json={"durability": "ephemeral"}), 200)
    assert (body["config"]["durability"], body["config"]["durable"]) == ("ephemeral", False)
    body = ok(client.put("/v0/topics/d", json={"durable": True}), 200)
    assert (body["config"]["durability"], body["config"]["durable"]) == ("fsync", True)
    body = ok(client.put("/v0/topics/d", json={"durable": False}), 200)
    assert (body["config"]["durability"], body["config"]["durable"]) == ("disk", False)


def test_durability_via_inline_append_config(client: TestClient) -> None:
    append_data(client, "d", 1, config={"durable": True})
    cfg = state(client, "d")["config"]
    assert (cfg["durability"], cfg["durable"]) == ("fsync", True)


# --- names (§1.1) ----------------------------------------------------------------------

VALID_NAMES = [
    "a",
    "Z",
    "9",
    "a" * 255,
    "render-queue:tenantA",
    "a.b_c-d:e",
    "jobs.dlq",
    "x:",
    "0..--__::",
]
INVALID_NAMES = [
    "a" * 256,
    ".a",
    "_a",
    "-a",
    ":a",
    "a b",
    "a/b",
    "a/diff",
    "a/delete",
    "a*",
    "a?b",
    "a#b",
    "é",
    "a\\b",
    "a>b",
    "a%b",
]


def test_valid_names(client: TestClient) -> None:
    for name in VALID_NAMES:
        body = ok(client.put(path(name), json={}), 201)
        assert body["topic"] == name
        assert ok(client.get(path(name)))["topic"] == name
        assert ok(client.post(path(name), json={"records": [{"data": 1}]}))["seqs"] == [1]
        assert seqs_of(diff(client, name)) == [1]
    listed = [t["topic"] for t in ok(client.get("/v0/topics"))["topics"]]
    assert listed == sorted(VALID_NAMES)


ROUTES_WITH_NAME: list[tuple[str, str, dict[str, Any] | None]] = [
    ("PUT", "", {}),
    ("GET", "", None),
    ("DELETE", "", None),
    ("POST", "", {"records": [{"data": 1}]}),
    ("POST", "/diff", {}),
    ("POST", "/delete", {"before_seq": 5}),
]


def test_invalid_names_are_400_on_every_route(client: TestClient) -> None:
    # GIVEN a topic whose name is a prefix of the invalid ones (so a mis-route would show)
    append_data(client, "a", 1)
    for name in INVALID_NAMES:
        for method, suffix, body in ROUTES_WITH_NAME:
            # WHEN the invalid name is used, percent-encoded in the path
            r = client.request(method, path(name, suffix), json=body)
            # THEN 400 invalid_request
            assert r.status_code == 400, (name, method, suffix, r.text)
            assert_error(r, 400, "invalid_request")
    # AND nothing was created or changed
    listed = [t["topic"] for t in ok(client.get("/v0/topics"))["topics"]]
    assert listed == ["a"]
    assert state(client, "a")["head_seq"] == 1


def test_names_are_case_sensitive(client: TestClient) -> None:
    put_topic(client, "Jobs")
    assert_error(client.get("/v0/topics/jobs"), 404, "topic_not_found")
    assert ok(client.put("/v0/topics/jobs", json={}), 201)["created"] is True


# --- GET /v0/topics/:topic -------------------------------------------------------------


def test_state_of_fresh_topic(client: TestClient) -> None:
    put_topic(client, "jobs")
    body = ok(client.get("/v0/topics/jobs", params={"touch": "false"}))
    assert body["topic"] == "jobs"
    assert body["type"] == "log"
    assert body["head_seq"] == 0
    assert body["earliest_seq"] == 1  # head + 1 when empty
    assert body["next_seq"] == 1
    assert body["count"] == 0 and body["bytes"] == 0
    assert body["config"] == DEFAULT_CONFIG
    assert body["effective_priority"] == 0
    assert body["last_write_ts"] is None and body["last_read_ts"] is None
    assert "queue" not in body


def test_state_after_writes(client: TestClient) -> None:
    before = now_ms()
    append_data(client, "jobs", {"a": 1}, "two", None)
    body = state(client, "jobs")
    assert (body["head_seq"], body["earliest_seq"], body["next_seq"]) == (3, 1, 4)
    assert body["count"] == 3
    assert isinstance(body["bytes"], int) and body["bytes"] > 0
    assert before - 5 <= body["last_write_ts"] <= now_ms() + 5
    # WHEN more is written THEN bytes grow
    append_data(client, "jobs", "x" * 1000)
    after = state(client, "jobs")
    assert after["bytes"] >= body["bytes"] + 1000
    assert after["count"] == 4 and after["next_seq"] == 5


def test_state_of_queue_topic_has_queue_object(client: TestClient) -> None:
    put_topic(client, "q", {"type": "queue"})
    append_data(client, "q", 1, 2)
    body = state(client, "q")
    assert body["type"] == "queue" and body["config"]["type"] == "queue"
    assert set(body["queue"]) == {"ready", "in_flight", "dead_lettered"}


def test_touch_false_does_not_bump_last_read_ts(client: TestClient) -> None:
    put_topic(client, "jobs")
    # WHEN state is read with touch=false, twice
    assert state(client, "jobs")["last_read_ts"] is None
    assert state(client, "jobs")["last_read_ts"] is None
    # WHEN it is read with the default (touch=true)
    t0 = now_ms()
    ok(client.get("/v0/topics/jobs"))
    # THEN the recency clock moved and drives auto-priority
    after = state(client, "jobs")
    assert after["last_read_ts"] is not None and after["last_read_ts"] >= t0 - 5
    assert after["effective_priority"] > 0
    # AND list does not touch by default
    assert ok(client.get("/v0/topics"))["topics"][0]["topic"] == "jobs"
    assert state(client, "jobs")["last_read_ts"] == after["last_read_ts"]


def test_list_touch_true_bumps_read_recency(client: TestClient) -> None:
    put_topic(client, "a")
    put_topic(client, "b")
    ok(client.get("/v0/topics", params={"touch": "false"}))
    assert state(client, "a")["last_read_ts"] is None
    ok(client.get("/v0/topics", params={"touch": "true", "prefix": "a"}))
    assert state(client, "a")["last_read_ts"] is not None
    assert state(client, "b")["last_read_ts"] is None


def test_null_priority_returns_to_auto(client: TestClient) -> None:
    put_topic(client, "p", {"priority": 50})
    body = ok(client.put("/v0/topics/p", json={"priority": None}), 200)
    assert body["config"]["priority"] is None
    ok(client.get("/v0/topics/p"))
    assert state(client, "p")["effective_priority"] != 50


def test_manual_priority_overrides_auto(client: TestClient) -> None:
    put_topic(client, "p", {"priority": -12})
    ok(client.get("/v0/topics/p"))
    assert state(client, "p")["effective_priority"] == -12
    put_topic(client, "np", {"auto_priority": False})
    ok(client.get("/v0/topics/np"))
    assert state(client, "np")["effective_priority"] == 0


def test_get_missing_topic_is_404_and_does_not_create(client: TestClient) -> None:
    err = assert_error(client.get("/v0/topics/nope"), 404, "topic_not_found")
    assert err.get("detail", {}).get("topic") == "nope"
    assert ok(client.get("/v0/topics"))["topics"] == []


# --- GET /v0/topics --------------------------------------------------------------------


def test_list_paginates_with_opaque_cursor(client: TestClient) -> None:
    # GIVEN 7 topics under a prefix, and others outside it
    names = [f"pg.{i}" for i in range(7)]
    for n in reversed(names):
        put_topic(client, n)
    for other in ("pf", "ph.1", "zz"):
        put_topic(client, other)
    # WHEN listing with page_size 3
    seen: list[str] = []
    pages: list[int] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"prefix": "pg.", "page_size": 3}
        if cursor is not None:
            params["cursor"] = cursor
        body = ok(client.get("/v0/topics", params=params))
        pages.append(len(body["topics"]))
        seen.extend(t["topic"] for t in body["topics"])
        cursor = body.get("next_cursor")
        if cursor is None:
            assert "next_cursor" not in body
            break
        assert isinstance(cursor, str) and cursor
    # THEN 3 + 3 + 1, sorted, each once, and no cursor on the last page
    assert pages == [3, 3, 1]
    assert seen == sorted(names)


def test_list_exact_page_boundary_has_no_trailing_cursor(client: TestClient) -> None:
    for i in range(6):
        put_topic(client, f"b{i}")
    first = ok(client.get("/v0/topics", params={"page_size": 3}))
    assert len(first["topics"]) == 3 and "next_cursor" in first
    second = ok(client.get("/v0/topics", params={"page_size": 3, "cursor": first["next_cursor"]}))
    assert [t["topic"] for t in second["topics"]] == ["b3", "b4", "b5"]
    assert "next_cursor" not in second


def test_list_summary_fields(client: TestClient) -> None:
    put_topic(client, "events", {"durable": True, "priority": 7})
    append_data(client, "events", 1, 2, 3)
    put_topic(client, "empty")
    body = ok(client.get("/v0/topics"))
    by_name = {t["topic"]: t for t in body["topics"]}
    ev = by_name["events"]
    assert (ev["head_seq"], ev["earliest_seq"], ev["count"]) == (3, 1, 3)
    assert ev["bytes"] > 0 and ev["durable"] is True and ev["effective_priority"] == 7
    em = by_name["empty"]
    assert (em["head_seq"], em["earliest_seq"], em["count"], em["bytes"]) == (0, 1, 0, 0)
    assert em["durable"] is False and isinstance(em["effective_priority"], int)
    assert "next_cursor" not in body


def test_list_default_and_max_page_size(client: TestClient) -> None:
    for i in range(3):
        put_topic(client, f"t{i}")
    assert len(ok(client.get("/v0/topics"))["topics"]) == 3
    assert len(ok(client.get("/v0/topics", params={"page_size": 5000}))["topics"]) == 3
    assert_error(client.get("/v0/topics", params={"page_size": 0}), 400, "invalid_request")
    assert_error(client.get("/v0/topics", params={"page_size": "x"}), 400, "invalid_request")


def test_list_prefix_filters(client: TestClient) -> None:
    for n in ("tenant42:a", "tenant42:b", "tenant43:a", "shared.x"):
        put_topic(client, n)
    names = [
        t["topic"] for t in ok(client.get("/v0/topics", params={"prefix": "tenant42:"}))["topics"]
    ]
    assert names == ["tenant42:a", "tenant42:b"]
    assert ok(client.get("/v0/topics", params={"prefix": "nomatch"}))["topics"] == []


def test_list_malformed_cursor_is_400(client: TestClient) -> None:
    put_topic(client, "a")
    for cursor in ("!!!", "bm90LWpzb24", "eyJub3BlIjoxfQ==", "eyJhZnRlciI6MX0="):
        assert_error(client.get("/v0/topics", params={"cursor": cursor}), 400, "invalid_request")


def test_list_hides_deleted_topics(client: TestClient) -> None:
    put_topic(client, "keep")
    put_topic(client, "gone")
    ok(client.delete("/v0/topics/gone"))
    assert [t["topic"] for t in ok(client.get("/v0/topics"))["topics"]] == ["keep"]


# --- DELETE /v0/topics/:topic ----------------------------------------------------------


def test_delete_topic_is_idempotent(client: TestClient) -> None:
    append_data(client, "jobs", 1, 2)
    first = ok(client.delete("/v0/topics/jobs"))
    assert first == {**first, "topic": "jobs", "deleted": True, "routers_removed": []}
    assert_error(client.get("/v0/topics/jobs"), 404, "topic_not_found")
    second = ok(client.delete("/v0/topics/jobs"))
    assert second["deleted"] is False and second["routers_removed"] == []
    never = ok(client.delete("/v0/topics/never"))
    assert never["deleted"] is False and never["routers_removed"] == []


def test_delete_if_empty(client: TestClient) -> None:
    append_data(client, "full", 1)
    err = assert_error(
        client.delete("/v0/topics/full", params={"if_empty": "true"}), 409, "topic_not_empty"
    )
    assert err["message"]
    assert state(client, "full")["count"] == 1
    put_topic(client, "empty")
    assert ok(client.delete("/v0/topics/empty", params={"if_empty": "true"}))["deleted"] is True
    # a topic emptied by a record delete counts as empty
    ok(client.post("/v0/topics/full/delete", json={"before_seq": 100}))
    assert ok(client.delete("/v0/topics/full", params={"if_empty": "true"}))["deleted"] is True


def test_delete_then_lazy_recreate_restarts_seqs(client: TestClient) -> None:
    put_topic(client, "jobs", {"ttl_ms": 5000})
    append_data(client, "jobs", "old1", "old2", "old3")
    ok(client.delete("/v0/topics/jobs"))
    # WHEN a write lazily recreates it
    r = client.post("/v0/topics/jobs", json={"records": [{"data": "new"}]})
    body = ok(r, 201)
    # THEN it is a new, empty topic with default config and seqs from 1
    assert body["created"] is True and body["seqs"] == [1]
    st = state(client, "jobs")
    assert (st["head_seq"], st["earliest_seq"], st["count"]) == (1, 1, 1)
    assert st["config"] == DEFAULT_CONFIG
    d = diff(client, "jobs")
    assert [r["data"] for r in d["records"]] == ["new"]


def test_delete_then_put_recreates(client: TestClient) -> None:
    append_data(client, "jobs", 1)
    ok(client.delete("/v0/topics/jobs"))
    body = ok(client.put("/v0/topics/jobs", json={"type": "queue"}), 201)
    assert body["created"] is True and body["config"]["type"] == "queue"
    assert state(client, "jobs")["head_seq"] == 0
