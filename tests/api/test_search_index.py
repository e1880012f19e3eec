"""_search served through the index families: for random queries over a stream sealed into
many segments and indexed, every page of every query equals what a forced scan (no catalogue)
answers, in both sort orders; segments the companions rule out are skipped unread and
reported as indexed; a stale plan, a missing or a corrupt companion falls back to scanning
with the same answer."""

from __future__ import annotations

import json
import random
import time
from typing import Any

import pytest
from api_helpers import MakeClient
from starlette.testclient import TestClient
from test_v1_search import EAGER, JSON, SERVICES, WORDS, docs, make_stream, services, url

from headwater.durable.state import state_of, topic_of
from headwater.engine.ports import SEGMENT_PREFIX
from headwater.engine.segment import companion_key
from headwater.index import reader, runs
from headwater.index.build import index_stream
from headwater.settings import Settings
from headwater.storage.clients import AwsClients
from headwater.storage.index_catalogue import DynamoIndexCatalogue

pytestmark = pytest.mark.api

N, PER_SEGMENT = 240, 30


def _indexed(c: TestClient, aws: AwsClients, settings: Settings, name: str) -> list[Any]:
    values = docs(N, seed=11)
    make_stream(c, name, values[:PER_SEGMENT])
    svc = services(c)
    svc.upkeep.run(topic_of(name))
    for i in range(PER_SEGMENT, N - 20, PER_SEGMENT):  # the last 20 stay in the tail
        r = c.post(url(name), content=json.dumps(values[i : i + PER_SEGMENT]), headers=JSON)
        assert r.status_code == 204, r.text
        svc.upkeep.run(topic_of(name))
    r = c.post(url(name), content=json.dumps(values[N - 20 :]), headers=JSON)
    assert r.status_code == 204
    head = svc.engine.heads.get(topic_of(name))
    state = state_of(head)
    reg = c.portal.call(svc.streams.registry, name, state.registry_key)  # type: ignore[union-attr]
    cat = DynamoIndexCatalogue(aws.dynamodb, settings)
    done = index_stream(
        head, reg, segments=svc.upkeep.segments, blobs=svc.engine.blobs, catalogue=cat, now_ms=1
    )
    assert done.built >= 6
    return svc.upkeep.segments.after(head, 0, 100)


def _query(rnd: random.Random) -> str:
    def clause() -> str:
        kind = rnd.randrange(9)
        if kind == 0:
            return f"svc:{rnd.choice(SERVICES).lower()}"
        if kind == 1:
            return f"svc:{rnd.choice(SERVICES).lower()[:1]}*"
        if kind == 2:
            return f"ms:{rnd.choice(['>', '>=', '<', '<='])}{rnd.randrange(300)}"
        if kind == 3:
            return f"err:{rnd.choice(['true', 'false'])}"
        if kind == 4:
            return "has:ms"
        if kind == 5:
            return rnd.choice(WORDS)
        if kind == 6:
            return f'msg:"{rnd.choice(WORDS)} {rnd.choice(WORDS)}"'
        if kind == 7:
            return f"msg:{rnd.choice(WORDS)}"
        return f"service:{rnd.choice(SERVICES).lower()}"  # an alias

    parts = [clause()]
    for _ in range(rnd.randrange(3)):
        op = rnd.choice([" ", " AND ", " OR ", " NOT ", " -"])
        parts.append(op + clause())
    text = "".join(parts)
    return f"({text})" if rnd.random() < 0.2 else text


def _all_pages(c: TestClient, name: str, q: str, sort: str | None) -> tuple[list[Any], list[Any]]:
    """Every hit of a query, paging with search_after, and each page's coverage."""
    hits: list[Any] = []
    coverages: list[Any] = []
    after = None
    while True:
        body: dict[str, Any] = {"q": q, "size": 40}
        if sort is not None:  # None: the default (text queries rank by score)
            body["sort"] = [sort]
        if after is not None:
            body["search_after"] = after
        r = c.post(url(name, "_search"), content=json.dumps(body), headers=JSON)
        assert r.status_code == 200, (q, r.text)
        got = r.json()
        hits.extend((h["offset"], h["score"], h["source"]) for h in got["hits"])
        coverages.append(got["coverage"])
        after = got["next_search_after"]
        if after is None:
            return hits, coverages


