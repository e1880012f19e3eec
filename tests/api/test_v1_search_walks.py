"""Walks through `_search`: page after page, following next_search_after to its end, over a
stream with indexed sealed segments, sealed segments not indexed yet and a DynamoDB tail.
Every walk must return each match exactly once, in the sort's order, whatever the query,
the sort, the page size, and whether pages end at the search deadline (408 with a partial
body): the expected answer is computed here from the entries themselves."""

from __future__ import annotations

import collections
import functools
import json
import random
from collections.abc import Callable
from typing import Any

import pytest
from api_helpers import MakeClient
from starlette.testclient import TestClient
from test_v1_search import EAGER, JSON, docs, make_stream, seq, services, url

from headwater.durable import scan as scan_mod
from headwater.durable.state import state_of, topic_of
from headwater.index.build import index_stream
from headwater.settings import Settings
from headwater.storage.clients import AwsClients
from headwater.storage.index_catalogue import DynamoIndexCatalogue

pytestmark = pytest.mark.api

Doc = dict[str, Any]

# (q, the same predicate in Python)
QUERIES: list[tuple[str, Callable[[Doc], bool]]] = [
    ("svc:api", lambda d: d["svc"].lower() == "api"),
    ("err:true", lambda d: d["err"]),
    ("ms:>250", lambda d: d.get("ms", -1.0) > 250),  # rare: many pages find nothing
    ("has:ms", lambda d: "ms" in d),
    ("svc:a* -err:true", lambda d: d["svc"].lower().startswith("a") and not d["err"]),
    ("msg:timeout OR ms:<20", lambda d: "timeout" in d["msg"].split() or d.get("ms", 999) < 20),
]


def _ms_key(d: Doc) -> tuple[bool, float]:
    return ("ms" not in d, d.get("ms", 0.0))  # a missing value last, in both directions


# sort -> key of (seq, entry) in the sort's order (ties: offset, newest first)
SORTS: dict[str, Callable[[int, Doc], Any]] = {
    "offset:desc": lambda s, d: -s,
    "offset:asc": lambda s, d: s,
    "ms:asc": lambda s, d: (*_ms_key(d), -s),
    "ts:desc": lambda s, d: (-d["ts"], -s),
    "ts:asc": lambda s, d: (d["ts"], -s),
}


def _stream(c: TestClient, aws: AwsClients, settings: Settings, name: str) -> list[Doc]:
    """150 entries: 90 in indexed sealed segments, 30 sealed after the index was built, 30 in
    the DynamoDB tail."""
    values = docs(150, seed=23)
    make_stream(c, name, values[:30])
    svc = services(c)
    svc.upkeep.run(topic_of(name))
    for lo in (30, 60):
        r = c.post(url(name), content=json.dumps(values[lo : lo + 30]), headers=JSON)
        assert r.status_code == 204, r.text
        svc.upkeep.run(topic_of(name))
    head = svc.engine.heads.get(topic_of(name))
    assert head is not None and head.sealed_through == 90
    reg = c.portal.call(svc.streams.registry, name, state_of(head).registry_key)  # type: ignore[union-attr]
    cat = DynamoIndexCatalogue(aws.dynamodb, settings)
    built = index_stream(
        head, reg, segments=svc.upkeep.segments, blobs=svc.engine.blobs, catalogue=cat, now_ms=1
    )
    assert built.covered_through == 90
    r = c.post(url(name), content=json.dumps(values[90:120]), headers=JSON)
    assert r.status_code == 204
    svc.upkeep.run(topic_of(name))
    r = c.post(url(name), content=json.dumps(values[120:]), headers=JSON)
    assert r.status_code == 204
    head = svc.engine.heads.get(topic_of(name))
    assert head is not None and head.sealed_through == 120 and head.head_seq == 150
    return values


