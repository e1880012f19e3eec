"""The benchmark harness every benchmark uses.

A benchmark describes a `Workload`, hands `run_workload` a function that runs it once and
returns a `RunResult`, and gets back medians over several runs: throughput (ops/s and
records/s), client latency p50/p99, AWS calls per operation by API with request/response
bytes (counted in the server processes by `headwater.storage.callcount`), CPU per process,
and the AWS bill per operation and per million events at the list prices in `PRICES`.

Cost method (stated once, here):
- DynamoDB on-demand: WRU/RRU per call are estimated by callcount from item sizes (writes:
  1 WRU per started KB per item, x2 in a transaction; an Update on the larger of the item
  before it (as the server process last wrote or read it whole) and its key + values, a
  Delete on the item it removes; `unsized_writes` counts those billed on a lower bound
  because the process never saw the item; reads: 1 RRU per started 4 KB, x0.5 eventually
  consistent, Query summed over the page). Each write to a table with global secondary
  indexes adds 1 standard WRU per KB per index (projection ALL: every change to an indexed
  item is replicated; we count it even when only non-key attributes change, which is how
  ALL projections behave).
- S3: PUT-class requests (Put/Copy/Post/List/multipart) and GET-class (Get/Head/others);
  DeleteObject(s) free. Storage (GB-month) and in-region transfer are not counted.
- Lambda: one invocation per HTTP request plus GB-seconds at the function's memory
  (template.yaml: 1024 MB) for an estimated duration = the server's CPU ms per operation
  (measured) + AWS_CALL_MS per AWS call it made (an assumed in-region round trip). Not the
  measured server time: against an emulator on a shared 2-core box that is mostly queueing.
  It assumes the batching measured here; one Lambda invocation serves one request, so group
  commit across concurrent requests does not happen there.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import multiprocessing as mp
import os
import platform
import queue
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

# --- prices -------------------------------------------------------------------------------
# AWS list prices, us-east-1, on-demand. DynamoDB after the 2024-11-01 on-demand price cut
# (aws.amazon.com/dynamodb/pricing/on-demand; transactional writes bill 2 WRU per KB, strongly
# consistent reads 1 RRU per 4 KB, eventually consistent 0.5). Checked 2025 (see README).
PRICES: dict[str, Any] = {
    "as_of": "2024-11-01",
    "region": "us-east-1",
    "dynamodb_wru_per_million": 0.625,
    "dynamodb_rru_per_million": 0.125,
    "dynamodb_storage_gb_month": 0.25,  # Standard table class
    "s3_put_per_thousand": 0.005,
    "s3_get_per_thousand": 0.0004,
    "lambda_request_per_million": 0.20,
    "lambda_gb_second": 0.0000166667,
    # Lambda Managed Instances (bench/bench_scale_model.py), us-east-1: $0.20 per million
    # requests and the EC2 on-demand price of the instances plus a 15% management fee, no
    # GB-second charge (aws.amazon.com/lambda/pricing, as transcribed 2026-09); the instance
    # is an m7g.large (2 vCPU, 8 GiB), Linux on demand $0.0816/h (a June 2026 price table;
    # confirm at aws.amazon.com/ec2/pricing/on-demand).
    "lmi_request_per_million": 0.20,
    "lmi_management_fee": 0.15,
    "lmi_instance": "m7g.large",
    "lmi_instance_hour": 0.0816,
}
LAMBDA_MEMORY_GB = 1.0  # template.yaml MemorySize: 1024
AWS_CALL_MS = 8.0  # assumed DynamoDB/S3 round trip from Lambda, for the duration estimate

S3_PUT_CLASS = {
    "PutObject",
    "CopyObject",
    "PostObject",
    "ListObjects",
    "ListObjectsV2",
    "ListObjectVersions",
    "ListBuckets",
    "CreateMultipartUpload",
    "UploadPart",
    "UploadPartCopy",
    "CompleteMultipartUpload",
    "CreateBucket",
}
S3_FREE = {"DeleteObject", "DeleteObjects", "AbortMultipartUpload"}


# --- statistics ---------------------------------------------------------------------------
def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default), q in [0, 100]. NaN if empty."""
    if not values:
        return math.nan
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be in [0, 100], got {q}")
    s = sorted(values)
    pos = (len(s) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


# --- machine ------------------------------------------------------------------------------
def machine_info() -> dict[str, Any]:
    model = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info: dict[str, Any] = {
        "cpu_model": model,
        "cores": os.cpu_count(),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "os": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
    }
    with contextlib.suppress(OSError):
        info["loadavg_1m"] = round(os.getloadavg()[0], 2)
    try:
        from importlib.metadata import version

        info["versions"] = {
            p: version(p) for p in ("boto3", "moto", "uvicorn", "starlette", "fastapi", "httpx")
        }
    except Exception:  # pragma: no cover - informational only
        pass
    return info


def process_cpu_seconds(pid: int) -> float:
    """user + system CPU seconds of a process (Linux /proc), 0.0 if unknown."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def machine_cpu_seconds() -> float:
    """Busy CPU seconds of the whole machine since boot, all cores (Linux /proc/stat)."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def cpu_calibration_ms(rounds: int = 5) -> float:
    """How fast this machine runs Python now: the best of `rounds` timings of a fixed
    pure-Python loop (ms; ~20 ms on the AMD EPYC the published figures come from). A figure
    compares with a published one only when this is close to the published run's: a
    slower or shared core slows every target, but not by the same factor (bench_durable)."""
    best = math.inf
    for _ in range(rounds):
        t0 = time.perf_counter()
        n = 0
        for i in range(400_000):
            n += i % 7
        best = min(best, time.perf_counter() - t0)
    return round(best * 1000, 2)


# --- call counters ------------------------------------------------------------------------
class CallCounter(Protocol):
    def reset(self) -> None: ...
    def snapshot(self) -> dict[str, Any]: ...


class LocalCallCounter:
    """The counters of this process (clients hooked with callcount.install)."""

    def reset(self) -> None:
        from headwater.storage import callcount

        callcount.reset()

    def snapshot(self) -> dict[str, Any]:
        from headwater.storage import callcount

        return callcount.snapshot()


class RemoteCallCounter:
    """The counters of one or more bench servers (bench/server.py's /_bench routes)."""

    def __init__(self, base_urls: Sequence[str]) -> None:
        self.base_urls = list(base_urls)

    def reset(self) -> None:
        for u in self.base_urls:
            req = urllib.request.Request(f"{u}/_bench/calls/reset", data=b"", method="POST")
            with urllib.request.urlopen(req, timeout=10):
                pass

    def snapshot(self) -> dict[str, Any]:
        snaps = []
        for u in self.base_urls:
            with urllib.request.urlopen(f"{u}/_bench/calls", timeout=10) as r:
                snaps.append(json.loads(r.read()))
        return merge_snapshots(snaps)


def merge_snapshots(snaps: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"calls": {}, "tables": {}, "wall_ms": {}}
    for s in snaps:
        for api, samples in s.get("wall_ms", {}).items():
            out["wall_ms"].setdefault(api, []).extend(samples)
        for section in ("calls", "tables"):
            for name, fields in s.get(section, {}).items():
                dst = out[section].setdefault(name, {})
                for k, v in fields.items():
                    dst[k] = dst.get(k, 0.0) + v
    return out


# --- workloads and runs -------------------------------------------------------------------
@dataclass(frozen=True)
class Target:
    metric: str  # a key of the summary, e.g. "records_per_s"
    minimum: float
    label: str


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    op: str  # what one operation is, e.g. "POST /v0/topics/:t (batch 100)"
    records_per_op: int
    record_bytes: int
    clients: int
    client_processes: int = 1
    duration_s: float = 10.0
    target: Target | None = None
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunResult:
    ops: int
    records: int
    elapsed_s: float
    latencies_ms: list[float]
    server_ms_total: float = 0.0  # sum of performance.server_total_ms over ops
    errors: int = 0
    calls: dict[str, Any] = field(default_factory=dict)  # a callcount snapshot
    cpu_s: dict[str, float] = field(default_factory=dict)  # CPU seconds per process
    window_s: float = 0.0  # wall time over which cpu_s was sampled (0: use elapsed_s)

    @property
    def ops_per_s(self) -> float:
        return self.ops / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def records_per_s(self) -> float:
        return self.records / self.elapsed_s if self.elapsed_s > 0 else 0.0


def per_op_calls(calls: Mapping[str, Any], ops: int) -> dict[str, dict[str, float]]:
    """Per-operation averages of a callcount snapshot's counters, by API."""
    n = max(ops, 1)
    return {
        api: {k: v / n for k, v in fields.items()} for api, fields in calls.get("calls", {}).items()
    }


def cost_per_op(
    calls: Mapping[str, Any],
    ops: int,
    *,
    gsi_count: Mapping[str, int] | None = None,
    lambda_ms_per_op: float = 0.0,
    lambda_memory_gb: float = LAMBDA_MEMORY_GB,
    prices: Mapping[str, Any] = PRICES,
) -> dict[str, float]:
    """Dollars per operation, by component, from a callcount snapshot over `ops` operations."""
    n = max(ops, 1)
    wru = rru = s3_put = s3_get = unsized = 0.0
    for api, f in calls.get("calls", {}).items():
        service, _, name = api.partition(".")
        if service == "DynamoDB":
            wru += f.get("wru", 0.0)
            rru += f.get("rru", 0.0)
            unsized += f.get("unsized", 0.0)
        elif service == "S3" and name not in S3_FREE:
            if name in S3_PUT_CLASS:
                s3_put += f.get("calls", 0.0)
            else:
                s3_get += f.get("calls", 0.0)
    gsi_wru = 0.0
    for table, t in calls.get("tables", {}).items():
        gsi_wru += t.get("kb_units", 0.0) * (gsi_count or {}).get(table, 0)
    wru += gsi_wru
    out = {
        "wru": wru / n,
        "gsi_wru": gsi_wru / n,
        # item writes billed on a lower bound (an Update or Delete of an item the server
        # process never saw whole: storage/callcount.py)
        "unsized_writes": unsized / n,
        "rru": rru / n,
        "s3_put": s3_put / n,
        "s3_get": s3_get / n,
        "usd_dynamodb": (
            wru * prices["dynamodb_wru_per_million"] + rru * prices["dynamodb_rru_per_million"]
        )
        / 1e6
        / n,
        "usd_s3": (s3_put * prices["s3_put_per_thousand"] + s3_get * prices["s3_get_per_thousand"])
        / 1e3
        / n,
        "usd_lambda": prices["lambda_request_per_million"] / 1e6
        + lambda_ms_per_op / 1000 * lambda_memory_gb * prices["lambda_gb_second"],
    }
    out["usd_storage"] = out["usd_dynamodb"] + out["usd_s3"]
    out["usd_total"] = out["usd_storage"] + out["usd_lambda"]
    return out


def per_million_events(cost: Mapping[str, float], records_per_op: float) -> dict[str, float]:
    """$ per million events (records) from $ per operation."""
    k = 1e6 / max(records_per_op, 1e-9)
    return {key: cost[key] * k for key in cost if key.startswith("usd_")}


def idle_ceiling(
    ms_per_op: Mapping[str, float], records_per_op: float, clients: int, cores: int | None = None
) -> dict[str, float]:
    """Throughput this machine would reach if our processes had it to themselves, from CPU
    per operation: a single Python server process is capped at one core (the GIL); with
    several clients in flight the work spreads over all cores; one client in a request/
    response chain (clients == 1) serialises everything."""
    cores = cores or os.cpu_count() or 1
    total = sum(ms_per_op.values())
    server = ms_per_op.get("server", 0.0)
    if total <= 0:
        return {}
    if clients <= 1:
        ops = 1000 / total
    else:
        ops = min(1000 / server if server > 0 else math.inf, cores * 1000 / total)
    return {"ops_per_s": ops, "records_per_s": ops * records_per_op}


def summarize(
    workload: Workload,
    runs: Sequence[RunResult],
    *,
    gsi_count: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """Medians across runs. Calls, bytes and cost come from the run with median records/s."""
    if not runs:
        raise ValueError("no runs")
    by_speed = sorted(runs, key=lambda r: r.records_per_s)
    mid = by_speed[(len(by_speed) - 1) // 2]
    calls = per_op_calls(mid.calls, mid.ops)
    server_ms = mid.server_ms_total / max(mid.ops, 1)
    mid_cpu_ms = 1000 * mid.cpu_s["server"] / max(mid.ops, 1) if "server" in mid.cpu_s else None
    aws_calls = sum(f.get("calls", 0.0) for f in calls.values())
    lambda_ms = (server_ms if mid_cpu_ms is None else mid_cpu_ms) + AWS_CALL_MS * aws_calls
    cost = cost_per_op(mid.calls, mid.ops, gsi_count=gsi_count, lambda_ms_per_op=lambda_ms)
    records_per_op = mid.records / max(mid.ops, 1)
    cpu_cores = {
        name: median([r.cpu_s.get(name, 0.0) / (r.window_s or r.elapsed_s) for r in runs])
        for name in sorted({k for r in runs for k in r.cpu_s})
    }
    if "machine" in cpu_cores:
        # Cores busy with processes outside this benchmark (the machine is shared).
        cpu_cores["other"] = max(
            0.0,
            median(
                [
                    (
                        r.cpu_s.get("machine", 0.0)
                        - sum(v for k, v in r.cpu_s.items() if k != "machine")
                    )
                    / (r.window_s or r.elapsed_s)
                    for r in runs
                ]
            ),
        )
    # CPU milliseconds per operation by process: unlike throughput, nearly independent of
    # what else the machine runs, so it gives the ceiling this machine would reach idle.
    ms_per_op = {
        name: median([1000 * r.cpu_s.get(name, 0.0) / max(r.ops, 1) for r in runs])
        for name in sorted({k for r in runs for k in r.cpu_s} - {"machine"})
    }
    summary: dict[str, Any] = {
        "workload": asdict(workload),
        "runs": len(runs),
        "ops_per_s": median([r.ops_per_s for r in runs]),
        "records_per_s": median([r.records_per_s for r in runs]),
        "p50_ms": median([percentile(r.latencies_ms, 50) for r in runs]),
        "p99_ms": median([percentile(r.latencies_ms, 99) for r in runs]),
        "errors": sum(r.errors for r in runs),
        "per_run": [
            {
                "ops": r.ops,
                "records": r.records,
                "elapsed_s": round(r.elapsed_s, 3),
                "ops_per_s": round(r.ops_per_s, 1),
                "records_per_s": round(r.records_per_s, 1),
                "p50_ms": round(percentile(r.latencies_ms, 50), 3),
                "p99_ms": round(percentile(r.latencies_ms, 99), 3),
            }
            for r in runs
        ],
        "server_ms_per_op": server_ms,
        "lambda_ms_per_op_estimate": lambda_ms,
        "records_per_op": records_per_op,
        "aws_calls_per_op": calls,
        "cost_per_op": cost,
        "usd_per_million_events": per_million_events(cost, records_per_op),
        "cpu_cores": cpu_cores,
        "cpu_ms_per_op": ms_per_op,
        "idle_ceiling": idle_ceiling(ms_per_op, records_per_op, workload.clients),
    }
    t = workload.target
    if t is not None:
        summary["target"] = {
            "metric": t.metric,
            "minimum": t.minimum,
            "label": t.label,
            "met": summary[t.metric] >= t.minimum,
        }
    return summary


def run_workload(
    workload: Workload,
    run_once: Callable[[int, Callable[[], None]], RunResult],
    *,
    repeats: int = 3,
    counter: CallCounter | None = None,
    cpu_pids: Mapping[str, int] | None = None,
    gsi_count: Mapping[str, int] | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run `run_once(i, begin)` `repeats` times. `run_once` calls `begin()` once, when its
    timed part starts (after any warm-up): that zeroes the AWS call counters and samples the
    CPU of `cpu_pids`. After the run the call snapshot and CPU seconds are attached."""
    runs: list[RunResult] = []
    for i in range(repeats):
        cpu0: dict[str, float] = {}
        started: list[float] = []

        def begin(cpu0: dict[str, float] = cpu0, started: list[float] = started) -> None:
            if counter is not None:
                counter.reset()
            cpu0.update({name: process_cpu_seconds(pid) for name, pid in (cpu_pids or {}).items()})
            cpu0["machine"] = machine_cpu_seconds()
            started.append(time.perf_counter())

        result = run_once(i, begin)
        if not started:
            raise RuntimeError(f"{workload.name}: run_once never called begin()")
        if counter is not None:
            result.calls = counter.snapshot()
        for name, pid in (cpu_pids or {}).items():
            result.cpu_s[name] = process_cpu_seconds(pid) - cpu0[name]
        result.cpu_s["machine"] = machine_cpu_seconds() - cpu0["machine"]
        result.window_s = time.perf_counter() - started[0]
        log(
            f"  {workload.name} run {i + 1}/{repeats}: {result.ops} ops, "
            f"{result.records_per_s:,.0f} rec/s, {result.ops_per_s:,.0f} ops/s, "
            f"p50 {percentile(result.latencies_ms, 50):.1f} ms, "
            f"p99 {percentile(result.latencies_ms, 99):.1f} ms, errors {result.errors}"
        )
        runs.append(result)
    return summarize(workload, runs, gsi_count=gsi_count)


# --- reporting ----------------------------------------------------------------------------
def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(r: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), sep, *(line(r) for r in cells[1:])])


def _short_api(api: str) -> str:
    service, _, name = api.partition(".")
    return f"{'DDB' if service == 'DynamoDB' else service}.{name}"


def report(summaries: Sequence[Mapping[str, Any]], machine: Mapping[str, Any]) -> str:
    out = [
        f"machine: {machine.get('cpu_model')} x{machine.get('cores')} | Python "
        f"{machine.get('python')} | {machine.get('os')}",
        "CPU ms/op: CPU time per operation in the server / emulator(s) / load generator;",
        "idle rec/s: the ceiling those imply with the machine to ourselves (oth = cores busy",
        "with processes outside this benchmark during the run).",
        "",
    ]
    rows = []
    for s in summaries:
        t = s.get("target")
        cores = s["cpu_cores"]
        ms = s["cpu_ms_per_op"]
        emu_ms = ms.get("moto", 0.0) + ms.get("ddblocal", 0.0)
        emu_cores = cores.get("moto", 0.0) + cores.get("ddblocal", 0.0)
        rows.append(
            [
                s["workload"]["name"],
                f"{s['ops_per_s']:,.0f}",
                f"{s['records_per_s']:,.0f}",
                f"{s['p50_ms']:.1f}",
                f"{s['p99_ms']:.1f}",
                f"{'ok  ' if t['met'] else 'MISS'} {t['label']}" if t else "",
                f"{ms.get('server', 0.0):.2f}/{emu_ms:.2f}/{ms.get('clients', 0.0):.2f}",
                f"{s['idle_ceiling'].get('records_per_s', math.nan):,.0f}",
                f"{cores.get('server', 0.0):.2f}/{emu_cores:.2f}/"
                f"{cores.get('clients', 0.0):.2f}/{cores.get('other', 0.0):.2f}",
            ]
        )
    out.append(
        format_table(
            [
                "workload",
                "ops/s",
                "records/s",
                "p50 ms",
                "p99 ms",
                "target",
                "CPU ms/op srv/emu/cli",
                "idle rec/s",
                "cores srv/emu/cli/oth",
            ],
            rows,
        )
    )
    out.append("")
    out.append(
        f"AWS cost ({PRICES['region']} on-demand list prices as of {PRICES['as_of']}; "
        "Lambda: 1 invocation/op + (server CPU ms + 8 ms/AWS call) x 1 GB):"
    )
    rows = []
    for s in summaries:
        c = s["cost_per_op"]
        m = s["usd_per_million_events"]
        rows.append(
            [
                s["workload"]["name"],
                f"{s['records_per_op']:,.0f}",
                f"{c['wru']:.2f}",
                f"{c['gsi_wru']:.2f}",
                f"{c['rru']:.2f}",
                f"{c['s3_put']:.2f}/{c['s3_get']:.2f}",
                f"{m['usd_dynamodb']:.3f}",
                f"{m['usd_s3']:.3f}",
                f"{m['usd_lambda']:.3f}",
                f"{m['usd_total']:.3f}",
            ]
        )
    out.append(
        format_table(
            [
                "workload",
                "rec/op",
                "WRU/op",
                "(GSI)",
                "RRU/op",
                "S3 put/get",
                "$/M ev DDB",
                "S3",
                "Lambda",
                "total",
            ],
            rows,
        )
    )
    out.append("")
    out.append("AWS calls per operation (by API; bytes are HTTP bodies to/from the emulator):")
    crow = []
    for s in summaries:
        for api, f in sorted(s["aws_calls_per_op"].items()):
            crow.append(
                [
                    s["workload"]["name"],
                    _short_api(api),
                    f"{f['calls']:.3f}",
                    f"{f['req_bytes']:,.0f}",
                    f"{f['resp_bytes']:,.0f}",
                    f"{f['wru']:.2f}",
                    f"{f['rru']:.2f}",
                ]
            )
    out.append(
        format_table(["workload", "API", "calls/op", "req B/op", "resp B/op", "WRU", "RRU"], crow)
    )
    return "\n".join(out)


def git_state() -> dict[str, Any]:
    def git(*a: str) -> str:
        r = subprocess.run(
            ["git", *a],
            cwd=Path(__file__).resolve().parent.parent,
            capture_output=True,
            text=True,
            timeout=10,
        )
        return r.stdout.strip()

    try:
        return {"commit": git("rev-parse", "--short", "HEAD"), "dirty": bool(git("status", "-s"))}
    except (OSError, subprocess.SubprocessError):
        return {}


def result_header(
    name: str, argv: Sequence[str] | None, machine: Mapping[str, Any]
) -> dict[str, Any]:
    """The fields every results file starts with: what ran, when, on which commit and box."""
    return {
        "benchmark": name,
        "command": f"python -m bench.bench_{name} "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "git": git_state(),
        "machine": machine,
    }


def barrier_main(
    main: Callable[[dict[str, Any], Any, Any], Any],
    spec: dict[str, Any],
    ready: Any,
    go: Any,
    out: Any,
) -> None:
    """The body of a load-generating process: run `main(spec, ready, go)` (a coroutine
    function) and put its result on `out`; on any failure abort both barriers first, so the
    parent never hangs on them, and report the error."""
    try:
        out.put(asyncio.run(main(spec, ready, go)))
    except BaseException as exc:
        ready.abort()
        go.abort()
        out.put({"error": repr(exc)})
        raise


def run_processes(
    target: Callable[..., None],
    parts: Sequence[Mapping[str, Any]],
    begin: Callable[[], None],
    what: str = "client",
) -> list[dict[str, Any]]:
    """Start one spawned process per part as target(part, ready, go, out); wait until each
    is warmed up (the `ready` barrier), call begin(), release them (`go`), and collect the
    dict each puts on `out`. A process that fails (or reports "error") fails the run."""
    ctx = mp.get_context("spawn")
    ready = ctx.Barrier(len(parts) + 1)
    go = ctx.Barrier(len(parts) + 1)
    out = ctx.Queue()
    procs = [ctx.Process(target=target, args=(p, ready, go, out)) for p in parts]
    for p in procs:
        p.start()
    try:
        try:
            ready.wait(timeout=120)
            begin()
            go.wait(timeout=30)
        except threading.BrokenBarrierError:
            try:
                why = out.get(timeout=10)
            except queue.Empty:
                why = f"exit codes {[p.exitcode for p in procs]}"
            raise RuntimeError(f"{what} process failed: {why}") from None
        got: list[dict[str, Any]] = [out.get(timeout=900) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.terminate()
    failed = [g["error"] for g in got if "error" in g]
    if failed:
        raise RuntimeError(f"{what} process failed: {failed[0]}")
    return got


def write_results(out_path: Path, result: Mapping[str, Any]) -> None:
    """Write a results JSON atomically (a reader never sees half a file)."""
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1, default=float))
    tmp.replace(out_path)
    print(f"\nresults: {out_path}")