def test_indexed_search_answers_exactly_what_a_scan_answers(
    make_client: MakeClient, aws: AwsClients, settings: Settings
) -> None:
    c = make_client(tiering=EAGER)
    segs = _indexed(c, aws, settings, "six")
    head = services(c).engine.heads.get(topic_of("six"))
    cat = DynamoIndexCatalogue(aws.dynamodb, settings)
    saved = cat.get(head.topic, head.epoch)
    assert saved is not None and saved.covered_through == segs[-1].last_seq
    rnd = random.Random(5)
    queries = [_query(rnd) for _ in range(20)] + ["svc:db", "err:true AND ms:>250"]
    indexed: dict[tuple[str, str | None], list[Any]] = {}
    skipped_any = False
    used = 0
    for q in queries:
        for sort in ("offset:desc", "offset:asc", None, "ms:asc"):
            hits, covs = _all_pages(c, "six", q, sort)
            indexed[(q, sort)] = hits
            used += any(cv["indexed_segments"] > 0 for cv in covs)
            assert all(cv["complete"] for cv in covs)
            first = covs[0]
            if first["indexed_segments"] and first["scanned_segments"] == 0:
                skipped_any = True
    assert skipped_any
    # (a page served from the unsealed tail alone, or a clause no family narrows, scans)
    assert used >= 0.75 * len(indexed), (used, len(indexed))
    # WHEN the catalogue is gone (nothing indexed) THEN every query answers the same
    cat.delete(head.topic, head.epoch)
    for (q, sort), hits in indexed.items():
        scanned, covs = _all_pages(c, "six", q, sort)
        assert all(cv["indexed_segments"] == 0 for cv in covs)
        assert scanned == hits, q
    assert any(indexed.values())


def test_a_selective_query_skips_the_segments_its_companions_rule_out(
    make_client: MakeClient, aws: AwsClients, settings: Settings
) -> None:
    c = make_client(tiering=EAGER)
    segs = _indexed(c, aws, settings, "sel")
    # GIVEN a value that only one sealed segment holds
    r = c.post(
        url("sel"),
        content=json.dumps([{"ts": 1, "svc": "unique-svc", "msg": "needle", "rk": "k00"}]),
        headers=JSON,
    )
    assert r.status_code == 204
    services(c).upkeep.run(topic_of("sel"))
    head = services(c).engine.heads.get(topic_of("sel"))
    state = state_of(head)
    svc = services(c)
    reg = c.portal.call(svc.streams.registry, "sel", state.registry_key)  # type: ignore[union-attr]
    cat = DynamoIndexCatalogue(aws.dynamodb, settings)
    index_stream(
        head, reg, segments=svc.upkeep.segments, blobs=svc.engine.blobs, catalogue=cat, now_ms=2
    )
    all_segs = svc.upkeep.segments.after(head, 0, 100)
    assert len(all_segs) > len(segs)
    body = {"q": "svc:unique-svc", "size": 10}
    got = c.post(url("sel", "_search"), content=json.dumps(body), headers=JSON).json()
    # THEN it finds the one entry, read only from the one segment that holds it
    assert [h["source"]["msg"] for h in got["hits"]] == ["needle"]
    cov = got["coverage"]
    assert cov["indexed_segments"] == len(all_segs)
    assert cov["scanned_segments"] == 0
    assert "exact" in cov["index_families_used"]
    assert got["total"] == {"value": 1, "relation": "eq"}


