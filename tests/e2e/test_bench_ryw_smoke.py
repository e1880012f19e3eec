"""bench/bench_ryw.py end to end, --quick (N = 1 and 2 writers, each with its own writer and
reader server, 4 s each) against DynamoDB Local: every append was read back at once from
another server process (read-your-writes), and the result file holds positive latencies
and the readers' calls. Structural facts only; no timing comparisons."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from bench import bench_ryw

from headwater.dev.ddblocal import find_jar, find_java

pytestmark = [pytest.mark.serial, pytest.mark.e2e, pytest.mark.timeout(120)]


def _positive(x: Any) -> bool:
    return isinstance(x, int | float) and math.isfinite(x) and x > 0


def test_bench_ryw_quick_run_on_dynamodb_local(tmp_path: Path) -> None:
    find_java()
    find_jar()
    out = tmp_path / "ryw.json"
    returned = bench_ryw.main(["--quick", f"--out={out}"])
    result: dict[str, Any] = json.loads(out.read_text())
    assert result["benchmark"] == "ryw" and result == json.loads(json.dumps(returned))
    assert [r["writers"] for r in result["results"]] == [1, 2]
    for row in result["results"]:
        # every acknowledged append was in the very next read, on another process
        assert row["appends"] > 0 and row["failed"] == 0, row
        assert row["ryw_violations"] == 0, row["violation_samples"]
        assert 0 < row["read_p50_ms"] <= row["read_p99_ms"] <= row["read_max_ms"]
        assert _positive(row["appends_per_s"]) and _positive(row["append_p50_ms"])
        # a read is a strong head read and its frames by key
        calls = row["reader_calls_per_read"]
        assert calls.get("GetItem", 0) >= 1 and calls.get("BatchGetItem", 0) >= 1, calls
