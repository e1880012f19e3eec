"""bench/bench_flags.py end to end with tiny parameters (real emulator and server processes
on loopback): every workload runs; every event connection receives every published version
once, in order, inline, with the hash chain intact (the bench counts anything else as an
error); the closure requests return tarballs; the result file holds positive numbers.
Structural facts only; no timing comparisons: the machine is shared and the numbers are
noisy."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from bench import bench_flags

# one moto process for every benchmark smoke run, reset before each (conftest)
pytestmark = [
    pytest.mark.serial,
    pytest.mark.e2e,
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("bench_emulator"),
]


def _positive(x: Any) -> bool:
    return isinstance(x, int | float) and math.isfinite(x) and x > 0


def test_bench_flags_tiny_run(tmp_path: Path) -> None:
    out = tmp_path / "flags.json"
    returned = bench_flags.main(
        [
            "--quick",
            "--runs=1",
            "--connections=6",
            "--versions=4",
            "--interval=0.05",
            "--flags=120",
            "--builds=2",
            f"--out={out}",
        ]
    )
    result: dict[str, Any] = json.loads(out.read_text())
    assert result["benchmark"] == "flags" and result == json.loads(json.dumps(returned))
    by_name = {s["workload"]["name"]: s for s in result["workloads"]}
    assert list(by_name) == [
        "delta-latency-c6",
        "closure-cold-all",
        "closure-cold-narrow",
        "closure-warm-all",
        "closure-build-inproc",
    ]
    for name, s in by_name.items():
        assert s["errors"] == 0, name
        assert _positive(s["ops_per_s"]) and _positive(s["records_per_s"]), name
        assert _positive(s["p50_ms"]) and _positive(s["p99_ms"]), name
        assert s["p50_ms"] <= s["p99_ms"], name

    # every connection got every version: 6 connections x 4 publishes
    latency = by_name["delta-latency-c6"]
    assert latency["per_run"][0]["ops"] == 4
    assert latency["per_run"][0]["records"] == 24
    assert latency["delivery"][0]["deliveries"] == latency["delivery"][0]["expected"] == 24
    assert latency["target"]["label"] == "p50 <= 50 ms" and "met" in latency["target"]
    # a publish commits in DynamoDB and writes the changed file and the files index to S3
    calls = latency["aws_calls_per_op"]
    assert sum(f["calls"] for f in calls.values()) > 0
    assert calls["DynamoDB.TransactWriteItems"]["calls"] > 0
    assert calls["S3.PutObject"]["calls"] > 0

    # a cold `*` closure reads the tree tarball the publish stored (no file-by-file reads,
    # nothing to write); a cold narrow one takes its files from that tarball too and stores
    # the tarball it built; the memoized one makes no S3 call
    info = result["closure"]
    assert info["files_all"] == 120 + 50 + 1
    assert 0 < info["files_narrow"] < info["files_all"]
    cold = by_name["closure-cold-all"]["aws_calls_per_op"]
    assert 1 <= cold["S3.GetObject"]["calls"] <= 3
    assert "S3.PutObject" not in cold
    narrow = by_name["closure-cold-narrow"]["aws_calls_per_op"]
    assert 1 <= narrow["S3.GetObject"]["calls"] < info["files_narrow"]
    assert narrow["S3.PutObject"]["calls"] == 1
    assert not any(k.startswith("S3.") for k in by_name["closure-warm-all"]["aws_calls_per_op"])
    for key in (
        "tar_gz_bytes_all",
        "tar_gz_bytes_narrow",
        "inproc_tar_gz_bytes",
        "inproc_tar_bytes",
    ):
        assert _positive(info[key]), key
    assert info["tar_gz_bytes_narrow"] < info["tar_gz_bytes_all"]
    assert all(_positive(v) for v in info["inproc_phase_p50_ms"].values())