def _walk(c: TestClient, name: str, q: str, sort: str, size: int, timeout_ms: int) -> Any:
    """(every hit's seq in page order, the pages' statuses, the indexed segments the pages
    consulted)"""
    got: list[int] = []
    statuses: list[int] = []
    indexed = 0
    after = None
    while len(statuses) < 2000:
        body: dict[str, Any] = {"q": q, "size": size, "sort": [sort], "timeout_ms": timeout_ms}
        if after is not None:
            body["search_after"] = after
        r = c.post(url(name, "_search"), content=json.dumps(body), headers=JSON)
        assert r.status_code in (200, 408), r.text
        res = r.json()
        statuses.append(r.status_code)
        assert (res["total"]["relation"] == "eq") == (
            r.status_code == 200 and res["next_search_after"] is None
        )
        got += [seq(h["offset"]) for h in res["hits"]]
        indexed += res["coverage"]["indexed_segments"]
        after = res["next_search_after"]
        if after is None:
            return got, statuses, indexed
    raise AssertionError(
        f"the walk did not end: {q!r} {sort} size {size}: {len(got)} hits, "
        f"statuses {collections.Counter(statuses)}, last continuation {str(after)[:200]}"
    )


def test_walks_return_every_match_once_in_order(
    make_client: MakeClient, aws: AwsClients, settings: Settings
) -> None:
    c = make_client(tiering=EAGER)
    values = _stream(c, aws, settings, "walks")
    rnd = random.Random(42)
    indexed = 0
    for q, pred in QUERIES:
        sort = rnd.choice(list(SORTS))
        size = rnd.choice([1, 4, 7, 13, 60])
        key = functools.partial(lambda s, k: k(s, values[s - 1]), k=SORTS[sort])
        want = sorted((i + 1 for i, d in enumerate(values) if pred(d)), key=key)
        got, statuses, used = _walk(c, "walks", q, sort, size, 3000)
        assert set(statuses) == {200}
        assert got == want, (q, sort, size)
        indexed += used
    assert indexed > 0  # the families answered for the indexed segments