def test_stale_missing_or_corrupt_companions_fall_back_to_scanning(
    make_client: MakeClient, aws: AwsClients, settings: Settings
) -> None:
    c = make_client(tiering=EAGER)
    segs = _indexed(c, aws, settings, "fb")
    reader._CACHE._lru.clear()
    q = {"q": "svc:db OR msg:timeout", "size": 500}
    want = c.post(url("fb", "_search"), content=json.dumps(q), headers=JSON).json()
    assert want["coverage"]["indexed_segments"] == len(segs)
    # WHEN one companion is missing and another corrupt
    aws.s3.delete_object(Bucket=settings.bucket_name, Key=companion_key(segs[0].key))
    aws.s3.put_object(Bucket=settings.bucket_name, Key=companion_key(segs[1].key), Body=b"junk")
    reader._CACHE._lru.clear()
    got = c.post(url("fb", "_search"), content=json.dumps(q), headers=JSON).json()
    # THEN those two are scanned and the answer is the same
    assert got["hits"] == want["hits"]
    assert got["coverage"]["indexed_segments"] == len(segs) - 2
    assert got["coverage"]["scanned_segments"] == 2
    # WHEN the search config changes (a new plan generation): nothing is used until rebuilt
    search = json.loads(json.dumps(c.get(url("fb", "_schema")).json()["search"]))
    search["fields"]["ms"]["exact"] = True
    r = c.post(url("fb", "_schema"), content=json.dumps({"search": search}), headers=JSON)
    assert r.status_code == 200, r.text
    stale = c.post(url("fb", "_search"), content=json.dumps(q), headers=JSON).json()
    assert stale["coverage"]["indexed_segments"] == 0
    assert stale["hits"] == want["hits"]


def _key_pages(c: TestClient, name: str, limit: int) -> tuple[list[str], list[Any]]:
    keys: list[str] = []
    covs: list[Any] = []
    after: str | None = None
    while True:
        params: dict[str, Any] = {"limit": limit}
        if after is not None:
            params["after"] = after
        r = c.get(url(name, "_routing_keys"), params=params)
        assert r.status_code == 200, r.text
        body = r.json()
        keys.extend(body["keys"])
        covs.append(body)
        after = body["next_after"]
        if after is None:
            return keys, covs


def test_routing_keys_come_from_the_companions_and_equal_a_scan(
    make_client: MakeClient, aws: AwsClients, settings: Settings
) -> None:
    c = make_client(tiering=EAGER)
    segs = _indexed(c, aws, settings, "rks")
    # WHEN routing keys are listed page by page with the index
    indexed, covs = _key_pages(c, "rks", 7)
    # THEN the sealed segments were answered from their companions, not read
    assert all(b["coverage"]["indexed_segments"] == len(segs) for b in covs)
    assert all(b["coverage"]["scanned_uploaded_segments"] == 0 for b in covs)
    assert {b["source"] for b in covs} == {"index"}
    assert indexed == sorted(set(indexed)) and len(indexed) > 7
    # ...and the pages equal a scan's (no catalogue)
    head = services(c).engine.heads.get(topic_of("rks"))
    DynamoIndexCatalogue(aws.dynamodb, settings).delete(head.topic, head.epoch)
    scanned, covs2 = _key_pages(c, "rks", 7)
    assert scanned == indexed
    assert all(b["coverage"]["indexed_segments"] == 0 for b in covs2)
    want = sorted({d["rk"] for d in docs(N, seed=11)})
    assert indexed == want


def _approx(body: Any) -> Any:
    """Bucket bodies with floats rounded (sums merged in another order differ in the last
    bits) and integral counts as ints."""
    if isinstance(body, dict):
        return {k: _approx(v) for k, v in body.items()}
    if isinstance(body, list):
        return [_approx(v) for v in body]
    if isinstance(body, float):
        return int(body) if body.is_integer() else round(body, 6)
    return body


