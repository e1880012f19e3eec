"""Every in-process cache holds what its byte budget says, by what tracemalloc measures, not
by a guess (issue 42: a frame cache that counted a third of what its frames held let a long
run's RSS climb for an hour), and never holds more than its budget."""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest

from headwater.engine.cache import FrameCache
from headwater.engine.core import HeadCache
from headwater.engine.heads import KnownHeads
from headwater.engine.ports import Head
from headwater.engine.records import Frame, StoredRecord, encoded_size

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000


def _frame(first: int, n: int, size: int, tag: str | None) -> Frame:
    recs = []
    for i in range(n):
        data = json.dumps({"i": first + i, "pad": "x" * size}).encode()
        tag_json = json.dumps(tag).encode() if tag else None
        recs.append(
            StoredRecord(
                first + i, T0 + first + i, data, None, tag_json, None,
                encoded_size(data, None, tag, None),
            )
        )  # fmt: skip
    return Frame(first, first + n - 1, T0 + first, recs, payload_bytes=sum(r.size for r in recs))


def _measured(build: Callable[[], Any], fill: Callable[[Any], None]) -> tuple[Any, int]:
    """(the filled object, the bytes tracemalloc saw allocated while building and filling)"""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        obj = build()
        fill(obj)
        return obj, tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    ("records", "size", "tag"),
    [(1, 1000, None), (1, 10, None), (10, 100, "t"), (100, 1000, None)],
    ids=["one-1KB", "one-tiny", "ten-tagged", "hundred-1KB"],
)
def test_the_frame_cache_accounts_what_its_frames_hold(
    records: int, size: int, tag: str | None
) -> None:
    # GIVEN frames built and cached while tracemalloc watches (the cache is their only owner)
    def fill(cache: FrameCache) -> None:
        for k in range(1500):
            cache.put("t#1", _frame(1 + k * records, records, size, tag), 0)

    cache, measured = _measured(lambda: FrameCache(1 << 40), fill)
    # THEN what the cache accounts is what was allocated, within 10%
    assert 0.9 <= cache.bytes / measured <= 1.1, (cache.bytes, measured)


@pytest.mark.parametrize("size", [20, 1000, 20_000])
def test_appended_records_the_cache_keeps_hold_what_it_counts(size: int) -> None:
    """The frames an append caches are built from the request's parse (jsoncodec), not
    decoded from storage: orjson's unshrunk output buffers made a 1 KB record hold ~8 KB
    there (issue 42's soak: RSS grew ~8x what the frame cache counted)."""
    from headwater.engine.records import stored
    from headwater.settings import Limits
    from headwater.v0.parse import parse_append

    def fill(cache: FrameCache) -> None:
        for k in range(300):
            body = {"records": [{"data": {"i": k, "pad": "x" * size}}]}
            rec = parse_append(body, Limits(), None, "t").records[0]
            one = stored(rec, k + 1, T0 + k)
            frame = Frame(k + 1, k + 1, T0 + k, [one], payload_bytes=one.size)
            cache.put("t#1", frame, 0)

    cache, measured = _measured(lambda: FrameCache(1 << 40), fill)
    assert 0.75 <= cache.bytes / measured <= 1.25, (cache.bytes, measured)


def test_the_frame_cache_never_holds_more_than_its_budget() -> None:
    budget = 2 << 20
    cache = FrameCache(budget)
    for k in range(5000):
        cache.put(f"t{k % 7}#1", _frame(1 + k, 1, 1000, None), 0)
        assert cache.bytes <= budget
    assert cache.bytes > budget * 0.9  # ...and uses it
    # the newest frames stayed, the oldest went
    assert cache.frame("t6#1", 4998, 0) is not None
    assert cache.frame("t0#1", 1, 0) is None


def _head(topic: str, ext_bytes: int) -> Head:
    return Head(topic, 1, head_seq=5, config={"ttl_ms": 1000}, ext="x" * ext_bytes)


@pytest.mark.parametrize("ext_bytes", [0, 2000], ids=["plain", "stream-state"])
def test_the_head_caches_account_what_their_heads_hold(ext_bytes: int) -> None:
    def fill_cache(cache: HeadCache) -> None:
        for k in range(2000):
            cache[f"topic-{k:05d}"] = _head(f"topic-{k:05d}", ext_bytes)

    def fill_known(known: KnownHeads) -> None:
        for k in range(2000):
            known.note(_head(f"topic-{k:05d}", ext_bytes))

    cache, measured = _measured(lambda: HeadCache(10.0, 1 << 40), fill_cache)
    assert 0.8 <= cache.bytes / measured <= 1.25, (cache.bytes, measured)
    known, measured = _measured(lambda: KnownHeads(1 << 40), fill_known)
    assert 0.8 <= known.bytes / measured <= 1.25, (known.bytes, measured)


def test_the_head_caches_never_hold_more_than_their_budget() -> None:
    budget = 256 << 10
    cache, known = HeadCache(10.0, budget), KnownHeads(budget)
    for k in range(3000):
        head = _head(f"topic-{k:05d}", 500)
        cache[head.topic] = head
        known.note(head)
        assert cache.bytes <= budget and known.bytes <= budget
    assert cache.bytes > budget * 0.8 and known.bytes > budget * 0.8
    # the newest stay, the oldest went (a lookup that misses reads storage again)
    assert cache.get("topic-02999") is not None and cache.get("topic-00000") is None
    assert known.fresh("topic-02999", 10) is not None and known.fresh("topic-00000", 10) is None
