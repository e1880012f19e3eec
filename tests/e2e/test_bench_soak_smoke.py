"""bench/bench_soak.py end to end with tiny parameters (a 30 s soak, 20 idle and 6 stalled SSE
connections): every phase runs and the result holds its figures. Structural facts only: the
targets are for the 30-minute run, not for this one."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from bench import bench_soak

pytestmark = [
    pytest.mark.serial,
    pytest.mark.e2e,
    pytest.mark.timeout(240),
    pytest.mark.usefixtures("bench_emulator"),
]


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and math.isfinite(x)


def test_bench_soak_tiny_run(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    returned = bench_soak.main(
        [
            "--minutes=0.5",
            "--idle-sse=20",
            "--stalled=6",
            "--stalled-s=3",
            "--sample-s=2",
            f"--out={out}",
        ]
    )
    result: dict[str, Any] = json.loads(out.read_text())
    assert result["benchmark"] == "soak" and result == json.loads(json.dumps(returned))
    # the idle connections were all taken and measured
    assert result["idle"]["connections"] == 20
    assert _finite(result["idle"]["kb_per_connection"])
    # the load ran: appends of each kind, latency, and no request failed
    (minute,) = result["per_minute"]
    assert minute["appends"] > 0 and minute["ds_appends"] > 0
    assert minute["diff_pages"] > 0 and minute["sse_events"] > 0 and minute["ds_polls"] > 0
    assert minute["errors"] == 0 and result["client_failures"] == []
    assert 0 < minute["append_p50_ms"] <= minute["append_p99_ms"]
    # samples hold RSS, CPU and every memory pool's gauge with its budget
    sample = result["samples"][-1]
    assert sample["rss_kb"]["server"] > 0 and sample["cpu_s"]["server"] > 0
    gauges = sample["gauges"]
    for pool in ("frame_cache", "head_cache", "known_heads", "stream_buffers"):
        assert gauges[f"headwater_memory_{pool}_bytes"] >= 0, pool
        assert (
            gauges[f"headwater_memory_{pool}_bytes"]
            <= gauges[f"headwater_memory_{pool}_budget_bytes"]
            or pool == "stream_buffers"
        ), (pool, gauges)
    assert gauges["headwater_memory_frame_cache_bytes"] > 0
    # the stalled phase ran, and the verdicts and costs are there
    assert result["stalled"]["connections"] == 6
    assert _finite(result["stalled"]["kb_per_connection"])
    assert set(result["verdict"]) >= {"rss_growth_met", "idle_met", "stalled_met", "p99_met"}
    assert result["aws_calls_per_append"] and result["cost_per_append"]["usd_total"] > 0