def test_aggregates_use_the_companions_rollups_and_equal_a_scan(
    make_client: MakeClient, aws: AwsClients, settings: Settings
) -> None:
    from test_v1_search import T0

    c = make_client(tiering=EAGER)
    _indexed(c, aws, settings, "agg")
    minute = 60_000
    aligned_from = T0 - T0 % minute
    requests = [
        # aligned on the interval: every window is full, the segments are not read
        {"rollup": "lat", "from": aligned_from, "to": aligned_from + 60 * minute, "interval": "1m"},
        {
            "rollup": "lat",
            "from": aligned_from,
            "to": aligned_from + 60 * minute,
            "interval": "5m",
            "group_by": ["svc"],
            "measures": ["latency", "errors"],
        },
        # edges inside windows: those entries are read from the segments
        {
            "rollup": "lat",
            "from": T0 + 12_345,
            "to": T0 + 45 * minute + 999,
            "interval": "1m",
            "group_by": ["err"],
        },
        {
            "rollup": "errs",
            "from": aligned_from,
            "to": aligned_from + 90 * minute,
            "interval": "1m",
        },
    ]
    indexed = []
    for body in requests:
        r = c.post(url("agg", "_aggregate"), content=json.dumps(body), headers=JSON)
        assert r.status_code == 200, r.text
        got = r.json()
        assert got["coverage"]["used_rollups"] is True, got["coverage"]
        assert "agg" in got["coverage"]["index_families_used"]
        indexed.append(got)
    # the companions' groups are shared between requests: asking again answers the same
    # (nothing a request merged into its windows leaked into the next one's)
    for body, first in zip(requests, indexed, strict=True):
        again = c.post(url("agg", "_aggregate"), content=json.dumps(body), headers=JSON).json()
        assert again["buckets"] == first["buckets"], body
    assert indexed[0]["coverage"]["scanned_segments"] == 0  # aligned: nothing read
    assert indexed[2]["coverage"]["scanned_segments"] > 0  # unaligned: edges read
    # ...a q scans (a q is evaluated per entry)
    with_q = dict(requests[0], q="svc:db")
    r = c.post(url("agg", "_aggregate"), content=json.dumps(with_q), headers=JSON)
    assert r.json()["coverage"]["used_rollups"] is False
    # WHEN nothing is indexed THEN every aggregate is the same
    head = services(c).engine.heads.get(topic_of("agg"))
    DynamoIndexCatalogue(aws.dynamodb, settings).delete(head.topic, head.epoch)
    for body, want in zip(requests, indexed, strict=True):
        got = c.post(url("agg", "_aggregate"), content=json.dumps(body), headers=JSON).json()
        assert got["coverage"]["used_rollups"] is False
        assert _approx(got["buckets"]) == _approx(want["buckets"]), body
        assert got["buckets"], body


def _read_all(c: TestClient, name: str, **params: str) -> list[Any]:
    """Every entry a filter= / key= read returns, page by page from the start."""
    out: list[Any] = []
    offset = "-1"
    for _ in range(500):
        r = c.get(url(name), params={"offset": offset, **params})
        assert r.status_code == 200, (params, r.text)
        out.extend(r.json())
        offset = r.headers["Stream-Next-Offset"]
        if r.headers.get("Stream-Up-To-Date") == "true":
            return out
    raise AssertionError("the read never caught up")


def _filter(rnd: random.Random) -> str:
    def clause() -> str:
        kind = rnd.randrange(5)
        if kind == 0:
            return f"svc:{rnd.choice(SERVICES).lower()}"
        if kind == 1:
            return f"ms:{rnd.choice(['>', '>=', '<', '<='])}{rnd.randrange(300)}"
        if kind == 2:
            return f"err:{rnd.choice(['true', 'false'])}"
        if kind == 3:
            return "has:ms"
        return f"service:{rnd.choice(SERVICES).lower()}"

    parts = [clause()]
    for _ in range(rnd.randrange(3)):
        parts.append(rnd.choice([" ", " AND ", " OR ", " -"]) + clause())
    return "".join(parts)


