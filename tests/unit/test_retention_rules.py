"""Retention rules as pure functions: eviction reason runs, tombstone reasons, what is
tiered, effective TTL of the durability classes."""

from __future__ import annotations

import pytest

from headwater.engine.ports import Head
from headwater.engine.retention import (
    MAX_EVICTION_RUNS,
    eviction_reason,
    is_tiered,
    merge_runs,
    retention_ms,
    tombstone_reason,
)
from headwater.settings import Tiering

pytestmark = pytest.mark.unit


def test_runs_merge_neighbours_and_ignore_what_they_already_cover() -> None:
    runs = merge_runs((), [(4, "cap"), (9, "cap"), (12, "ttl")])
    assert runs == ((9, "cap"), (12, "ttl"))
    assert merge_runs(runs, [(12, "cap"), (11, "ttl")]) == runs
    assert merge_runs(runs, [(20, "ttl")]) == ((9, "cap"), (20, "ttl"))


def test_runs_stay_bounded_by_merging_the_oldest_into_mixed() -> None:
    runs: tuple[tuple[int, str], ...] = ()
    for i in range(1, 3 * MAX_EVICTION_RUNS):
        runs = merge_runs(runs, [(i * 10, "cap" if i % 2 else "ttl")])
    assert len(runs) == MAX_EVICTION_RUNS
    assert runs[0][1] == "mixed" and runs[-1] == ((3 * MAX_EVICTION_RUNS - 1) * 10, "cap")
    assert [u for u, _ in runs] == sorted(u for u, _ in runs)


@pytest.mark.parametrize(
    ("gap", "reasons"),
    [
        ((1, 9), {"cap"}),
        ((5, 9), {"cap"}),
        ((10, 10), {"ttl"}),
        ((9, 10), {"cap", "ttl"}),
        ((13, 20), set()),
    ],
)
def test_a_gap_gets_the_reasons_of_the_runs_it_overlaps(
    gap: tuple[int, int], reasons: set[str]
) -> None:
    assert eviction_reason(((9, "cap"), (12, "ttl")), *gap) == reasons


def test_tombstone_reason_is_mixed_for_several() -> None:
    assert tombstone_reason({"ttl"}) == "ttl"
    assert tombstone_reason({"ttl", "cap"}) == "mixed"
    assert tombstone_reason(set()) == "cap"


def test_durability_classes_and_queues_map_onto_the_tiering() -> None:
    t = Tiering(ephemeral_retention_ms=300, memory_retention_ms=9000)

    def head(**cfg: object) -> Head:
        return Head("t", 1, config={"type": "log", "durability": "disk", **cfg})

    assert is_tiered(head()) and is_tiered(head(durability="fsync"))
    assert not is_tiered(head(durability="memory")) and not is_tiered(head(durability="ephemeral"))
    assert not is_tiered(head(type="queue"))
    assert retention_ms(head().cfg, t) == 0
    assert retention_ms(head(ttl_ms=5000).cfg, t) == 5000
    assert retention_ms(head(durability="ephemeral").cfg, t) == 300
    assert retention_ms(head(durability="memory", ttl_ms=5000).cfg, t) == 5000
    assert retention_ms(head(durability="memory", ttl_ms=50_000).cfg, t) == 9000
