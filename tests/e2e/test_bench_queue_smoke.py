"""bench/bench_queue.py end to end with tiny parameters: every workload runs real worker
processes against real server processes and a real emulator, the queue drains, and the
result file holds what the report relies on. Structural facts only (every produced job acked
exactly once, none lost, counted AWS calls and costs); no timing assertions: the machine is
shared and the numbers are noisy."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from bench import bench_queue

# one moto process for every benchmark smoke run, reset before each (conftest)
pytestmark = [
    pytest.mark.serial,
    pytest.mark.e2e,
    pytest.mark.timeout(240),
    pytest.mark.usefixtures("bench_emulator"),
]

JOBS = 48  # 3 claims of max 16; 48 single-job claims for queue-8w-m1


def test_bench_queue_tiny_run_acks_every_job_once_and_counts_calls(tmp_path: Path) -> None:
    out = tmp_path / "queue.json"
    # GIVEN a tiny queue per workload WHEN the whole benchmark runs (--quick: until it drains)
    returned = bench_queue.main(["--quick", f"--jobs={JOBS}", f"--out={out}"])
    # THEN the result file is what main returned, with the four workloads
    result: dict[str, Any] = json.loads(out.read_text())
    assert result["benchmark"] == "queue" and result == json.loads(json.dumps(returned))
    by = {w["workload"]["name"]: w for w in result["workloads"]}
    assert list(by) == [
        "queue-1w-m16",
        "queue-8w-m16",
        "queue-8w-m1",
        "queue-8w-m64",
        "queue-32w-m16",
    ]
    assert result["settings"]["jobs_prefilled_per_run"] == JOBS

    for name, w in by.items():
        q = w["queue"]
        (run,) = q["per_run"]
        # every produced job was claimed once and acked exactly once; none lost, none left
        assert run["every_job_acked_exactly_once"] is True, (name, run)
        assert run["produced"] == run["claimed"] == run["acked"] == JOBS, (name, run)
        assert run["acked_twice"] == run["claimed_twice"] == run["lost"] == 0, (name, run)
        assert run["ack_skipped"] == run["redeliveries"] == run["left_in_queue"] == 0, name
        assert run["queue_ready_after"] == run["queue_in_flight_after"] == 0, (name, run)
        assert run["request_errors"] == 0 and w["errors"] == 0, (name, run["first_errors"])
        assert q["correct"] is True and q["ran_dry"] is True, name
        # each claim handed out at most max jobs, and every claim with jobs was acked
        assert 1 <= q["jobs_per_claim"] <= w["workload"]["params"]["max"], name
        assert run["acks"] == run["claims"] - run["empty_claims"], (name, run)
        # throughput and latencies are positive finite numbers, p99 at least p50
        assert q["jobs_per_s"] > 0 and w["records_per_s"] > 0, name
        for op in ("claim", "ack"):
            p50, p99 = q[f"{op}_p50_ms"], q[f"{op}_p99_ms"]
            assert math.isfinite(p50) and 0 < p50 <= p99, (name, op)
        # calls were counted in the servers: claim passes read the leases (Query) and commit
        # with a transaction, and so does every ack; both bill DynamoDB
        calls = q["aws_calls_per_job"]
        assert calls["DynamoDB.TransactWriteItems"]["calls"] > 0, (name, calls)
        assert calls["DynamoDB.Query"]["calls"] > 0, (name, calls)
        assert q["aws_calls_per_job_total"] > 0, name
        assert q["usd_per_million_jobs"]["usd_dynamodb"] > 0, name
        assert q["usd_per_million_jobs"] == w["usd_per_million_events"], name

    assert by["queue-1w-m16"]["workload"]["params"]["server_processes"] == 1
    assert by["queue-8w-m16"]["workload"]["params"]["server_processes"] == 2
    assert isinstance(by["queue-8w-m16"]["target"]["met"], bool)
    assert by["queue-8w-m1"]["queue"]["jobs_per_claim"] == 1
