"""/v1 search and inspection routes (§2.4, §2.6, §7B, §8.6, §8.7), scan-based: _search
(both sort orders, search_after paging, field sorts, 408 partials, 400s), _aggregate against
a brute-force computation, _routing_keys paging, _index_status / _details with ETag, 304 and
long-poll, the server routes, and auth (401/403) and 404 on every new route."""

from __future__ import annotations

import json
import math
import random
import uuid
from collections import defaultdict
from typing import Any

import pytest
from api_helpers import MakeClient
from starlette.testclient import TestClient

from headwater.durable import scan as scan_mod
from headwater.durable.offsets import decode_offset
from headwater.durable.state import topic_of
from headwater.engine.sealed import cache_key
from headwater.services import Services
from headwater.settings import Tiering

pytestmark = pytest.mark.api

EAGER = Tiering(
    seal_records=10, seal_age_ms=0, grace_ms=0, block_bytes=256, interval_ms=0, inline=False
)
JSON = {"Content-Type": "application/json"}
SERVICES = ["api", "web", "db", "Auth"]
WORDS = ["connection", "reset", "timeout", "peer", "ok", "retry", "disk", "full"]
T0 = 1_700_000_000_000
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "ts": {"type": "integer"},
        "svc": {"type": "string"},
        "msg": {"type": "string"},
        "ms": {"type": "number"},
        "err": {"type": "boolean"},
        "rk": {"type": "string"},
    },
}


def _f(kind: str, ptr: str, **kw: Any) -> dict[str, Any]:
    return {"kind": kind, "bindings": [{"version": 1, "jsonPointer": ptr}], **kw}


SEARCH: dict[str, Any] = {
    "primaryTimestampField": "ts",
    "fields": {
        "ts": _f("date", "/ts", column=True, exact=True, sortable=True),
        "svc": _f("keyword", "/svc", normalizer="lowercase_v1", exact=True, prefix=True),
        "msg": _f("text", "/msg", analyzer="unicode_word_v1", positions=True, exists=True),
        "ms": _f("float", "/ms", column=True, sortable=True, aggregatable=True),
        "err": _f("bool", "/err", exact=True, column=True),
    },
    "aliases": {"service": "svc"},
    "defaultFields": [{"field": "msg"}],
    "rollups": {
        "lat": {
            "dimensions": ["svc", "err"],
            "intervals": ["1m", "5m"],
            "measures": {
                "events": {"kind": "count"},
                "errors": {"kind": "count", "include": "err:true"},
                "latency": {"kind": "summary", "field": "ms", "histogram": "log2_v1"},
            },
        },
        "errs": {"include": "err:true", "intervals": ["1m"], "measures": {"n": {"kind": "count"}}},
    },
}


def url(name: str, sub: str = "") -> str:
    return f"/v1/stream/{name}" + (f"/{sub}" if sub else "")


def services(client: TestClient) -> Services:
    svc: Services = client.app.state.services.get()  # type: ignore[attr-defined]
    return svc


def docs(n: int, seed: int = 7) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        d: dict[str, Any] = {
            "ts": T0 + i * 17_000 + rnd.randrange(5000),
            "svc": rnd.choice(SERVICES),
            "msg": " ".join(rnd.choice(WORDS) for _ in range(rnd.randrange(1, 5))),
            "err": rnd.random() < 0.3,
            "rk": f"k{rnd.randrange(40):02d}",
        }
        if rnd.random() < 0.9:
            d["ms"] = round(rnd.uniform(0, 300), 3)
        out.append(d)
    return out


def make_stream(
    c: TestClient, name: str, values: list[dict[str, Any]], routing: bool = True
) -> None:
    assert c.put(url(name), headers=JSON).status_code == 201
    body: dict[str, Any] = {"schema": SCHEMA, "search": SEARCH}
    if routing:
        body["routingKey"] = {"jsonPointer": "/rk", "required": True}
    r = c.post(url(name, "_schema"), content=json.dumps(body), headers=JSON)
    assert r.status_code == 200, r.text
    for i in range(0, len(values), 50):
        r = c.post(url(name), content=json.dumps(values[i : i + 50]), headers=JSON)
        assert r.status_code == 204, r.text


