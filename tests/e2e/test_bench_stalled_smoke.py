"""bench/bench_stalled.py end to end with tiny parameters: real server processes, a real
emulator, never-reading SSE clients and slowloris sockets; its result file holds what the
report relies on. Structural facts only (every stream took a slot and gave it back, the
stalled streams and slowloris sockets were closed by the server under small limits,
positive latencies); no latency assertions: the machine is shared and the numbers noisy."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from bench import bench_stalled

# one moto process for every benchmark smoke run, reset before each (conftest)
pytestmark = [
    pytest.mark.serial,
    pytest.mark.e2e,
    pytest.mark.timeout(300),
    pytest.mark.usefixtures("bench_emulator"),
]

STALLED = 10
LORIS = 10


def test_bench_stalled_tiny_run_closes_the_stalled_clients(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "stalled.json"
    # main sets the limits in os.environ for the server processes it starts: restored after
    monkeypatch.setenv("HEADWATER_SLOW_CONSUMER_TIMEOUT_MS", "30000")
    monkeypatch.setenv("HEADWATER_HEADER_TIMEOUT_MS", "10000")
    # GIVEN tiny parameters and small limits WHEN the whole benchmark runs
    returned = bench_stalled.main(
        [
            "--runs=1",
            "--idle-duration=1",
            "--duration=10",
            "--rate=200",
            f"--stalled={STALLED}",
            f"--loris={LORIS}",
            "--slow-consumer-ms=1000",
            "--header-timeout-ms=1000",
            f"--out={out}",
        ]
    )
    # THEN the result file is what main returned, with the three measurements
    result: dict[str, Any] = json.loads(out.read_text())
    assert result["benchmark"] == "stalled" and result == json.loads(json.dumps(returned))
    by = {w["workload"]["name"]: w for w in result["workloads"]}
    assert list(by) == ["idle", "writer", "stalled"]
    for name, w in by.items():
        assert w["errors"] == 0, name
        assert math.isfinite(w["p50_ms"]) and 0 < w["p50_ms"] <= w["p99_ms"], name
        assert 0 < w["phase"]["health_p50_ms"] <= w["phase"]["health_p99_ms"], name
        assert w["cpu_ms_per_op"]["server"] > 0, name
        assert w["aws_calls_per_op"]["DynamoDB.GetItem"]["calls"] >= 1.0, name  # the probe
    assert by["idle"]["phase"]["records_per_s_written"] == 0
    assert by["writer"]["phase"]["records_per_s_written"] > 0
    st = by["stalled"]["stalled"]
    # every stalled stream held a slot, and every slot came back
    assert st["slots_held"] == STALLED and st["slots_after"] == 0, st
    # the /v1 readers (a 1 MB history each) filled their buffers and were cut off by the
    # 1 s write deadline; the slowloris sockets by the 1 s header deadline
    assert st["streams_closed"] >= STALLED // 2, st
    assert st["loris_closed"] >= LORIS, st
    assert 0 < st["rss_mb"]["before"] <= st["rss_mb"]["peak"]
    verdict = result["verdict"]
    assert isinstance(verdict["met"], bool) and verdict["p99_ratio_stalled_to_idle"] > 0
