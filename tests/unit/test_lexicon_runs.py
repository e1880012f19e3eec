"""Routing-key lexicon runs (index/runs.py): the run of some segments' key lists is their
sorted union with a per-key membership mask, decoded losslessly; it proves a key absent from
a member segment; it lists only while every member is present and unchanged; the catalogue
entry and object key are derived from the member segments; runs are planned over covered
segments after the last one, and runs whose segments retention removed are dropped."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.engine.ports import Head, SegmentItem
from headwater.engine.ports.catalogue import Catalogue
from headwater.index import runs
from headwater.index.runs import LexiconRun, LexiconRunError, RunMember, build_run

pytestmark = pytest.mark.unit

KEYS = st.text(alphabet="abcé/-_0", min_size=0, max_size=4)


def _seg(first: int, last: int, count: int | None = None, deleted: int = 0) -> SegmentItem:
    n = last - first + 1 if count is None else count
    key = f"segments/t/1/{first:020d}-{last:020d}-abcd1234"
    return SegmentItem(first, last, key, b"", n, 10 * n, 0, 0, 0, frozenset(), deleted, 0)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sets(KEYS, max_size=12), min_size=1, max_size=16), KEYS)
def test_a_run_is_the_union_of_its_members_keys_with_exact_membership(
    key_sets: list[set[str]], probe: str
) -> None:
    segs = [_seg(10 * i + 1, 10 * i + 10) for i in range(len(key_sets))]
    members = [
        (RunMember(s.first_seq, s.last_seq, s.count), sorted(k))
        for s, k in zip(segs, key_sets, strict=True)
    ]
    raw = build_run("gen", members)
    run = LexiconRun.from_bytes(raw)
    # the lexicon is the sorted union, and building again gives the same bytes
    assert run.keys == sorted(set().union(*key_sets))
    assert build_run("gen", members) == raw
    assert (run.first_seq, run.last_seq) == (segs[0].first_seq, segs[-1].last_seq)
    for s, keys in zip(segs, key_sets, strict=True):
        for k in keys:
            assert run.may_hold(s, k) is True
        assert run.may_hold(s, probe) is (probe in keys)
    # a segment that is not a member has no answer
    assert run.may_hold(_seg(10_000, 10_010), probe) is None
    assert run.may_hold(_seg(1, 11), probe) is None  # same first seq, other last seq


def test_a_run_lists_only_while_its_members_are_all_there_and_unchanged() -> None:
    segs = [_seg(1, 10), _seg(11, 20), _seg(21, 30)]
    run = LexiconRun.from_bytes(
        build_run("g", [(RunMember(s.first_seq, s.last_seq, s.count), ["a"]) for s in segs])
    )
    by_first = {s.first_seq: s for s in segs}
    assert run.listable(by_first)
    # an entry deleted since the run was built
    assert not run.listable({**by_first, 11: _seg(11, 20, deleted=1)})
    # the first member trimmed away by retention
    assert not run.listable({s.first_seq: s for s in segs[1:]})


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"[]",
        b'{"v":2}',
        b'{"v":1,"generation":"g","segments":[],"keys":[],"masks":[]}',
        b'{"v":1,"generation":"g","segments":[[1,2,2]],"keys":["b","a"],"masks":[1,1]}',
        b'{"v":1,"generation":"g","segments":[[1,2,2]],"keys":["a"],"masks":[]}',
    ],
)
def test_a_damaged_run_is_refused(raw: bytes) -> None:
    with pytest.raises(LexiconRunError):
        LexiconRun.from_bytes(raw)


class _Segments:
    def __init__(self, segs: list[SegmentItem]) -> None:
        self.segs = segs

    def after(self, head: Head, after_seq: int, limit: int) -> list[SegmentItem]:
        return [s for s in self.segs if s.last_seq > after_seq][:limit]


class _Catalogues:
    def __init__(self) -> None:
        self.published: list[Catalogue] = []

    def publish(self, topic: str, epoch: int, expected: Catalogue | None, new: Catalogue) -> bool:
        self.published.append(new)
        return True


def _head() -> Head:
    return Head(topic="t", epoch=1, head_seq=1000, sealed_through=1000)


def test_runs_are_planned_after_the_last_one_over_covered_segments_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(runs, "RUN_SEGMENTS", 2)
    segs = _Segments([_seg(10 * i + 1, 10 * i + 10) for i in range(7)])
    cat = Catalogue("g", covered_through=50, segments=5)
    groups = runs.plan_runs(_head(), cat, segs)
    assert [[s.first_seq for s in g] for g in groups] == [[1, 11], [21, 31]]  # 41 waits
    done = Catalogue("g", 50, 5, runs=(runs.span_of(groups[0]),))
    assert [[s.first_seq for s in g] for g in runs.plan_runs(_head(), done, segs)] == [[21, 31]]
    # the object sits next to the run's last segment, found from any member
    span = runs.span_of(groups[0])
    assert runs.key_of(span, groups[0][0]) == groups[0][1].key + ".rkr"


def test_publishing_drops_runs_whose_segments_retention_removed() -> None:
    segs = [_seg(10 * i + 1, 10 * i + 10) for i in range(6)]
    old = (runs.span_of(segs[0:2]), runs.span_of(segs[2:4]))
    cat = Catalogue("g", 60, 6, runs=old)
    catalogues = _Catalogues()
    # GIVEN retention removed the first three segments (the first run entirely)
    new = runs.publish_runs(
        _head(),
        cat,
        [runs.span_of(segs[4:6])],
        segments=_Segments(segs[3:]),
        catalogue=catalogues,
        now_ms=9,
    )
    # THEN the first run is dropped; the partly trimmed one stays listed (readers see it
    # is not listable) until its last segment goes
    assert new is not None and new.runs == (old[1], runs.span_of(segs[4:6]))
    assert catalogues.published == [new]