def seal(c: TestClient, name: str) -> None:
    services(c).upkeep.run(topic_of(name))


def seq(offset: str) -> int:
    off = decode_offset(offset)
    return off.seq  # type: ignore[union-attr]


def search(c: TestClient, name: str, **body: Any) -> Any:
    r = c.post(url(name, "_search"), content=json.dumps(body), headers=JSON)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture
def sealed(make_client: MakeClient) -> tuple[TestClient, list[dict[str, Any]]]:
    """A stream of 120 entries, most of them in sealed S3 segments, the rest in the tail."""
    c = make_client(tiering=EAGER)
    values = docs(120)
    make_stream(c, "s", values[:100])
    seal(c, "s")
    r = c.post(url("s"), content=json.dumps(values[100:]), headers=JSON)
    assert r.status_code == 204
    return c, values


# --------------------------------------------------------------------------- _search
def _match_svc_api(d: dict[str, Any]) -> bool:
    return str(d["svc"]).lower() == "api"


def test_search_offset_desc_pages_cover_every_match_once(sealed: Any) -> None:
    c, values = sealed
    want = [i + 1 for i, d in enumerate(values) if _match_svc_api(d)][::-1]
    got: list[int] = []
    after = None
    pages = 0
    tail_docs = segments = 0
    while True:
        body: dict[str, Any] = {"q": "service:API", "size": 7}
        if after is not None:
            body["search_after"] = after
        res = search(c, "s", **body)
        got += [seq(h["offset"]) for h in res["hits"]]
        for h in res["hits"]:
            assert h["source"] == values[seq(h["offset"]) - 1]
            assert h["fields"]["svc"] == h["source"]["svc"]
            assert h["sort"] == [h["offset"]]
        pages += 1
        tail_docs += res["coverage"]["scanned_tail_docs"]
        segments += res["coverage"]["scanned_segments"]
        after = res["next_search_after"]
        if after is None:
            assert res["total"]["relation"] == "eq"
            break
        assert res["total"]["relation"] == "gte" and len(res["hits"]) == 7
    assert got == want and pages == math.ceil(len(want) / 7) + (len(want) % 7 == 0)
    cov = res["coverage"]
    assert cov["complete"] is True and cov["indexed_segments"] == 0
    assert cov["index_families_used"] == []
    assert segments > 0 and tail_docs > 0  # sealed segments and the DynamoDB tail both read


def test_search_offset_asc_and_field_sort_pages(sealed: Any) -> None:
    c, values = sealed
    q = "msg:timeout OR err:true"

    def ref(d: dict[str, Any]) -> bool:
        return "timeout" in d["msg"].split() or d["err"]

    for sort, order in (
        (["offset:asc"], lambda i, d: i),
        (["ms:desc"], lambda i, d: (d.get("ms") is None, -d.get("ms", 0), -i)),
        (["ts:asc"], lambda i, d: (d["ts"], -i)),
    ):
        want = sorted(
            (i + 1 for i, d in enumerate(values) if ref(d)),
            key=lambda s: order(s, values[s - 1]),
        )
        got: list[int] = []
        after = None
        while True:
            body: dict[str, Any] = {"q": q, "size": 9, "sort": sort}
            if after is not None:
                body["search_after"] = after
            res = search(c, "s", **body)
            got += [seq(h["offset"]) for h in res["hits"]]
            after = res["next_search_after"]
            if after is None:
                break
        assert got == want, sort


