"""bench/bench_tiering.py end to end with tiny parameters: real server processes and a real
emulator; the result file holds what the README tables rely on. Structural facts only (sealed
reads come from S3 segments, every record was read, calls and costs were counted); no
timing assertions: the machine is shared and the numbers are noisy."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from bench import bench_tiering

# one moto process for every benchmark smoke run, reset before each (conftest)
pytestmark = [
    pytest.mark.serial,
    pytest.mark.e2e,
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("bench_emulator"),
]

RECORDS = 2_000
LONG = 8_000


def test_bench_tiering_tiny_run_reads_sealed_history_and_prices_it(tmp_path: Path) -> None:
    out = tmp_path / "tiering.json"
    # GIVEN tiny parameters WHEN the benchmark runs (no 1 MB records: they are slow to load)
    returned = bench_tiering.main(
        [
            "--runs=1",
            f"--records={RECORDS}",
            f"--long-records={LONG}",
            "--b1-records=20",
            "--duration=0.5",
            "--only=diff-tail,seal,diff-sealed,seal-b1,long-log,append-b1,append-b100",
            f"--out={out}",
        ]
    )
    # THEN the result file is what main returned
    result: dict[str, Any] = json.loads(out.read_text())
    assert result["benchmark"] == "tiering" and result == json.loads(json.dumps(returned))
    by = {w["workload"]["name"]: w for w in result["workloads"]}
    assert list(by) == [
        "diff-tail",
        "seal",
        "diff-sealed",
        "seal-b1",
        "long-log",
        "append-b1",
        "append-b100",
    ]
    assert all(w["errors"] == 0 for w in by.values())

    # every record was read end to end, with positive latencies
    for name, total in (("diff-tail", RECORDS), ("diff-sealed", RECORDS), ("long-log", LONG)):
        w = by[name]
        assert w["per_run"][0]["records"] >= total, name
        assert math.isfinite(w["p50_ms"]) and 0 < w["p50_ms"] <= w["p99_ms"], name

    # the sealer wrote segments and sealed everything
    seal = by["seal"]
    assert seal["segments"] >= 1 and seal["aws_calls_per_op"]["S3.PutObject"]["calls"] == 1.0
    assert seal["topic_state"]["sealed_through"] == seal["topic_state"]["head_seq"] == RECORDS
    assert seal["cost_per_op"]["usd_total"] > 0

    # sealed reads are ranged S3 GETs, not DynamoDB frame queries: the Query left is the
    # head read's (its newest frame past the head item: docs/storage.md "One write per
    # append")
    sealed = by["diff-sealed"]["aws_calls_per_op"]
    assert sealed["S3.GetObject"]["calls"] > 0
    head_reads = sealed["DynamoDB.GetItem"]["calls"]
    assert sealed.get("DynamoDB.Query", {}).get("calls", 0.0) < head_reads + 1.0
    assert result["long_log_load"]["state"]["sealed_through"] == LONG
    assert by["long-log"]["target"]["minimum"] == 100_000

    # the cost table: ingest + one delivery + sealing at batch 1 and 100
    rows = {r["batch"]: r for r in result["delivery_cost"]["rows"]}
    assert set(rows) == {1, 100}
    for r in rows.values():
        c = r["usd_per_million"]
        assert c["append"] > 0 and c["deliver"] > 0 and c["seal"] > 0
        parts = c["append"] + c["deliver"] + c["seal"] + c["tail_storage"]
        assert c["storage_total"] == pytest.approx(parts)
        assert isinstance(r["met"], bool)
    assert rows[1]["seal_workload"] == "seal-b1" and rows[100]["seal_workload"] == "seal"
