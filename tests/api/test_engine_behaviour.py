"""Engine behaviour against moto that the HTTP tests cannot observe directly: group commit
sharing one transaction, and record deletes that span more frames than one transaction."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import pytest
from api_helpers import counting_engine

from headwater.engine.append import Retry
from headwater.engine.records import NewRecord
from headwater.engine.values import AppendRequest, DiffRequest, TagMatch
from headwater.settings import Settings

pytestmark = pytest.mark.api


def _rec(i: int, tag: str | None = None) -> NewRecord:
    return NewRecord({"i": i}, tag=tag, size=24)


def test_concurrent_appends_in_one_process_share_transactions(
    moto: None, resource_prefix: str
) -> None:
    # GIVEN an engine and a topic that exists
    calls: Counter[str] = Counter()
    engine = counting_engine(Settings(resource_prefix=resource_prefix), calls)

    async def scenario() -> list[int]:
        await engine.append("gc", AppendRequest([_rec(-1)]))
        calls.clear()
        # WHEN 64 single-record appends arrive at once
        results = await asyncio.gather(
            *(engine.append("gc", AppendRequest([_rec(i)])) for i in range(64))
        )
        return [r.first_seq for r in results]

    seqs = asyncio.run(scenario())
    engine.close()
    # THEN every append got its own seq, in arrival order, and they shared commits
    assert seqs == list(range(2, 66))
    assert calls["TransactWriteItems"] < 64 // 4, calls


def test_tag_delete_spanning_more_frames_than_one_transaction(
    moto: None, resource_prefix: str
) -> None:
    # GIVEN 150 frames, each with one record tagged "drop" and one tagged "keep"
    calls: Counter[str] = Counter()
    engine = counting_engine(Settings(resource_prefix=resource_prefix), calls)

    async def scenario() -> tuple[int, list[dict[str, Any]], int, int]:
        for i in range(150):
            await engine.append(
                "big", AppendRequest([_rec(2 * i, "drop"), _rec(2 * i + 1, "keep")])
            )
        # WHEN every "drop" record is deleted (150 frames > 99 per transaction)
        result = await engine.delete_records("big", None, TagMatch("drop", prefix=False))
        diff = await engine.diff("big", DiffRequest(limit=1000, include_tags=True))
        head = await engine.get_topic("big", touch=False)
        return result.deleted, [json.loads(r) for r in diff.records], head.count, head.earliest_seq

    deleted, records, count, earliest = asyncio.run(scenario())
    engine.close()
    # THEN exactly those records are gone, counters agree, and the floor moved past seq 1
    assert deleted == 150
    assert [r["$tag"] for r in records] == ["keep"] * 150
    assert [r["$seq"] for r in records] == list(range(2, 301, 2))
    assert count == 150
    assert earliest == 2
    assert calls["TransactWriteItems"] >= 150 + 2  # appends + at least two delete chunks


class _Clock:
    """The append module's clock, moved on by hand: `step` seconds per commit attempt."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 1000.0, step

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _conflicting(
    engine: Any, lost_races: int | None, counted: list[int], clock: _Clock | None = None
) -> None:
    """Make the engine's next `lost_races` commit attempts (all, for None) lose a race:
    nothing written, the head read back as a real lost race would return it. Each attempt
    takes `clock.step` seconds of the append module's clock when one is given."""
    real = engine.appender.try_commit

    def attempt(topic: str, head: Any, *args: Any, **kwargs: Any) -> Any:
        counted.append(1)
        if clock is not None:
            clock.now += clock.step
        if lost_races is None or len(counted) <= lost_races:
            return Retry(engine.heads.get(topic), True)
        return real(topic, head, *args, **kwargs)

    engine.appender.try_commit = attempt