def test_walks_through_pages_cut_by_the_deadline_return_every_match_once(
    make_client: MakeClient, aws: AwsClients, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIVEN a deadline every page reaches after a few dozen entries (a clock that moves 1 ms
    each time it is read): a long walk is then mostly 408 partial pages, some without a hit.
    An offset-sorted walk still goes on to the end of the stream and returns every match once
    and in order (each page continues where the previous one's scan stopped)."""
    c = make_client(tiering=EAGER)
    values = _stream(c, aws, settings, "cut")
    ticks = iter(range(10**9))
    monkeypatch.setattr(scan_mod, "monotonic", lambda: next(ticks) / 1000)
    rnd = random.Random(7)
    timed_out = 0
    for q, pred in QUERIES:
        for sort in ("offset:desc", "offset:asc"):
            size = rnd.choice([1, 3, 8, 50])
            key = functools.partial(lambda s, k: k(s, values[s - 1]), k=SORTS[sort])
            want = sorted((i + 1 for i, d in enumerate(values) if pred(d)), key=key)
            got, statuses, _ = _walk(c, "cut", q, sort, size, rnd.choice([40, 70]))
            assert got == want, (q, sort, size, statuses)
            timed_out += statuses.count(408)
    assert timed_out > 20


def _tick_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The search deadline's clock moves 1 ms each time it is read: a page then reaches its
    deadline after a few dozen entries, whatever the machine's speed."""
    ticks = iter(range(10**9))
    monkeypatch.setattr(scan_mod, "monotonic", lambda: next(ticks) / 1000)


def test_ranked_walks_through_pages_cut_by_the_deadline_return_every_match_once(
    make_client: MakeClient, aws: AwsClients, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIVEN the same stream (indexed segments, sealed segments not indexed yet, a tail) and
    a deadline each page reaches long before it has ranked the 60 entries it must read: a
    walk sorted by a field (ms, the primary timestamp either way) or by score still returns
    every match once, in the sort's order. (It used to rank only what a 408 page reached and
    continue from that page's last hit, skipping better matches in the rest of the stream,
    or to end at a 408 page without a hit.)"""
    c = make_client(tiering=EAGER)
    values = _stream(c, aws, settings, "ranked")
    rnd = random.Random(11)
    cases = [
        (q, pred, sort, rnd.choice([1, 3, 8, 50]))
        for q, pred in QUERIES
        for sort in ("ms:asc", "ts:desc", "ts:asc", "_score:desc")
    ]
    # score order: the reference is a walk on the real clock the deadline does not cut
    by_score: dict[str, list[int]] = {}
    for q, pred, sort, size in cases:
        if sort not in SORTS:
            want, statuses, _ = _walk(c, "ranked", q, sort, size, 30_000)
            assert set(statuses) == {200}, statuses
            assert set(want) == {i + 1 for i, d in enumerate(values) if pred(d)}
            by_score[q] = want
    _tick_clock(monkeypatch)
    timed_out = indexed = 0
    for q, pred, sort, size in cases:
        if sort in SORTS:
            matching = {i + 1 for i, d in enumerate(values) if pred(d)}
            key = functools.partial(lambda s, k: k(s, values[s - 1]), k=SORTS[sort])
            want = sorted(matching, key=key)
        else:
            want = by_score[q]
        got, statuses, used = _walk(c, "ranked", q, sort, size, rnd.choice([40, 70]))
        assert got == want, (q, sort, size, statuses)
        timed_out += statuses.count(408)
        indexed += used
    assert timed_out > 50  # most pages were cut
    assert indexed > 0  # ...and the families answered for the indexed segments


def test_a_ranked_continuation_is_bound_to_its_query(
    make_client: MakeClient, aws: AwsClients, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ranked 408 page's continuation holds no hit (none of what it reached is known to be
    next in the walk) and is opaque: with another query, sort or size, or altered, it is a
    400, never a page of the wrong walk."""
    c = make_client(tiering=EAGER)
    _stream(c, aws, settings, "bound")
    _tick_clock(monkeypatch)
    body: dict[str, Any] = {"q": "has:ms", "size": 5, "sort": ["ms:asc"], "timeout_ms": 40}
    r = c.post(url("bound", "_search"), content=json.dumps(body), headers=JSON)
    assert r.status_code == 408, r.text
    res = r.json()
    assert res["hits"] == [] and res["coverage"]["complete"] is False
    assert res["total"]["relation"] == "gte"
    token = res["next_search_after"]
    assert isinstance(token, list) and len(token) == 1 and isinstance(token[0], str)
    for other in ({"q": "svc:api"}, {"size": 6}, {"sort": ["ms:desc"]}):
        bad = body | other | {"search_after": token}
        r = c.post(url("bound", "_search"), content=json.dumps(bad), headers=JSON)
        assert r.status_code == 400 and "another query" in r.text, other
    altered = token[0][:-6] + ("A" if token[0][-6] != "A" else "B") + token[0][-5:]
    r = c.post(
        url("bound", "_search"),
        content=json.dumps(body | {"search_after": [altered]}),
        headers=JSON,
    )
    assert r.status_code == 400
    # GET takes the same continuation as JSON
    r = c.get(
        url("bound", "_search"),
        params={
            "q": "has:ms",
            "size": "5",
            "sort": "ms:asc",
            "timeout_ms": "40",
            "search_after": json.dumps(token),
        },
    )
    assert r.status_code in (200, 408), r.text


def test_walks_with_timeout_ms_0_progress_to_the_end(
    make_client: MakeClient, aws: AwsClients, settings: Settings
) -> None:
    """`timeout_ms: 0` is a budget already spent when the page starts: each page still
    examines at least one entry (408 with what it found), so its continuation moves on and
    a walk ends with every match once, in order. (It used to examine nothing and give back
    the cursor it was sent: a client following it looped forever.)"""
    c = make_client(tiering=EAGER)
    values = _stream(c, aws, settings, "zero")
    q, pred = QUERIES[2]  # ms:>250, rare: a ranked walk of one pass
    statuses_seen: list[int] = []
    for sort in ("offset:desc", "offset:asc", "ms:asc"):
        key = functools.partial(lambda s, k: k(s, values[s - 1]), k=SORTS[sort])
        want = sorted((i + 1 for i, d in enumerate(values) if pred(d)), key=key)
        got, statuses, _ = _walk(c, "zero", q, sort, 50, 0)
        assert got == want, (sort, statuses)
        assert statuses.count(408) >= 30  # the unindexed 60 entries, a few per page
        statuses_seen += statuses
    assert statuses_seen[-1] == 200