def test_filter_and_key_reads_through_the_families_equal_a_scan(
    make_client: MakeClient, aws: AwsClients, settings: Settings
) -> None:
    writer = make_client(tiering=EAGER)
    _indexed(writer, aws, settings, "fk")
    values = docs(N, seed=11)
    values += values[N - 20 :]  # _indexed appends its last 20 again, into the tail
    c = make_client(frame_cache_bytes=1)  # every sealed block read is a ranged GET
    sealed = services(c).engine.sealed
    assert sealed is not None
    rnd = random.Random(8)
    reads: list[dict[str, str]] = [{"filter": _filter(rnd)} for _ in range(12)]
    reads += [{"key": f"k{rnd.randrange(40):02d}"} for _ in range(4)]
    reads += [{"key": f"k{rnd.randrange(40):02d}", "filter": _filter(rnd)} for _ in range(4)]
    reads += [{"key": "no-such-key"}, {"filter": "svc:no-such-service"}]
    indexed: list[list[Any]] = []
    gets_indexed = []
    for params in reads:
        before = sealed.range_gets
        indexed.append(_read_all(c, "fk", **params))
        gets_indexed.append(sealed.range_gets - before)
    # a key read returns exactly the key's entries, in order
    for params, got in zip(reads, indexed, strict=True):
        if set(params) == {"key"}:
            assert got == [v for v in values if v["rk"] == params["key"]], params
    # WHEN nothing is indexed (the catalogue is gone) THEN every read answers the same...
    head = services(c).engine.heads.get(topic_of("fk"))
    DynamoIndexCatalogue(aws.dynamodb, settings).delete(head.topic, head.epoch)
    gets_scanned = []
    for params, want in zip(reads, indexed, strict=True):
        before = sealed.range_gets
        assert _read_all(c, "fk", **params) == want, params
        gets_scanned.append(sealed.range_gets - before)
    # ...and the families spared reading the segments that could not match: never more
    # ranged GETs than the scan (one per segment with candidates), none when nothing can
    gaps = list(zip(gets_indexed, gets_scanned, strict=True))
    assert all(i <= s for i, s in gaps) and sum(gets_indexed) < sum(gets_scanned), gaps
    assert gets_indexed[-1] == gets_indexed[-2] == 0
    assert any(indexed[:12]) and all(indexed[12:16])


def test_deleting_a_stream_removes_its_segments_and_companions(
    make_client: MakeClient, aws: AwsClients, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runs, "RUN_SEGMENTS", 3)
    c = make_client(tiering=EAGER)
    segs = _indexed(c, aws, settings, "gone")
    head = services(c).engine.heads.get(topic_of("gone"))
    assert head is not None

    def objects() -> list[str]:
        listed = aws.s3.list_objects_v2(Bucket=settings.bucket_name, Prefix=SEGMENT_PREFIX)
        keys = [o["Key"] for o in listed.get("Contents", [])]
        return [k for k in keys if any(k.startswith(s.key) for s in segs)]

    # each segment and its companion, and a lexicon run per 3 segments
    assert len(objects()) == 2 * len(segs) + len(segs) // 3
    assert DynamoIndexCatalogue(aws.dynamodb, settings).get(head.topic, head.epoch) is not None
    # WHEN the stream is deleted THEN its sealed history goes, in the background
    assert c.delete(url("gone")).status_code == 204
    store = services(c).upkeep.segments

    def left() -> tuple[list[str], int]:  # objects go first, then the segment items
        return objects(), len(store.after(head, 0, 100))

    deadline = time.monotonic() + 10
    while left() != ([], 0) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left() == ([], 0)
    # ...with its index catalogue
    catalogue = DynamoIndexCatalogue(aws.dynamodb, settings)
    deadline = time.monotonic() + 10
    while catalogue.get(head.topic, head.epoch) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert catalogue.get(head.topic, head.epoch) is None
    # ...and a new stream of the same name starts clean
    make_stream(c, "gone", docs(5))
    got = c.post(url("gone", "_search"), content=json.dumps({"q": "has:ms"}), headers=JSON)
    assert got.status_code == 200 and got.json()["coverage"]["indexed_segments"] == 0