def _walk(c: TestClient, name: str, size: int, get: bool = False, **body: Any) -> list[Any]:
    """Every page of a search, following next_search_after to its end."""
    pages: list[Any] = []
    after = None
    while len(pages) < 100:
        req = dict(body, size=size) | ({"search_after": after} if after is not None else {})
        if get:
            params = {k: json.dumps(v) if k == "search_after" else v for k, v in req.items()}
            params["sort"] = ",".join(req.get("sort", []))
            r = c.get(url(name, "_search"), params=params)
            assert r.status_code == 200, r.text
            res = r.json()
        else:
            res = search(c, name, **req)
        pages.append(res)
        after = res["next_search_after"]
        if after is None:
            return pages
    raise AssertionError("the walk did not end")


def test_sorted_pages_say_gte_while_a_next_page_follows(sealed: Any) -> None:
    """A field sort (a sortable number, the primary timestamp) or a score sort scans the
    whole snapshot, so its total is exact; its relation is still `gte` on every page but
    the last (§8.6: the page does not hold every match), as an offset sort's is: a client
    may stop paging at `eq`. Every match comes once, in order, through the cursors."""
    c, values = sealed
    q = "msg:timeout OR err:true"

    def ref(d: dict[str, Any]) -> bool:
        return "timeout" in d["msg"].split() or d["err"]

    matching = [i + 1 for i, d in enumerate(values) if ref(d)]
    for sort, order, get in (
        (["ms:asc"], lambda s, d: (d.get("ms") is None, d.get("ms", 0), -s), False),
        (["ms:desc"], lambda s, d: (d.get("ms") is None, -d.get("ms", 0), -s), True),
        (["ts:asc"], lambda s, d: (d["ts"], -s), False),
        (["ts:desc"], lambda s, d: (-d["ts"], -s), True),
    ):
        want = sorted(matching, key=lambda s: order(s, values[s - 1]))
        pages = _walk(c, "s", 9, get=get, q=q, sort=sort)
        assert [seq(h["offset"]) for p in pages for h in p["hits"]] == want, sort
        assert len(pages) == math.ceil(len(want) / 9), sort
        for i, res in enumerate(pages):
            assert res["total"]["value"] == len(want) - 9 * i  # the matches past the cursor
            if i < len(pages) - 1:
                assert res["total"]["relation"] == "gte", (sort, i)
                assert res["next_search_after"] == res["hits"][-1]["sort"]
            else:
                assert res["total"]["relation"] == "eq", sort
    # a text query ranks by score (then the primary timestamp): the same rule
    pages = _walk(c, "s", 5, q="timeout OR reset")
    assert len(pages) > 2
    assert [p["total"]["relation"] for p in pages] == ["gte"] * (len(pages) - 1) + ["eq"]
    got = [seq(h["offset"]) for p in pages for h in p["hits"]]
    want_text = {
        i + 1 for i, d in enumerate(values) if {"timeout", "reset"} & set(d["msg"].split())
    }
    assert sorted(got) == sorted(want_text) and len(got) == len(want_text)
    # an evlog stream sorted by duration, and by its primary timestamp, pages the same way
    assert c.put(url("ev"), headers=JSON).status_code == 201
    profile = {"apiVersion": "durable.streams/profile/v1", "profile": {"kind": "evlog"}}
    r = c.post(url("ev", "_profile"), content=json.dumps(profile), headers=JSON)
    assert r.status_code == 200, r.text
    rnd = random.Random(3)
    logs = [
        {
            "timestamp": f"2024-01-01T00:00:{i:02d}.{rnd.randrange(1000):03d}Z",
            "level": "info",
            "duration": rnd.randrange(20) if i % 5 else None,
            "message": f"request {i}",
        }
        for i in range(40)
    ]
    assert c.post(url("ev"), content=json.dumps(logs), headers=JSON).status_code == 204
    by_duration = sorted(
        range(1, 41),
        key=lambda s: (logs[s - 1]["duration"] is None, logs[s - 1]["duration"] or 0, -s),
    )
    for sort, want in (
        (["duration:asc"], by_duration),
        (["timestamp:asc"], list(range(1, 41))),
    ):
        pages = _walk(c, "ev", 15, q="level:info", sort=sort)
        assert [seq(h["offset"]) for p in pages for h in p["hits"]] == want, sort
        assert [p["total"]["relation"] for p in pages] == ["gte", "gte", "eq"], sort


