"""bench/bench_notify.py end to end with tiny parameters (real emulator and server processes
on loopback): every workload runs, every notification is delivered exactly once and in order
(the bench counts misses, duplicates and a polygon replay that disagrees with its brute-force
shapely count as errors), and the result file holds positive numbers. Structural facts only;
no timing comparisons: the machine is shared and the numbers are noisy."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from bench import bench_notify

# one moto process for every benchmark smoke run, reset before each (conftest)
pytestmark = [
    pytest.mark.serial,
    pytest.mark.e2e,
    pytest.mark.timeout(240),
    pytest.mark.usefixtures("bench_emulator"),
]


def _positive(x: Any) -> bool:
    return isinstance(x, int | float) and math.isfinite(x) and x > 0


APPEND_WRITES = ("PutItem", "TransactWriteItems")


def test_bench_notify_tiny_run(tmp_path: Path) -> None:
    out = tmp_path / "notify.json"
    returned = bench_notify.main(["--quick", "--records=1500", "--runs=1", f"--out={out}"])
    result: dict[str, Any] = json.loads(out.read_text())
    assert result["benchmark"] == "notify" and result == json.loads(json.dumps(returned))
    by_name = {s["workload"]["name"]: s for s in result["workloads"]}
    assert list(by_name) == ["notify-c16", "watch-latency", "replay", "replay-polygon"]
    for name, s in by_name.items():
        assert s["errors"] == 0, name
        assert _positive(s["ops_per_s"]) and _positive(s["p50_ms"]), name
        assert s["p50_ms"] <= s["p99_ms"], name
    # the notifications went through DynamoDB: one write per append (a frame PutItem, or a
    # transaction for the topic's first), or fewer when concurrent appends share one
    calls = by_name["notify-c16"]["aws_calls_per_op"]
    writes = sum(calls.get(f"DynamoDB.{api}", {}).get("calls", 0.0) for api in APPEND_WRITES)
    assert 0 < writes <= 1
    # a replay reads 1,500 stored notifications; the polygon replay delivers the subset the
    # brute-force count expects (a mismatch would have been an error above)
    replay, polygon = by_name["replay"], by_name["replay-polygon"]
    assert replay["per_run"][0]["records"] == polygon["per_run"][0]["records"] == 1500
    matches = result["replay"]["polygon_matches"]
    assert 0 < matches < 1500
    # sealed history is read from S3 segments
    assert "S3.GetObject" in replay["aws_calls_per_op"]
