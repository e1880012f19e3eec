"""bench/bench_live.py end to end with tiny parameters: every measurement runs against real
server processes and a real emulator, and its result file holds what the report relies on.
Structural facts only (every subscriber got every record, positive latencies, counted AWS
calls and costs); no timing assertions: the machine is shared and the numbers are noisy."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from bench import bench_live

# one moto process for every benchmark smoke run, reset before each (conftest)
pytestmark = [
    pytest.mark.serial,
    pytest.mark.e2e,
    pytest.mark.timeout(180),
    pytest.mark.usefixtures("bench_emulator"),
]

SUBSCRIBERS = 20
RECORDS = 5
RATE = 20  # appends/s in the latency runs, for DURATION s: RATE * DURATION records
DURATION = 0.5


def test_bench_live_tiny_run_delivers_everything_and_counts_calls(tmp_path: Path) -> None:
    out = tmp_path / "live.json"
    # GIVEN tiny parameters WHEN the whole benchmark runs
    returned = bench_live.main(
        [
            "--runs=1",
            f"--rate={RATE}",
            f"--duration={DURATION}",
            f"--subscribers={SUBSCRIBERS}",
            f"--fanout-records={RECORDS}",
            "--fanout-rate=10",
            "--idle-sessions=5",
            "--idle-seconds=1",
            "--grace=30",
            f"--out={out}",
        ]
    )
    # THEN the result file is what main returned, with all four measurements
    result: dict[str, Any] = json.loads(out.read_text())
    assert result["benchmark"] == "live" and result == json.loads(json.dumps(returned))
    by = {w["workload"]["name"]: w for w in result["workloads"]}
    assert list(by) == ["live-1proc", "live-2proc", "fanout", "idle-5"]
    assert result["settings"]["poll_interval_ms"] > 0

    for name, subs, records in (
        ("live-1proc", 1, int(RATE * DURATION)),
        ("live-2proc", 1, int(RATE * DURATION)),
        ("fanout", SUBSCRIBERS, RECORDS),
    ):
        w = by[name]
        d = w["delivery"]
        # every subscriber got every record exactly once, in order
        assert d["expected"] == subs * records, name
        assert d["delivered"] == d["expected"], (name, d)
        assert d["missing"] == d["duplicates"] == d["out_of_order"] == 0, (name, d)
        assert d["all_subscribers_got_every_record"] is True, name
        assert d["append_errors"] == d["stream_errors"] == 0 and w["errors"] == 0, name
        assert d["per_run"][0]["subscribers_complete"] == subs, name
        # latencies are positive finite numbers, p99 at least p50
        assert math.isfinite(w["p50_ms"]) and 0 < w["p50_ms"] <= w["p99_ms"], name
        assert d["append_p50_ms"] > 0, name
        # calls were counted in the servers: each single-record append is one write (a frame
        # PutItem; a transaction for a topic's first)
        calls = w["aws_calls_per_op"]
        writes = sum(
            calls.get(f"DynamoDB.{api}", {}).get("calls", 0.0)
            for api in ("PutItem", "TransactWriteItems")
        )
        assert writes >= 1.0, (name, calls)
        assert w["cost_per_op"]["usd_dynamodb"] > 0, name
        assert w["poll_interval_ms"] > 0 and isinstance(w["target"]["met"], bool), name

    # the watch on server B learned of appends on server A only by polling the heads table
    assert by["live-2proc"]["aws_calls_per_op"]["DynamoDB.BatchGetItem"]["calls"] > 0

    idle = by["idle-5"]
    assert idle["sessions"] == 5 and idle["errors"] == 0
    per_min = idle["aws_calls_per_idle_connection_minute"]
    # idle streams poll the heads (eventually consistent BatchGetItem) and nothing is written
    assert per_min["DynamoDB.BatchGetItem"]["calls"] > 0
    assert "DynamoDB.TransactWriteItems" not in per_min and "DynamoDB.PutItem" not in per_min
    hour = idle["usd_per_idle_connection_hour"]
    assert hour["usd_storage"] > 0
    assert hour["usd_total"] == pytest.approx(
        hour["usd_storage"] + hour["usd_lambda_stream_function"]
    )
    assert idle["usd_per_idle_connection_minute"]["usd_storage"] == pytest.approx(
        hour["usd_storage"] / 60
    )
    assert 0 < idle["p50_ms"] <= idle["p99_ms"]  # session open latency