def test_search_get_form_and_text(sealed: Any) -> None:
    c, values = sealed
    r = c.get(url("s", "_search"), params={"q": '"connection reset"', "size": "500"})
    assert r.status_code == 200, r.text
    want = {
        i + 1
        for i, d in enumerate(values)
        if any(
            d["msg"].split()[j : j + 2] == ["connection", "reset"]
            for j in range(len(d["msg"].split()))
        )
    }
    assert {seq(h["offset"]) for h in r.json()["hits"]} == want
    assert r.headers["search-total-relation"] == "eq"
    assert r.headers["search-coverage-complete"] == "true"
    assert r.headers["search-indexed-segments"] == "0"
    assert all(h["score"] > 0 for h in r.json()["hits"])
    # keyword prefix, bare term, has:
    r = c.get(url("s", "_search"), params={"q": "svc:a* -has:ms", "size": "500"})
    want = {
        i + 1 for i, d in enumerate(values) if d["svc"].lower().startswith("a") and "ms" not in d
    }
    assert {seq(h["offset"]) for h in r.json()["hits"]} == want


def test_search_timeout_is_408_with_a_partial_body(
    sealed: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    c, _ = sealed
    ticks = iter(range(10**9))
    monkeypatch.setattr(scan_mod, "monotonic", lambda: next(ticks) / 1000)  # +1 ms a call
    r = c.post(
        url("s", "_search"),
        content=json.dumps({"q": "has:ts", "timeout_ms": 40, "size": 500}),
        headers=JSON,
    )
    assert r.status_code == 408, r.text
    body = r.json()
    assert body["timed_out"] is True and body["timeout_ms"] == 40
    assert body["total"]["relation"] == "gte"
    assert 0 < len(body["hits"]) < 120
    cov = body["coverage"]
    assert cov["complete"] is False
    assert cov["possible_missing_events_upper_bound"] == 120 - len(body["hits"])
    assert r.headers["search-timed-out"] == "true"


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"q": ""},
        {"q": "nope:1"},
        {"q": "msg:>3"},
        {"q": "ts:yesterday"},
        {"q": "svc:x", "size": 0},
        {"q": "svc:x", "size": 501},
        {"q": "svc:x", "size": "ten"},
        {"q": "svc:x", "sort": ["msg:asc"]},
        {"q": "svc:x", "sort": ["ts:sideways"]},
        {"q": "svc:x", "sort": "ts:asc"},
        {"q": "svc:x", "search_after": ["nope"]},
        {"q": "svc:x", "search_after": [1, 2]},
        {"q": "svc:x", "sort": ["ts:asc"], "search_after": ["x", "01"]},
        {"q": "svc:x", "timeout_ms": -1},
        {"q": "svc:x", "extra": 1},
        {"q": "(svc:x"},
        {"q": 'err:"maybe"'},
    ],
)
def test_search_bad_requests_are_400(sealed: Any, body: dict[str, Any]) -> None:
    c, _ = sealed
    r = c.post(url("s", "_search"), content=json.dumps(body), headers=JSON)
    assert r.status_code == 400, (body, r.status_code, r.text)
    assert r.json()["error"]["code"]


def test_search_400_for_non_json_body_and_without_search_config(client: TestClient) -> None:
    make_stream(client, "a", docs(3))
    r = client.post(url("a", "_search"), content=b"{", headers=JSON)
    assert r.status_code == 400
    client.put(url("plain"), headers=JSON)
    r = client.get(url("plain", "_search"), params={"q": "x"})
    assert r.status_code == 400 and "search is not configured" in r.text
    r = client.get(url("a", "_search"), params={"q": "svc:x", "bogus": "1"})
    assert r.status_code == 400
    assert client.put(url("a", "_search")).status_code == 405


