"""The fault-run history checker (tests/faults/history.py) finds each kind of violation it
exists for, and passes a clean history."""

from __future__ import annotations

import pytest

from tests.faults.history import (
    AppendOp,
    check_acks,
    check_appends,
    check_producer_streams,
    check_reads,
    tally,
)

pytestmark = pytest.mark.unit


def _ok(client: str, ids: list[str], first: int, **kw: object) -> AppendOp:
    return AppendOp(
        client, ids, outcome="ok", first_seq=first, last_seq=first + len(ids) - 1, attempts=1, **kw
    )  # type: ignore[arg-type]


LOG = [(1, "a1"), (2, "a2"), (3, "b1")]


def test_a_clean_history_passes() -> None:
    ops = [_ok("a", ["a1", "a2"], 1), _ok("b", ["b1"], 3), AppendOp("c", ["c1"], outcome="failed")]
    assert check_appends(ops, LOG) == []


def test_a_duplicated_batch_is_found() -> None:
    ops = [_ok("a", ["a1", "a2"], 3)]
    problems = check_appends(ops, [(1, "a1"), (2, "a2"), (3, "a1"), (4, "a2")])
    assert any("more than once" in p for p in problems)


def test_a_lost_acknowledged_record_is_found() -> None:
    problems = check_appends([_ok("a", ["a1", "a2"], 1)], [(1, "a1")])
    assert any("acknowledged 1..2" in p for p in problems)


def test_a_false_failure_is_found() -> None:
    problems = check_appends([AppendOp("a", ["a1"], outcome="failed", statuses=[503])], [(1, "a1")])
    assert any("told the append failed" in p for p in problems)


def test_an_unknown_outcome_may_go_either_way_but_not_half() -> None:
    whole = AppendOp("a", ["a1", "a2"], outcome="unknown")
    assert check_appends([whole], [(1, "a1"), (2, "a2")]) == []
    assert check_appends([whole], []) == []
    assert check_appends([whole], [(1, "a1")]) != []


def test_deduped_on_a_first_attempt_is_a_lie() -> None:
    op = _ok("a", ["a1"], 1, deduped=True, key="k")
    assert any("deduped" in p for p in check_appends([op], [(1, "a1")]))
    op.attempts = 2
    assert check_appends([op], [(1, "a1")]) == []


def test_phantom_records_are_found() -> None:
    assert any("nobody sent" in p for p in check_appends([], [(1, "zz")]))


def test_reads_must_follow_the_log_without_gaps() -> None:
    assert check_reads({"r": LOG[:2]}, LOG) == []
    assert check_reads({"r": [(1, "a1"), (3, "b1")]}, LOG) != []
    assert check_reads({"r": [(2, "a2"), (1, "a1")]}, LOG) != []


def test_producer_streams_need_each_seq_once_in_order() -> None:
    assert check_producer_streams({"p": 3}, [("p", 0), ("p", 1), ("p", 2)]) == []
    assert check_producer_streams({"p": 3}, [("p", 0), ("p", 1), ("p", 1), ("p", 2)]) != []
    assert check_producer_streams({"p": 3}, [("p", 0), ("p", 2)]) != []
    assert check_producer_streams({"p": 1}, [("p", 0), ("q", 0)]) != []


def test_every_job_is_acked_exactly_once() -> None:
    assert check_acks([1, 2], [2, 1]) == []
    assert check_acks([1, 2], [1]) != []
    assert check_acks([1, 2], [1, 2, 2]) != []


def test_tally_counts_what_went_wrong() -> None:
    ops = [
        _ok("a", ["a1"], 1),
        _ok("b", ["b1"], 2, deduped=True),
        AppendOp("c", ["c1"], outcome="failed"),
        _ok("d", ["d1"], 9),
    ]
    counts = tally(ops, [(1, "a1"), (2, "b1"), (3, "a1"), (4, "c1")])
    assert counts == {"lost": 1, "duplicated": 1, "false_failures": 1, "dedup_lies": 1}