def test_routing_keys_and_key_reads_use_the_lexicon_runs(
    make_client: MakeClient, aws: AwsClients, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN 8 indexed segments compacted into lexicon runs of 3 (the last two are in none)
    monkeypatch.setattr(runs, "RUN_SEGMENTS", 3)
    c = make_client(tiering=EAGER)
    segs = _indexed(c, aws, settings, "lex")
    svc = services(c)
    head = svc.engine.heads.get(topic_of("lex"))
    cat = DynamoIndexCatalogue(aws.dynamodb, settings)
    saved = cat.get(head.topic, head.epoch)
    assert saved is not None and len(segs) == 8
    assert [(a, b) for a, b, _ in saved.runs] == [
        (segs[0].first_seq, segs[2].last_seq),
        (segs[3].first_seq, segs[5].last_seq),
    ]
    want = sorted({d["rk"] for d in docs(N, seed=11)})
    # WHEN routing keys are listed with cold caches
    reader._CACHE._lru.clear()
    reader._RUNS.clear()
    misses = reader._CACHE.misses
    keys, pages = _key_pages(c, "lex", 9)
    # THEN two runs and two companions answered every page; no segment was read
    assert keys == want
    assert all(p["timing"]["lexicon_runs_loaded"] == 4 for p in pages)
    assert all(p["coverage"]["scanned_uploaded_segments"] == 0 for p in pages)
    assert reader._CACHE.misses - misses == 2  # only the last two segments' companions
    # WHEN a key= read asks for a key no segment holds THEN the runs rule out their six
    # segments without opening their companions
    reader._CACHE._lru.clear()
    misses = reader._CACHE.misses
    assert _read_all(c, "lex", key="zz-none") == []
    assert reader._CACHE.misses - misses == 2
    # ...and a key that exists is read exactly
    values = docs(N, seed=11) + docs(N, seed=11)[N - 20 :]
    assert _read_all(c, "lex", key="k07") == [v for v in values if v["rk"] == "k07"]
    # WHEN an entry of the first run is deleted (its lexicon may now list a key too many)
    victim = segs[1].first_seq
    c.portal.call(svc.engine.delete_seqs, head.topic, [victim])  # type: ignore[union-attr]
    after_delete, pages = _key_pages(c, "lex", 9)
    # THEN that run is not used: its segments are answered per companion or scanned, and
    # the keys are those of the entries left
    assert all(p["timing"]["lexicon_runs_loaded"] < 4 + 3 for p in pages)
    assert all(p["coverage"]["scanned_uploaded_segments"] >= 1 for p in pages)
    left = [v for i, v in enumerate(values) if i + 1 != victim]
    assert after_delete == sorted({v["rk"] for v in left})
    # ...exactly what a scan answers
    cat.delete(head.topic, head.epoch)
    scanned, _ = _key_pages(c, "lex", 9)
    assert scanned == after_delete


def _cold_answers(c: TestClient, name: str, queries: list[str]) -> list[Any]:
    """From an empty companion cache: every page of each query in both sort orders, then a
    one-hour aggregate at 1-minute windows."""
    from test_v1_search import T0

    reader._CACHE._lru.clear()
    out: list[Any] = [_all_pages(c, name, q, s)[0] for q in queries for s in (None, "ms:asc")]
    minute = 60_000
    agg = {"rollup": "lat", "from": T0 - T0 % minute, "to": T0 + 60 * minute, "interval": "1m"}
    r = c.post(url(name, "_aggregate"), content=json.dumps(agg), headers=JSON)
    out.append(r.json()["buckets"])
    return out


def test_companions_read_in_parts_answer_as_whole_ones(
    make_client: MakeClient, aws: AwsClients, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = make_client(tiering=EAGER)
    _indexed(c, aws, settings, "parts")
    rnd = random.Random(21)
    queries = [_query(rnd) for _ in range(8)]

    def answers() -> list[Any]:
        out = _cold_answers(c, "parts", queries)  # (from an empty cache)
        return [*out, _key_pages(c, "parts", 9)[0], _read_all(c, "parts", key="k07")]

    whole = answers()
    # WHEN each companion is first read as its header and section table only (every section
    # a request uses then comes in its own ranged GET)
    monkeypatch.setattr(reader, "PREFIX_BYTES", 80 + 28 * 6 + 4)
    blobs = services(c).engine.blobs
    real = blobs.get_range
    sections: list[tuple[str, int]] = []

    def get_range(key: str, start: int, end: int) -> bytes:
        if key.endswith(".cix") and start > 0:
            sections.append((key, start))
        return real(key, start, end)

    monkeypatch.setattr(blobs, "get_range", get_range)
    parts = answers()
    # THEN every answer is the same, and the sections were read one by one
    assert parts == whole
    assert len(sections) > len(set(k for k, _ in sections)) > 0


def test_a_cold_query_fetches_companions_ahead_concurrently_with_the_same_answers(
    make_client: MakeClient, aws: AwsClients, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    c = make_client(tiering=EAGER)
    segs = _indexed(c, aws, settings, "ahead")
    rnd = random.Random(5)
    queries = [_query(rnd) for _ in range(6)]

    def answers() -> list[Any]:
        return [*_cold_answers(c, "ahead", queries), _read_all(c, "ahead", filter="svc:api")]

    # GIVEN companion reads that take a while (a cold process on S3)
    blobs = services(c).engine.blobs
    real = blobs.get_range
    lock = threading.Lock()
    now = {"n": 0, "max": 0, "reads": 0}

    def slow_get_range(key: str, start: int, end: int) -> bytes:
        if not key.endswith(".cix"):
            return real(key, start, end)
        with lock:
            now["n"] += 1
            now["reads"] += 1
            now["max"] = max(now["max"], now["n"])
        try:
            time.sleep(0.02)
            return real(key, start, end)
        finally:
            with lock:
                now["n"] -= 1

    monkeypatch.setattr(blobs, "get_range", slow_get_range)
    ahead = answers()
    # THEN companions were fetched several at a time, each once per cold query
    assert now["max"] > 1, now
    assert now["reads"] >= len(segs)
    # ...and with read-ahead off every answer is the same, one fetch at a time
    monkeypatch.setattr(reader.StreamIndex, "warm", lambda self, segs: None)
    now.update(n=0, max=0, reads=0)
    assert answers() == ahead
    assert now["max"] == 1


def test_search_coverage_reports_the_time_spent_on_the_families(
    make_client: MakeClient, aws: AwsClients, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = make_client(tiering=EAGER)
    _indexed(c, aws, settings, "timed")
    reader._CACHE._lru.clear()
    # GIVEN companion reads of 20 ms each, first read as header and section table only
    monkeypatch.setattr(reader, "PREFIX_BYTES", 80 + 28 * 6 + 4)
    blobs = services(c).engine.blobs
    real = blobs.get_range

    def slow(key: str, start: int, end: int) -> bytes:
        if key.endswith(".cix"):
            time.sleep(0.02)
        return real(key, start, end)

    monkeypatch.setattr(blobs, "get_range", slow)
    # WHEN a text query runs cold
    r = c.post(url("timed", "_search"), content=json.dumps({"q": "msg:alpha"}), headers=JSON)
    assert r.status_code == 200, r.text
    cov = r.json()["coverage"]
    # THEN the families' time is reported (not 0), in the body and the headers alike
    assert cov["indexed_segments"] >= 6
    assert cov["exact_candidate_time_ms"] >= 20 * cov["indexed_segments"] // 8
    assert cov["indexed_segment_time_ms"] >= cov["exact_candidate_time_ms"]
    assert cov["fts_section_get_ms"] >= 20
    assert r.headers["search-exact-candidate-time-ms"] == str(cov["exact_candidate_time_ms"])
    assert r.headers["search-fts-section-get-ms"] == str(cov["fts_section_get_ms"])
    # ...and a warm query spends less on them
    again = c.post(url("timed", "_search"), content=json.dumps({"q": "msg:alpha"}), headers=JSON)
    assert again.json()["coverage"]["fts_section_get_ms"] == 0