# --------------------------------------------------------------------------- _aggregate
def brute_force(
    values: list[dict[str, Any]], rollup: str, frm: int, to: int, step: int, group_by: list[str]
) -> dict[tuple[int, str], dict[str, Any]]:
    out: dict[tuple[int, str], dict[str, Any]] = {}
    for d in values:
        if not frm <= d["ts"] < to:
            continue
        if rollup == "errs":
            if not d["err"]:
                continue
        elif "ms" not in d:
            continue  # a summary field missing: the record does not contribute
        start = d["ts"] - d["ts"] % step
        key = {"svc": d["svc"].lower(), "err": d["err"]}
        gk = json.dumps({g: key[g] for g in group_by}, sort_keys=True)
        m = out.setdefault((start, gk), defaultdict(list))
        m["events"].append(1)
        m["errors"].append(1 if d["err"] else 0)
        m["n"].append(1)
        if "ms" in d:
            m["latency"].append(d["ms"])
    return out


def test_aggregate_matches_a_brute_force_computation(sealed: Any) -> None:
    c, values = sealed
    frm, to = T0 + 95_000, T0 + 1_700_000
    body = {
        "rollup": "lat",
        "from": "2023-11-14T22:14:55Z",  # T0 + 95 s
        "to": to,
        "interval": "5m",
        "group_by": ["svc"],
    }
    assert frm == 1_700_000_095_000
    r = c.post(url("s", "_aggregate"), content=json.dumps(body), headers=JSON)
    assert r.status_code == 200, r.text
    res = r.json()
    assert res["coverage"]["used_rollups"] is False and res["coverage"]["complete"] is True
    want = brute_force(values, "lat", frm, to, 300_000, ["svc"])
    got = {}
    for b in res["buckets"]:
        for g in b["groups"]:
            start = seq_ms(b["start"])
            assert seq_ms(b["end"]) - start == 300_000
            got[(start, json.dumps(g["key"], sort_keys=True))] = g["measures"]
    assert set(got) == set(want)
    for k, m in want.items():
        assert got[k]["events"] == {"count": len(m["events"])}
        assert got[k]["errors"] == {"count": sum(m["errors"])}
        lat = got[k]["latency"]
        assert lat["count"] == len(m["latency"])
        assert lat["sum"] == pytest.approx(sum(m["latency"]))
        assert lat["min"] == min(m["latency"]) and lat["max"] == max(m["latency"])
        assert sum(lat["histogram"].values()) == len(m["latency"])
        for v in m["latency"]:
            assert str(2 ** math.floor(math.log2(max(1.0, v)))) in lat["histogram"]
    # rollup include + measure subset + q
    body = {"rollup": "errs", "from": T0, "to": to, "interval": "1m", "q": "svc:api"}
    res = c.post(url("s", "_aggregate"), content=json.dumps(body), headers=JSON).json()
    want_n = sum(1 for d in values if d["err"] and d["svc"].lower() == "api" and d["ts"] < to)
    assert sum(g["measures"]["n"]["count"] for b in res["buckets"] for g in b["groups"]) == want_n


def seq_ms(text: str) -> int:
    from datetime import datetime

    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


@pytest.mark.parametrize(
    "body",
    [
        {"rollup": "nope", "from": 0, "to": 1, "interval": "1m"},
        {"rollup": "lat", "from": 0, "to": 1, "interval": "1h"},
        {"rollup": "lat", "from": 5, "to": 1, "interval": "1m"},
        {"rollup": "lat", "from": "yesterday", "to": 1, "interval": "1m"},
        {"rollup": "lat", "from": 0, "to": 10**12, "interval": "1m"},
        {"rollup": "lat", "from": 0, "to": 1, "interval": "1m", "group_by": ["msg"]},
        {"rollup": "lat", "from": 0, "to": 1, "interval": "1m", "measures": ["p"]},
        {"rollup": "lat", "from": 0, "to": 1, "interval": "1m", "q": "nope:1"},
        {"rollup": "lat", "from": 0, "to": 1, "interval": "1m", "x": 1},
        {"rollup": "lat", "to": 1, "interval": "1m"},
        [],
    ],
)
def test_aggregate_bad_requests_are_400(client: TestClient, body: Any) -> None:
    make_stream(client, "a", docs(3))
    r = client.post(url("a", "_aggregate"), content=json.dumps(body), headers=JSON)
    assert r.status_code == 400, (body, r.text)


