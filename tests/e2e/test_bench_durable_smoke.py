"""bench/bench_durable.py end to end with tiny parameters against Headwater, both modes of
the @durable-streams/server reference server and the Python HTTP floor (bench/ds_bare_server.py;
real processes on loopback): every workload runs on every target and the result file holds
positive numbers for each. Structural facts
only; no timing comparisons: the machine is shared and the numbers are noisy."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
from bench import bench_durable

# one moto process for every benchmark smoke run, reset before each (conftest)
pytestmark = [
    pytest.mark.serial,
    pytest.mark.e2e,
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("bench_emulator"),
]

REPO = Path(__file__).resolve().parents[2]
TARGETS = ["ref-file", "ref-mem", "py-floor", "headwater"]


def _positive(x: Any) -> bool:
    return isinstance(x, int | float) and math.isfinite(x) and x > 0


def test_bench_durable_tiny_run_against_the_reference_servers(tmp_path: Path) -> None:
    # make test installs node and node_modules (deps-node): their absence is a failure.
    assert shutil.which("node"), "node is missing"
    assert (REPO / "node_modules" / "@durable-streams" / "server").is_dir(), "run npm install"
    out = tmp_path / "durable.json"
    # GIVEN tiny parameters WHEN the benchmark runs against both reference modes
    returned = bench_durable.main(
        [
            f"--targets={','.join(TARGETS)}",
            "--latency-iters=5",
            "--latency-warmup=1",
            "--small-count=40",
            "--small-conc=8",
            "--large-count=3",
            "--large-bytes=65536",
            "--large-conc=2",
            "--read-messages=50",
            "--runs=1",
            f"--out={out}",
        ]
    )
    # THEN the result file is what main returned, every workload ran on every target
    result: dict[str, Any] = json.loads(out.read_text())
    assert result["benchmark"] == "durable" and result == json.loads(json.dumps(returned))
    assert list(result["workloads"]) == list(bench_durable.WORKLOADS)
    for wl, by_target in result["workloads"].items():
        assert list(by_target) == TARGETS, wl
        for target, r in by_target.items():
            assert r["ok"] is True, (wl, target, r.get("error"))
            # the workload's primary metric is a positive number
            metric = result["primary_metrics"][wl]["metric"]
            assert _positive(r[metric]), (wl, target, metric, r[metric])
            assert _positive(r["p50_ms"]) and r["p50_ms"] <= r["p99_ms"], (wl, target)
            # only Headwater counts the AWS calls it makes per operation
            assert ("aws_calls_per_op" in r) == (target == "headwater"), (wl, target)

    w = result["workloads"]
    for target in TARGETS:
        lat = w["latency"][target]
        assert lat["ops"] == 5 and len(lat["latencies_ms"]) == 5
        assert lat["p50_ms"] <= lat["p95_ms"] <= lat["p99_ms"]
        for wl, count, size in (("small", 40, 100), ("large", 3, 65536)):
            r = w[wl][target]
            assert r["ops"] == count and _positive(r["msg_per_s"]), (wl, target)
            # MB/s is messages/s times the message size
            assert r["mb_per_s"] == pytest.approx(r["msg_per_s"] * size / 2**20), (wl, target)
        read = w["catchup"][target]
        assert [run["messages"] for run in read["per_run"]] == [50]
        assert read["per_run"][0]["bytes"] >= 50 * 100
        assert _positive(read["msg_per_s"])

    # Headwater ran against both: every ratio is a positive number, CPU per operation too
    for wl, row in result["ratios"].items():
        assert _positive(row["headwater/ref-file"]) and _positive(row["headwater/ref-mem"]), wl
        # our CPU per operation over the reference's (None where a tiny run spent less than
        # one of /proc's 10 ms ticks)
        cpu = {t: w[wl][t]["cpu_ms_per_op"]["server"] for t in ("ref-file", "headwater")}
        want = cpu["headwater"] / cpu["ref-file"] if cpu["headwater"] and cpu["ref-file"] else None
        assert row["cpu headwater/ref-file"] == (pytest.approx(want) if want else None), wl
    # the storage floor of a round trip: the bare calls, timed, beside Headwater's round trip
    floor = w["latency"]["headwater"]["storage_floor"]
    assert floor["rounds"] == 5 and _positive(floor["p50_ms"]) and _positive(floor["read_p50_ms"])
    assert floor["p50_ms"] <= floor["p99_ms"] and _positive(floor["cpu_ms_per_op"])
    # paced as the round trip (the append settle_ms after the head read), and back to back
    assert floor["settle_ms"] == bench_durable.Params().settle_ms
    assert _positive(floor["hot_p50_ms"])
    # and the same append calls as the server saw them, once per round trip: the counter
    # step and the frame put (docs/storage.md "The sequencer")
    calls = w["latency"]["headwater"]["server_call_ms"]
    for api in ("DynamoDB.UpdateItem", "DynamoDB.PutItem"):
        assert calls[api]["calls"] >= 5 and 0 < calls[api]["p50_ms"] <= calls[api]["p95_ms"]
    assert "DynamoDB.TransactWriteItems" not in calls
    over = result["ratios"]["latency"]["p50 over storage floor ms"]
    assert over == pytest.approx(w["latency"]["headwater"]["p50_ms"] - floor["p50_ms"])
    assert result["ratios"]["latency"]["goals"]["floor + 3 ms"] == (over <= 3.0)
    # and what is left of Headwater's round trip above both floors (storage, Python's HTTP)
    own = result["ratios"]["latency"]["p50 over storage + HTTP floors ms"]
    assert own == pytest.approx(over - w["latency"]["py-floor"]["p50_ms"])
