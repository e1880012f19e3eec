"""bench/bench_app_path.py end to end with tiny parameters, in its own interpreter (it rebuilds
the /v1 routes with each handler, which a test worker's other tests must not see): a real
emulator, the real app in-process, both handler modes, a results file with the loop's CPU
per operation for each."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]


def test_bench_app_path_measures_both_handlers(tmp_path: Path) -> None:
    # GIVEN tiny parameters WHEN the benchmark runs
    out = tmp_path / "app-path.json"
    args = ["--rounds=4", "--warmup=1", "--reps=2", f"--out={out}"]
    done = subprocess.run(
        [sys.executable, "-m", "bench.bench_app_path", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # THEN each workload has both modes, every operation measured, and the saving is their
    # difference
    result = json.loads(out.read_text())
    assert result["benchmark"] == "app_path"
    assert set(result["workloads"]) == {"round trip", "append"}
    for wl, r in result["workloads"].items():
        for mode in ("lean", "fastapi"):
            m = r[mode]
            assert m["ops"] == 8, (wl, mode)
            assert m["loop_cpu_ms_per_op"] > 0 and 0 < m["p50_ms"] <= m["p95_ms"], (wl, mode)
        saved = r["fastapi"]["loop_cpu_ms_per_op"] - r["lean"]["loop_cpu_ms_per_op"]
        assert r["saved_loop_cpu_ms_per_op"] == pytest.approx(saved), wl
    assert "LeanRoute: loop CPU ms/op" in done.stdout
