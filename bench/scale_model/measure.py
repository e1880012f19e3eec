"""The model's inputs, measured: the real engine in-process against moto, counted with
headwater.storage.callcount, and server CPU from bench_v0's latest results.

Latency measured against an emulator is not AWS latency: only call counts, WRU, frame bytes
and CPU transfer to the model.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.harness import LocalCallCounter, per_op_calls, percentile
from bench.scale_model.designs import DEFAULT_INPUTS, Inputs

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"


class _CallProbe:
    """Wall time of each DynamoDB call, and the records and bytes of each frame written to
    the log table (botocore hooks on one client, beside callcount's)."""

    def __init__(self, client: Any, log_table: str) -> None:
        from headwater.storage import callcount

        self._size = callcount.item_size
        self.log_table = log_table
        self.ms: dict[str, list[float]] = {}
        self.frames: list[tuple[int, int]] = []
        ev = client.meta.events
        ev.register("before-parameter-build.dynamodb.*", self._params, unique_id="scale-params")
        ev.register("before-call.dynamodb.*", self._start, unique_id="scale-start")
        ev.register("after-call.dynamodb.*", self._stop, unique_id="scale-stop")

    def reset(self) -> None:
        self.ms.clear()
        self.frames.clear()

    def _params(self, params: Any = None, **_: Any) -> None:
        ops = [next(iter(t.values())) for t in (params or {}).get("TransactItems", [])]
        if "Item" in (params or {}):
            ops.append(params)
        for op in ops:
            item = op.get("Item")
            if op.get("TableName") == self.log_table and item:
                self.frames.append((_frame_records(item), self._size(item)))

    def _start(self, context: Any = None, **_: Any) -> None:
        if context is not None:
            context["scale_t0"] = time.perf_counter()

    def _stop(self, model: Any = None, context: Any = None, **_: Any) -> None:
        t0 = (context or {}).get("scale_t0")
        if t0 is not None and model is not None:
            self.ms.setdefault(model.name, []).append((time.perf_counter() - t0) * 1000)


def _frame_records(item: dict[str, Any]) -> int:
    """Records in a frame item: a frame is keyed by its first seq (`sk`), `ls` is its last."""
    return int(item["ls"]["N"]) - int(item["sk"]["N"]) + 1


def measure_local(appends: int = 200, concurrency: int = 32, rounds: int = 10) -> dict[str, Any]:
    """Append 1 KB single-record appends through the real app (ASGI, in-process) against
    in-process moto: `appends` one at a time (one request per environment, as on Lambda),
    then `concurrency` clients x `rounds` appends to one topic at once (group commit).
    Calls and WRU per append come from headwater.storage.callcount (via harness); the
    latencies are the emulator's, not AWS's."""
    from moto import mock_aws

    from headwater.dev import moto_patches
    from headwater.dev.emulator import ENDPOINT_VARS, FAKE_CREDENTIALS

    saved = dict(os.environ)  # in-process moto answers AWS's own endpoints only
    for var in ENDPOINT_VARS:
        os.environ.pop(var, None)
    os.environ.update(FAKE_CREDENTIALS)
    moto_patches.apply()
    counter = LocalCallCounter()
    try:
        return _measure(appends, concurrency, rounds, counter, mock_aws)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _measure(
    appends: int, concurrency: int, rounds: int, counter: Any, mock_aws: Any
) -> dict[str, Any]:
    import boto3

    from bench.bench_v0 import make_body
    from headwater.http.app import create_app
    from headwater.settings import Settings, Tiering
    from headwater.storage import callcount
    from headwater.storage.bootstrap import ensure_resources
    from headwater.storage.clients import AwsClients

    with mock_aws():
        prefix = f"scale-{uuid.uuid4().hex[:6]}"
        settings = Settings(resource_prefix=prefix, tiering=Tiering(inline=False, interval_ms=0))
        session = boto3.Session(region_name=settings.region)
        callcount.install(session)
        clients = AwsClients.create(settings, session=session)
        ensure_resources(settings, clients)
        probe = _CallProbe(clients.dynamodb, settings.table_name("log"))
        app = create_app(settings, clients)
        # a distinct random record per append, so a grouped frame compresses like real data
        bodies = [make_body(1, seed) for seed in range(appends + concurrency * rounds + 4)]
        out: dict[str, Any] = {
            "settings": {"spill_threshold_bytes": settings.spill_threshold_bytes},
            "note": "in-process moto: latencies are the emulator's (and this box's), not AWS's",
        }
        for name, tasks, per_task in (("single", 1, appends), ("group", concurrency, rounds)):
            latencies, cpu_s, wall_s = asyncio.run(
                _timed_appends(app, f"{name}-{prefix}", tasks, per_task, bodies, counter, probe)
            )
            n = tasks * per_task
            snap = counter.snapshot()
            out[name] = _measured(snap, probe, settings, n, latencies, cpu_s, wall_s)
            out[name]["clients"] = tasks
    # frame bytes by records per frame, over both runs (1-record frames, grouped frames)
    sizes = [(r, b) for run in ("single", "group") for r, b, _ in out[run]["frame_sizes"]]
    out["frame_fit"] = fit_frames(sizes)
    return out


async def _timed_appends(
    app: Any,
    topic: str,
    tasks: int,
    per_task: int,
    bodies: list[bytes],
    counter: Any,
    probe: _CallProbe,
) -> tuple[list[float], float, float]:
    import httpx

    path = f"/v0/topics/{topic}"
    latencies: list[float] = []
    transport = httpx.ASGITransport(app=app)
    headers = {"content-type": "application/json"}
    async with httpx.AsyncClient(transport=transport, base_url="http://scale") as http:
        # warm-up (creates the topic, builds the services, caches the head): not counted
        for body in bodies[:2]:
            r = await http.post(path, content=body, headers=headers)
            r.raise_for_status()
        counter.reset()
        probe.reset()
        cpu0, t0 = time.process_time(), time.perf_counter()

        async def task(k: int) -> None:
            for i in range(per_task):
                s = time.perf_counter()
                r = await http.post(path, content=bodies[(k + i) % len(bodies)], headers=headers)
                latencies.append((time.perf_counter() - s) * 1000)
                r.raise_for_status()

        await asyncio.gather(*(task(k) for k in range(tasks)))
        return latencies, time.process_time() - cpu0, time.perf_counter() - t0


def _measured(
    snap: dict[str, Any],
    probe: _CallProbe,
    settings: Any,
    n: int,
    latencies: list[float],
    cpu_s: float,
    wall_s: float,
) -> dict[str, Any]:
    calls = per_op_calls(snap, n)
    ddb = {api: f for api, f in calls.items() if api.startswith("DynamoDB.")}
    wru = sum(f["wru"] for f in ddb.values())
    tables = snap.get("tables", {})
    kb_total = sum(t["kb_units"] for t in tables.values()) or 1.0
    mult = wru * n / kb_total  # 2 when every write was transactional
    split = {
        logical: tables.get(settings.table_name(logical), {}).get("kb_units", 0.0) * mult / n
        for logical in ("heads", "log", "index")
    }
    frames = probe.frames
    ddb_ms_total = sum(sum(v) for v in probe.ms.values())
    return {
        "appends": n,
        "calls_per_append": {api: f["calls"] for api, f in ddb.items()},
        "write_calls_per_append": sum(
            f["calls"] for api, f in ddb.items() if not api.endswith(("GetItem", "Query"))
        ),
        "wru_per_append": wru,
        "rru_per_append": sum(f["rru"] for f in ddb.values()),
        "wru_per_append_by_table": split,
        "appends_per_commit": n / max(len(frames), 1),
        "frames": len(frames),
        "frame_records_mean": sum(r for r, _ in frames) / max(len(frames), 1),
        "frame_bytes_mean": sum(b for _, b in frames) / max(len(frames), 1),
        "frame_sizes": _sizes(frames),
        # the emulator's wall time per DynamoDB API (UpdateItem, PutItem, GetItem, ...)
        "api_ms": {api: api_times(ms) for api, ms in sorted(probe.ms.items())},
        "ddb_ms_per_append": ddb_ms_total / n,
        "append_ms_p50": percentile(latencies, 50),
        "append_ms_mean": sum(latencies) / max(len(latencies), 1),
        "append_ms_p99": percentile(latencies, 99),
        "appends_per_s": n / wall_s if wall_s > 0 else math.nan,
        "process_cpu_ms_per_append": 1000 * cpu_s / n,
    }


def api_times(ms: Sequence[float]) -> dict[str, float]:
    """p50, p99, mean and count of one API's call wall times (ms)."""
    return {
        "p50": percentile(ms, 50),
        "p99": percentile(ms, 99),
        "mean": sum(ms) / max(len(ms), 1),
        "calls": float(len(ms)),
    }


def _sizes(frames: Sequence[tuple[int, int]]) -> list[list[float]]:
    """[records, mean item bytes, frames] by frame length."""
    by: dict[int, list[int]] = {}
    for r, b in frames:
        by.setdefault(r, []).append(b)
    return [[r, sum(v) / len(v), len(v)] for r, v in sorted(by.items())]


def fit_frames(frames: Sequence[tuple[int, float]]) -> dict[str, float] | None:
    """Least squares bytes = overhead + records x per_record (None: one frame length)."""
    if len({r for r, _ in frames}) < 2:
        return None
    k = len(frames)
    sx = sum(r for r, _ in frames)
    sy = sum(b for _, b in frames)
    sxx = sum(r * r for r, _ in frames)
    sxy = sum(r * b for r, b in frames)
    slope = (k * sxy - sx * sy) / (k * sxx - sx * sx)
    return {"overhead_bytes": (sy - slope * sx) / k, "bytes_per_record": slope}


def cpu_from_bench_v0(path: Path = RESULTS / "latest-v0.json") -> dict[str, Any] | None:
    """Server CPU per request, per commit and per record from bench_v0's latest append runs
    (uvicorn server, moto in its own process, CPU read from /proc): append-b1 (1 commit per
    request), append-1x32 (group commit) and append-b100 (100 records per request). A commit
    is a TransactWriteItems (before c25145a) or a reservation, an UpdateItem (since)."""
    try:
        data = json.loads(path.read_text())
        by = {w["workload"]["name"]: w for w in data["workloads"]}
        b1, g, b100 = by["append-b1"], by["append-1x32"], by["append-b100"]
        calls = g["aws_calls_per_op"]
        commit_api = calls.get("DynamoDB.TransactWriteItems") or calls["DynamoDB.UpdateItem"]
        commits = float(commit_api["calls"])
    except (OSError, KeyError, ValueError):
        return None

    def cpu(w: dict[str, Any]) -> float:
        return float(w["cpu_ms_per_op"]["server"])

    per_record = (cpu(b100) - cpu(b1)) / 99
    per_commit = (cpu(b1) - cpu(g)) / (1 - commits)
    per_request = cpu(b1) - per_commit - per_record
    return {
        "source": f"{_rel(path)} ({data.get('git', {}).get('commit', '?')}, "
        f"{data.get('finished_at', '?')})",
        "cpu_ms_request": per_request,
        "cpu_ms_commit": per_commit,
        "cpu_ms_record": per_record,
        "append_b1_server_cpu_ms": cpu(b1),
        "append_1x32_server_cpu_ms": cpu(g),
        "append_1x32_commits_per_append": commits,
    }


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def inputs_from(measured: dict[str, Any] | None, cpu: dict[str, Any] | None) -> Inputs:
    """The model's inputs: the local measurement where there is one, else DEFAULT_INPUTS."""
    inp = DEFAULT_INPUTS
    sources = []
    if measured is not None:
        single = measured["single"]
        fit = measured["frame_fit"] or {
            "overhead_bytes": 0.0,
            "bytes_per_record": single["frame_bytes_mean"],
        }
        split = single["wru_per_append_by_table"]
        # the head is written once per commit: in a transaction (2x its KB) before c25145a,
        # by the reservation's UpdateItem since
        txn = "DynamoDB.TransactWriteItems" in single["calls_per_append"]
        inp = replace(
            inp,
            head_kb=max(1, round(split["heads"] / (2 if txn else 1))),
            frame_overhead_bytes=fit["overhead_bytes"],
            frame_bytes_per_record=fit["bytes_per_record"],
            spill_bytes=measured["settings"]["spill_threshold_bytes"],
        )
        sources.append("local moto run (calls, WRU, frame bytes)")
    if cpu is not None:
        inp = replace(
            inp,
            cpu_ms_request=cpu["cpu_ms_request"],
            cpu_ms_commit=cpu["cpu_ms_commit"],
            cpu_ms_record=cpu["cpu_ms_record"],
        )
        sources.append(f"CPU from {cpu['source']}")
    return replace(inp, source="; ".join(sources) or inp.source)