def test_an_append_past_its_budget_after_one_lost_race_still_commits(
    moto: None, resource_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a topic, and an append budget already spent (slow storage ate it)
    import headwater.engine.append as log_mod

    engine = counting_engine(Settings(resource_prefix=resource_prefix), Counter())
    asyncio.run(engine.append("slow", AppendRequest([_rec(0)])))
    monkeypatch.setattr(log_mod, "APPEND_BUDGET_S", 0.0)
    attempts: list[int] = []
    # WHEN its first attempt loses one race
    _conflicting(engine, 1, attempts)
    result = asyncio.run(engine.append("slow", AppendRequest([_rec(1)])))
    engine.close()
    # THEN it is retried and commits: one lost race is not contention
    assert (result.first_seq, len(attempts)) == (2, 2)


def test_an_append_that_keeps_losing_races_past_its_budget_is_refused_unwritten(
    moto: None, resource_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a topic whose every commit attempt loses a race, and a spent budget
    import headwater.engine.append as log_mod
    from headwater.errors import StorageUnavailable

    engine = counting_engine(Settings(resource_prefix=resource_prefix), Counter())
    asyncio.run(engine.append("busy", AppendRequest([_rec(0)])))
    monkeypatch.setattr(log_mod, "APPEND_BUDGET_S", 0.0)
    attempts: list[int] = []
    _conflicting(engine, None, attempts)
    # WHEN an append is made
    with pytest.raises(StorageUnavailable) as caught:
        asyncio.run(engine.append("busy", AppendRequest([_rec(1)])))
    head = engine.heads.get("busy")
    engine.close()
    # THEN it gives up after the minimum number of lost races, with Retry-After, and the
    # topic holds only the first record
    assert len(attempts) == log_mod.MIN_CONFLICTS_TO_GIVE_UP
    assert caught.value.headers == {"Retry-After": "1"}
    assert head is not None and head.head_seq == 1


def test_an_append_slowed_past_its_budget_that_loses_races_slowly_still_commits(
    moto: None, resource_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a topic whose storage is so slow that each commit attempt takes 4 s (botocore
    # backing off on throttles), and another writer that wins while each attempt waits
    import headwater.engine.append as log_mod

    engine = counting_engine(Settings(resource_prefix=resource_prefix), Counter())
    asyncio.run(engine.append("slowly", AppendRequest([_rec(0)])))
    clock = _Clock(step=4.0)
    monkeypatch.setattr(log_mod, "time", clock)
    attempts: list[int] = []
    # WHEN its first six attempts lose (past the 20 s budget after five, 24 s in all)
    _conflicting(engine, 6, attempts, clock)
    result = asyncio.run(engine.append("slowly", AppendRequest([_rec(1)])))
    engine.close()
    # THEN six races lost in 24 s are slowness, not contention: the seventh attempt commits
    assert clock.now - 1000.0 > log_mod.APPEND_BUDGET_S
    assert (result.first_seq, len(attempts)) == (2, 7)


def test_an_append_still_losing_races_at_its_limit_is_refused_unwritten(
    moto: None, resource_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a topic whose every commit attempt takes 4 s and loses a race
    import headwater.engine.append as log_mod
    from headwater.errors import StorageUnavailable

    engine = counting_engine(Settings(resource_prefix=resource_prefix), Counter())
    asyncio.run(engine.append("stuck", AppendRequest([_rec(0)])))
    clock = _Clock(step=4.0)
    monkeypatch.setattr(log_mod, "time", clock)
    attempts: list[int] = []
    _conflicting(engine, None, attempts, clock)
    # WHEN an append is made
    with pytest.raises(StorageUnavailable) as caught:
        asyncio.run(engine.append("stuck", AppendRequest([_rec(1)])))
    head = engine.heads.get("stuck")
    engine.close()
    # THEN it gives up at the first race lost past its hard limit (28 s: the seventh), with
    # Retry-After, before a Lambda's timeout, and the topic holds only the first record
    assert len(attempts) == int(log_mod.APPEND_LIMIT_S // 4) + 1 == 7
    assert caught.value.headers == {"Retry-After": "1"}
    assert head is not None and head.head_seq == 1
