"""Routers (spec §6): PUT/GET/list/DELETE, every error case, scopes and allowlists, the topic
delete cascade (§1.4), and forwarding through the API."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import quote

import httpx
from api_helpers import MakeClient, append, assert_error, ok, path, put_topic
from starlette.testclient import TestClient


def rpath(name: str) -> str:
    return f"/v0/routers/{quote(name, safe='>')}"


def put_router(client: TestClient, name: str, **body: Any) -> httpx.Response:
    return client.put(rpath(name), json=body)


def test_put_creates_then_is_idempotent_and_get_reports_forwarded_total(
    client: TestClient,
) -> None:
    # GIVEN a source topic
    put_topic(client, "orders")
    # WHEN a router is created, re-put identically, then changed
    first = ok(put_router(client, "orders->audit", source="orders", dest="audit"), 201)
    again = ok(put_router(client, "orders->audit", source="orders", dest="audit"), 200)
    changed = ok(
        put_router(
            client, "orders->audit", source="orders", dest="audit", filter=["tag", "Eq", "x"]
        ),
        200,
    )
    # THEN the bodies are exactly the spec's
    expected = {
        "router": "orders->audit",
        "created": True,
        "source": "orders",
        "dest": "audit",
        "preserve_node": True,
        "preserve_tag": True,
        "filter": None,
        "allow_cycle": False,
        "guarantee": "at_least_once",
    }
    assert {k: v for k, v in first.items() if k != "performance"} == expected
    assert {k: v for k, v in again.items() if k != "performance"} == {**expected, "created": False}
    assert changed["created"] is False and changed["filter"] == ["tag", "Eq", "x"]
    got = ok(client.get(rpath("orders->audit")))
    assert {k: v for k, v in got.items() if k != "performance"} == {
        **{k: v for k, v in expected.items() if k != "created"},
        "router": "orders->audit",
        "filter": ["tag", "Eq", "x"],
        "forwarded_total": 0,
    }
    # create_dest (default true) made the dest topic
    ok(client.get(path("audit")))


def test_put_validation_errors(client: TestClient) -> None:
    put_topic(client, "src")
    cases: list[dict[str, Any]] = [
        {"dest": "d"},
        {"source": "src"},
        {"source": "src", "dest": "src"},
        {"source": "src", "dest": "d", "filter": ["tag", "Glob", "a*b"]},
        {"source": "src", "dest": "d", "filter": ["tag", "Ne", "x"]},
        {"source": "src", "dest": "d", "filter": ["node", "Eq", "x"]},
        {"source": "src", "dest": "d", "filter": 5},
        {"source": "src", "dest": "d", "guarantee": "at_most_once"},
        {"source": "src", "dest": "d", "allow_cycle": "yes"},
        {"source": "bad name", "dest": "d"},
    ]
    for body in cases:
        assert_error(client.put(rpath("r1"), json=body), 400, "invalid_request")
    assert_error(client.put(rpath("r1"), json=[]), 400, "invalid_request")
    assert_error(put_router(client, "-bad", source="src", dest="d"), 400, "invalid_request")
    err = assert_error(put_router(client, "r1", dest="d"), 400, "invalid_request")
    assert err["detail"]["field"] == "source"
    # a Glob with a trailing * is fine, and '>' is allowed in router names
    ok(put_router(client, "src->d", source="src", dest="d", filter=["tag", "Glob", "p:*"]), 201)


def test_missing_topics_are_404(client: TestClient) -> None:
    put_topic(client, "have")
    assert_error(put_router(client, "r", source="nope", dest="have"), 404, "topic_not_found")
    assert_error(
        put_router(client, "r", source="have", dest="nope", create_dest=False),
        404,
        "topic_not_found",
    )
    assert_error(client.get(rpath("r")), 404, "router_not_found")
    assert_error(client.get(path("nope")), 404, "topic_not_found")


def test_cycles_are_rejected_unless_allowed(client: TestClient) -> None:
    for t in ("A", "B", "C"):
        put_topic(client, t)
    ok(put_router(client, "A->B", source="A", dest="B"), 201)
    err = assert_error(put_router(client, "B->A", source="B", dest="A"), 409, "router_cycle")
    assert err["detail"]["cycle"] == ["B", "A", "B"]
    ok(put_router(client, "B->C", source="B", dest="C"), 201)
    err = assert_error(put_router(client, "C->A", source="C", dest="A"), 409, "router_cycle")
    assert err["detail"]["cycle"] == ["C", "A", "B", "C"]
    # allow_cycle permits it (runtime hop cap instead)
    ok(put_router(client, "C->A", source="C", dest="A", allow_cycle=True), 201)


def test_second_source_into_a_dest_is_fan_in(client: TestClient) -> None:
    for t in ("x", "y"):
        put_topic(client, t)
    ok(put_router(client, "x->d", source="x", dest="d"), 201)
    ok(put_router(client, "x->d2", source="x", dest="d"), 201)  # same source: allowed
    err = assert_error(
        put_router(client, "y->d", source="y", dest="d"), 409, "topic_exists_incompatible"
    )
    assert err["detail"]["reason"] == "router_dest_fan_in"


def test_list_filters_and_pages(client: TestClient) -> None:
    for t in ("s1", "s2"):
        put_topic(client, t)
    for name, src, dst in [("s1->a", "s1", "a"), ("s1->b", "s1", "b"), ("s2->c", "s2", "c")]:
        ok(put_router(client, name, source=src, dest=dst), 201)
    names = [r["router"] for r in ok(client.get("/v0/routers"))["routers"]]
    assert names == ["s1->a", "s1->b", "s2->c"]
    row = ok(client.get("/v0/routers"))["routers"][0]
    assert row == {
        "router": "s1->a",
        "source": "s1",
        "dest": "a",
        "guarantee": "at_least_once",
        "forwarded_total": 0,
    }
    assert [r["router"] for r in ok(client.get("/v0/routers?source=s1"))["routers"]] == [
        "s1->a",
        "s1->b",
    ]
    assert [r["router"] for r in ok(client.get("/v0/routers?dest=c"))["routers"]] == ["s2->c"]
    assert [r["router"] for r in ok(client.get("/v0/routers?prefix=s2"))["routers"]] == ["s2->c"]
    page1 = ok(client.get("/v0/routers?page_size=2"))
    assert [r["router"] for r in page1["routers"]] == ["s1->a", "s1->b"]
    page2 = ok(client.get("/v0/routers", params={"page_size": 2, "cursor": page1["next_cursor"]}))
    assert [r["router"] for r in page2["routers"]] == ["s2->c"] and "next_cursor" not in page2
    assert_error(client.get("/v0/routers?cursor=%%%"), 400, "invalid_request")


def test_delete_router_is_idempotent(client: TestClient) -> None:
    put_topic(client, "p")
    ok(put_router(client, "p->q", source="p", dest="q"), 201)
    body = ok(client.delete(rpath("p->q")))
    assert {k: v for k, v in body.items() if k != "performance"} == {
        "router": "p->q",
        "deleted": True,
    }
    assert ok(client.delete(rpath("p->q")))["deleted"] is False
    assert_error(client.get(rpath("p->q")), 404, "router_not_found")


def test_topic_delete_cascades(client: TestClient) -> None:
    put_topic(client, "jobs")
    put_topic(client, "other")
    ok(put_router(client, "jobs->audit", source="jobs", dest="audit"), 201)
    ok(put_router(client, "jobs->mirror", source="jobs", dest="mirror"), 201)
    ok(put_router(client, "other->x", source="other", dest="x"), 201)
    body = ok(client.delete(path("jobs")))
    assert body["routers_removed"] == ["jobs->audit", "jobs->mirror"]
    # a dest-side cascade too
    assert ok(client.delete(path("x")))["routers_removed"] == ["other->x"]
    assert ok(client.get("/v0/routers"))["routers"] == []


def test_scopes_and_allowlists(make_client: MakeClient) -> None:
    c = make_client(api_keys_raw="root,ro:read,pre:read+write+admin+delete:t.")
    root = {"authorization": "Bearer root"}
    ro = {"authorization": "Bearer ro"}
    pre = {"authorization": "Bearer pre"}
    ok(c.put(path("t.src"), json={}, headers=root), 201)
    ok(c.put(path("u.src"), json={}, headers=root), 201)
    assert_error(c.put(rpath("t.r"), json={"source": "t.src", "dest": "t.d"}), 401, "unauthorized")
    assert_error(
        c.put(rpath("t.r"), json={"source": "t.src", "dest": "t.d"}, headers=ro),
        403,
        "forbidden",
    )
    # the prefix key: name, source and dest all inside its allowlist
    for name, src, dst in [
        ("u.r", "t.src", "t.d"),
        ("t.r", "u.src", "t.d"),
        ("t.r", "t.src", "u.d"),
    ]:
        assert_error(
            c.put(rpath(name), json={"source": src, "dest": dst}, headers=pre), 403, "forbidden"
        )
    ok(c.put(rpath("t.r"), json={"source": "t.src", "dest": "t.d"}, headers=pre), 201)
    ok(c.put(rpath("u.r"), json={"source": "u.src", "dest": "u.d"}, headers=root), 201)
    assert [r["router"] for r in ok(c.get("/v0/routers", headers=pre))["routers"]] == ["t.r"]
    assert len(ok(c.get("/v0/routers", headers=ro))["routers"]) == 2
    assert_error(c.get(rpath("u.r"), headers=pre), 403, "forbidden")
    assert_error(c.delete(rpath("t.r"), headers=ro), 403, "forbidden")
    assert ok(c.delete(rpath("t.r"), headers=pre))["deleted"] is True


def test_forwarding_through_the_api_and_metrics_gauge(client: TestClient) -> None:
    put_topic(client, "in")
    ok(put_router(client, "in->out", source="in", dest="out", filter=["tag", "Glob", "pub:*"]), 201)
    append(
        client,
        "in",
        [
            {"data": 1, "node": "n1", "tag": "pub:a"},
            {"data": 2, "node": "n1", "tag": "priv"},
            {"data": 3, "tag": "pub:b", "meta": {"k": "v"}},
        ],
    )
    deadline = time.monotonic() + 10
    records: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        records = ok(client.post(path("out", "/diff"), json={"include_tags": True}))["records"]
        if len(records) == 2:
            break
        time.sleep(0.05)
    assert [(r["data"], r.get("$node"), r.get("$tag"), r.get("meta")) for r in records] == [
        (1, "n1", "pub:a", None),
        (3, None, "pub:b", {"k": "v"}),
    ]
    deadline = time.monotonic() + 5
    while ok(client.get(rpath("in->out")))["forwarded_total"] != 2:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    metrics = client.get("/v0/metrics").text
    assert "topics_routers 1" in metrics
