"""bench/bench_dashboard.py end to end with tiny parameters (real emulator and server
processes on loopback): every workload runs; every configuration stream receives every
ingested item once, in order (the bench counts anything else as an error); every metrics
stream ends at the final total; the result file holds positive numbers. Structural facts
only; no timing comparisons: the machine is shared and the numbers are noisy."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from bench import bench_dashboard

# one moto process for every benchmark smoke run, reset before each (conftest)
pytestmark = [
    pytest.mark.serial,
    pytest.mark.e2e,
    pytest.mark.timeout(180),
    pytest.mark.usefixtures("bench_emulator"),
]

ITEMS = 3  # single-item ingests per latency run, --interval apart


def _positive(x: Any) -> bool:
    return isinstance(x, int | float) and math.isfinite(x) and x > 0


def test_bench_dashboard_tiny_run(tmp_path: Path) -> None:
    out = tmp_path / "dashboard.json"
    returned = bench_dashboard.main(
        [
            "--quick",
            "--runs=1",
            f"--items={ITEMS}",
            "--interval=0.3",
            "--clients=1,3",
            "--duration=0.8",
            f"--out={out}",
        ]
    )
    result: dict[str, Any] = json.loads(out.read_text())
    assert result["benchmark"] == "dashboard" and result == json.loads(json.dumps(returned))
    by_name = {s["workload"]["name"]: s for s in result["workloads"]}
    assert list(by_name) == [
        "update-latency-same-c1",
        "update-latency-same-c3",
        "update-latency-cross-c1",
        "update-latency-cross-c3",
        "metrics-tick-c10",
        "ingest-b100",
    ]
    for name, s in by_name.items():
        assert s["errors"] == 0, name
        assert _positive(s["ops_per_s"]) and _positive(s["records_per_s"]), name
        assert _positive(s["p50_ms"]) and _positive(s["p99_ms"]), name
        assert s["p50_ms"] <= s["p99_ms"], name

    # every stream got every item: ITEMS items x N streams
    for n in (1, 3):
        for where in ("same", "cross"):
            s = by_name[f"update-latency-{where}-c{n}"]
            assert s["per_run"][0]["ops"] == ITEMS
            assert s["delivery"][0]["deliveries"] == s["delivery"][0]["expected"] == ITEMS * n
            assert s["target"]["label"] == "p50 <= 1000 ms" and "met" in s["target"]
            # a single-item ingest is one DynamoDB transaction
            calls = s["aws_calls_per_op"]
            assert calls["DynamoDB.TransactWriteItems"]["calls"] >= 1
    # a metrics tick reads the head and the new records; a batch of 100 commits in DynamoDB
    assert sum(f["calls"] for f in by_name["metrics-tick-c10"]["aws_calls_per_op"].values()) > 0
    ingest = by_name["ingest-b100"]
    assert ingest["records_per_op"] == 100
    assert ingest["aws_calls_per_op"]["DynamoDB.TransactWriteItems"]["calls"] > 0
    assert _positive(result["idle_feed"]["total_per_s"])