# --------------------------------------------------------------------------- routing keys
def test_routing_keys_pages_are_sorted_distinct_and_complete(sealed: Any) -> None:
    c, values = sealed
    want = sorted({d["rk"] for d in values})
    got: list[str] = []
    after = None
    while True:
        params = {"limit": "7"} | ({"after": after} if after is not None else {})
        r = c.get(url("s", "_routing_keys"), params=params)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["coverage"]["complete"] is True
        assert body["keys"] == sorted(set(body["keys"])) and len(body["keys"]) <= 7
        got += body["keys"]
        after = body["next_after"]
        if after is None:
            break
    assert got == want
    assert c.get(url("s", "_routing_keys"), params={"limit": "501"}).status_code == 400
    assert c.get(url("s", "_routing_keys"), params={"limit": "0"}).status_code == 400


def test_routing_keys_need_a_routing_key_schema(client: TestClient) -> None:
    make_stream(client, "nork", docs(3), routing=False)
    r = client.get(url("nork", "_routing_keys"))
    assert r.status_code == 400 and "routingKey" in r.text


# --------------------------------------------------------------------------- index status
def test_details_and_index_status_etag_304_and_long_poll(sealed: Any) -> None:
    c, _ = sealed
    for sub in ("_details", "_index_status"):
        r = c.get(url("s", sub))
        assert r.status_code == 200, r.text
        tag = r.headers["etag"]
        status = r.json() if sub == "_index_status" else r.json()["index_status"]
        segs = status["segments"]["total_count"]
        assert segs > 0
        fams = {f["family"]: f for f in status["search_families"]}
        assert set(fams) == {"col", "fts", "agg"}
        assert all(
            f["lag_segments"] == segs and f["contiguous_covered_segment_count"] == 0
            for f in fams.values()
        )
        r2 = c.get(url("s", sub), headers={"If-None-Match": tag})
        assert r2.status_code == 304
        r3 = c.get(
            url("s", sub),
            params={"live": "true", "timeout_ms": "50"},
            headers={"If-None-Match": tag},
        )
        assert r3.status_code == 304
    r = c.get(url("s", "_details"))
    d = r.json()
    assert seq(d["stream"]["next_offset"]) == 120
    assert d["schema"]["search"] == SEARCH
    assert d["profile"] == {
        "apiVersion": "durable.streams/profile/v1",
        "profile": {"kind": "generic"},
    }
    tag = r.headers["etag"]
    c.post(url("s"), content=json.dumps(docs(1, seed=99)), headers=JSON)
    r = c.get(url("s", "_details"), params={"live": "long-poll"}, headers={"If-None-Match": tag})
    assert r.status_code == 200 and r.headers["etag"] != tag
    assert seq(r.json()["stream"]["next_offset"]) == 121
    assert c.get(url("s", "_details"), params={"live": "maybe"}).status_code == 400


def test_server_routes(client: TestClient) -> None:
    r = client.get("/v1/server/_details")
    assert r.status_code == 200
    body = r.json()
    assert set(body) == {"auto_tune", "configured_limits", "runtime"}
    assert body["runtime"]["memory"]["process"]["rss_bytes"] > 0
    r = client.get("/v1/server/_mem")
    assert r.status_code == 200
    mem = r.json()
    for key in (
        "ts",
        "process",
        "process_breakdown",
        "sqlite",
        "gc",
        "high_water",
        "counters",
        "runtime_counts",
        "runtime_bytes",
        "runtime_totals",
        "top_streams",
    ):
        assert key in mem


# --------------------------------------------------------------------------- auth and 404
ROUTES = [
    ("GET", "_search", {"q": "svc:x"}, None),
    ("POST", "_search", None, {"q": "svc:x"}),
    ("POST", "_aggregate", None, {"rollup": "lat", "from": 0, "to": 1, "interval": "1m"}),
    ("GET", "_routing_keys", None, None),
    ("GET", "_index_status", None, None),
    ("GET", "_details", None, None),
]


