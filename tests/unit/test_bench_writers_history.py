"""bench/bench_writers.py's pure parts: the history check (an acknowledged record missing,
moved, duplicated, a record nobody sent, a seq that contradicts real time: each is a
problem; holes and failed appends found committed are reported, not failed) and the billing
of refused conditional writes. The run itself: tests/e2e/test_bench_writers_smoke.py."""

from __future__ import annotations

from typing import Any

import pytest
from bench.bench_writers import _pad_pool, billed_calls, exit_code, record_data, verify_history

TAG = "t1"


def _rec(w: int, i: int) -> dict[str, str]:
    return record_data(TAG, w, i, _pad_pool(w))


def _op(w: int, i: int, seq: int, sent: int, answered: int, status: int = 200) -> list[int]:
    """[writer, i, status, seq, sent ns, answered ns, warm-up]"""
    return [w, i, status, seq, sent, answered, 0]


@pytest.mark.unit
def test_record_data_is_one_kilobyte_of_json_and_reproducible() -> None:
    import json

    for w, i in ((0, 0), (3, 7), (15, 123_456)):
        data = _rec(w, i)
        assert len(json.dumps(data, separators=(",", ":"))) == 1024
        assert data == record_data(TAG, w, i, _pad_pool(w)) and data["id"] == f"{TAG}.{w}.{i}"


@pytest.mark.unit
def test_a_faithful_history_is_ok_and_reports_holes_and_committed_failures() -> None:
    # GIVEN two writers, seq 3 a hole, and writer 1's failed record 2 committed at seq 5
    ops = [
        _op(0, 1, 1, 0, 10),
        _op(1, 1, 2, 5, 15),
        _op(0, 2, 4, 20, 30),
        _op(1, 2, -1, 20, 40, status=503),
    ]
    records = {1: _rec(0, 1), 2: _rec(1, 1), 4: _rec(0, 2), 5: _rec(1, 2)}
    # WHEN checked THEN ok, with the hole and the committed failure counted
    h = verify_history(records, {"head_seq": 5}, ops, TAG)
    assert h["ok"] and h["problems"] == []
    assert (h["acknowledged"], h["read_back"], h["holes"], h["hole_seqs"]) == (3, 4, 1, [3])
    assert h["failed_requests"] == 1 and h["failed_found_committed"] == 1


@pytest.mark.parametrize(
    ("records", "ops", "problem"),
    [
        # an acknowledged record missing
        ({1: _rec(0, 1)}, [_op(0, 1, 1, 0, 1), _op(0, 2, 2, 2, 3)], "is missing"),
        # a seq holding another writer's record
        ({1: _rec(1, 1)}, [_op(0, 1, 1, 0, 1)], "not writer 0 record 1"),
        # one record at two seqs
        ({1: _rec(0, 1), 2: _rec(0, 1)}, [_op(0, 1, 1, 0, 1)], "more than once"),
        # a record nobody sent
        ({1: _rec(0, 1), 2: {"id": "other.0.1"}}, [_op(0, 1, 1, 0, 1)], "nobody sent"),
        # seq 1 answered after seq 2 was acknowledged, though sent after that answer
        (
            {1: _rec(1, 1), 2: _rec(0, 1)},
            [_op(0, 1, 2, 0, 10), _op(1, 1, 1, 20, 30)],
            "acknowledged before they were sent",
        ),
    ],
)
@pytest.mark.unit
def test_a_broken_history_is_a_problem(
    records: dict[int, Any], ops: list[list[int]], problem: str
) -> None:
    head = max(records)
    h = verify_history(records, {"head_seq": head}, ops, TAG)
    assert not h["ok"]
    assert any(problem in p for p in h["problems"]), h["problems"]
    # and a results file with such a run fails the benchmark's exit status
    result = {"results": [{"5xx": 0, "4xx": 0, "no_answer": 0, "history_ok": h["ok"]}]}
    assert exit_code(result) == 1


@pytest.mark.unit
def test_refused_writes_are_billed_at_the_mean_of_accepted_ones() -> None:
    # GIVEN 10 PutItem calls, 2 refused, the 8 accepted billed 16 WRU; an UpdateItem all
    # accepted; a transaction refused with none accepted
    calls = {
        "calls": {
            "DynamoDB.PutItem": {"calls": 10.0, "errors": 2.0, "wru": 16.0},
            "DynamoDB.UpdateItem": {"calls": 5.0, "errors": 0.0, "wru": 5.0},
            "DynamoDB.TransactWriteItems": {"calls": 1.0, "errors": 1.0, "wru": 0.0},
            "DynamoDB.GetItem": {"calls": 3.0, "errors": 1.0, "wru": 0.0},
        }
    }
    out = billed_calls(calls)["calls"]
    # THEN each refused put bills 2 WRU, the refused transaction 2, reads nothing more
    assert out["DynamoDB.PutItem"]["wru"] == 20.0 and out["DynamoDB.PutItem"]["wru_refused"] == 4
    assert out["DynamoDB.UpdateItem"]["wru"] == 5.0
    assert out["DynamoDB.TransactWriteItems"]["wru"] == 2.0
    assert out["DynamoDB.GetItem"]["wru"] == 0.0
    assert calls["calls"]["DynamoDB.PutItem"]["wru"] == 16.0  # the input is not changed