def test_auth_and_unknown_stream_on_every_route(make_client: MakeClient) -> None:
    c = make_client(api_keys_raw="full-key,reader:read,writer:write,t42::tenant42:")
    full = {"authorization": "Bearer full-key"}
    assert c.put(url("tenant42:s"), headers={**JSON, **full}).status_code == 201
    body = {
        "schema": SCHEMA,
        "search": SEARCH,
        "routingKey": {"jsonPointer": "/rk", "required": True},
    }
    c.post(url("tenant42:s", "_schema"), content=json.dumps(body), headers={**JSON, **full})
    assert c.put(url("other:s"), headers={**JSON, **full}).status_code == 201
    for method, sub, params, js in ROUTES:

        def call(
            name: str,
            h: dict[str, str],
            method: str = method,
            sub: str = sub,
            params: Any = params,
            js: Any = js,
        ) -> int:
            r = c.request(
                method,
                url(name, sub),
                params=params,
                content=json.dumps(js) if js is not None else None,
                headers={**JSON, **h},
            )
            return int(r.status_code)

        assert call("tenant42:s", {}) == 401, sub
        assert call("tenant42:s", {"authorization": "Bearer nope"}) == 401, sub
        assert call("tenant42:s", {"authorization": "Bearer writer"}) == 403, sub
        assert call("other:s", {"authorization": "Bearer t42"}) == 403, sub
        assert call("tenant42:s", {"authorization": "Bearer t42"}) == 200, sub
        assert call("tenant42:s", {"authorization": "Bearer reader"}) == 200, sub
        assert call("tenant42:missing", {"authorization": "Bearer reader"}) == 404, sub
    for path in ("/v1/server/_details", "/v1/server/_mem"):
        assert c.get(path).status_code == 401
        assert c.get(path, headers={"authorization": "Bearer writer"}).status_code == 403
        assert c.get(path, headers={"authorization": "Bearer reader"}).status_code == 200


def test_details_count_this_process_object_store_requests_per_stream(sealed: Any) -> None:
    """`object_store_requests`: node-local puts and reads per artifact, for this stream only,
    outside the ETag (they move with every read)."""
    c, _ = sealed
    r = c.get(url("s", "_details"))
    tag = r.headers["etag"]
    before = r.json()["object_store_requests"]
    assert before["scope"] == "node" and set(before["by_artifact"]) == {
        "segments",
        "indexes",
        "schema",
        "wal",
    }
    assert before["by_artifact"]["segments"]["puts"] >= 1  # this process sealed it
    assert before["puts"] == sum(a["puts"] for a in before["by_artifact"].values())
    # WHEN the sealed segments are scanned again with a cold block cache
    head = services(c).engine.heads.get(topic_of("s"))
    assert head is not None
    services(c).engine.cache.drop_topic(cache_key(head))  # the sealed blocks read so far
    other_name = f"other-{uuid.uuid4().hex[:8]}"  # counters are per process: a fresh name
    make_stream(c, other_name, docs(3))
    body = {"q": "svc:nobody", "size": 5}
    assert c.post(url("s", "_search"), content=json.dumps(body), headers=JSON).status_code == 200
    r = c.get(url("s", "_details"), headers={"If-None-Match": tag})
    assert r.status_code == 304  # counters alone do not change the descriptor
    after = c.get(url("s", "_details")).json()["object_store_requests"]
    # THEN its segment reads grew, and another stream's traffic is not in them
    assert after["by_artifact"]["segments"]["reads"] > before["by_artifact"]["segments"]["reads"]
    assert after["by_artifact"]["segments"]["puts"] == before["by_artifact"]["segments"]["puts"]
    other = c.get(url(other_name, "_details")).json()["object_store_requests"]
    assert other["by_artifact"]["segments"] == {"puts": 0, "reads": 0}
