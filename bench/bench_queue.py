"""Benchmark queue: work-queue claim + ack throughput (spec §10) with 1, 8 and 32 workers.

    python -m bench.bench_queue [--quick] [--runs N] [--out PATH] [--max M] [--duration S]
                                [--jobs N] [--only NAMES]

Processes: the emulator (moto, as `make run` uses), the app served by uvicorn from
bench/server.py (AWS calls counted there): one process for the 1-worker case, two for the
8- and 32-worker cases (workers alternate between them, so the two processes' claim passes
race on the same queue cursor, as concurrent Lambda instances would), and the workers in
1-2 spawned client processes (asyncio tasks on the raw HTTP/1.1 keep-alive client of
bench_v0, one connection per worker). Every workload gets fresh tables and fresh servers.

Each run: a fresh queue topic (type queue, lease_ms 120 s so no lease expires in a run) is
PRE-FILLED with --jobs jobs (small JSON records, --job-bytes each, appended in batches of 100
before the timed window; no producers run during it). Then every worker loops for
--duration s: POST /claim {node, max: M} -> POST /ack {node, seqs, lease_ids} with the seqs
and lease ids it was given, in one request. A worker stops at the deadline (after acking what
it holds) or when a claim returns nothing and `ready` is 0 (the queue ran dry: throughput is
then a lower bound; --quick sizes the queue so that it does, to check every job).

Correctness, checked every run, after the timed window (not counted): the seqs acked (from
the ack responses' `skipped`) hold no duplicate and nothing that was not produced; the jobs
still in the log (a diff of the topic: ack is the permanent delete) are exactly the
produced ones not acked; and the queue's counters say in_flight 0 and ready = what is left.

One operation (for harness figures: ops/s, p50/p99, AWS calls and $ per op) is one HTTP
request, claim or ack (one Lambda invocation each on AWS); records are jobs acked, so
records/s is jobs/s and "$ / M events" is $ per million jobs. The queue table adds claim and
ack latencies apart, and AWS calls per job by API (TransactWriteItems errors = passes that
lost a conditional-write race and retried). Results go to bench/results/latest-queue.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.bench_v0 import RESULTS, BenchServer, Emulators, RawHttp, fresh_servers
from bench.harness import (
    PRICES,
    RemoteCallCounter,
    RunResult,
    Target,
    Workload,
    barrier_main,
    format_table,
    machine_cpu_seconds,
    machine_info,
    median,
    percentile,
    process_cpu_seconds,
    report,
    result_header,
    run_processes,
    summarize,
    write_results,
)

LEASE_MS = 120_000  # no lease may expire inside a run: every job is delivered once
LOAD_BATCH = 100
TARGET = Target("records_per_s", 500, ">= 500 jobs/s")


@dataclass(frozen=True)
class Spec:
    name: str
    workers: int
    max_claim: int
    servers: int
    client_procs: int
    target: Target | None = None


def specs(max_claim: int, servers: int = 2) -> list[Spec]:
    """`servers`: server processes for the 8- and 32-worker workloads."""
    return [
        Spec(f"queue-1w-m{max_claim}", 1, max_claim, 1, 1),
        Spec(f"queue-8w-m{max_claim}", 8, max_claim, servers, 2, TARGET),
        # max=1: one job per round trip, so throughput shows the per-request latency bound.
        Spec("queue-8w-m1", 8, 1, servers, 2),
        # bigger batches: the per-request cost spread over 4x the jobs
        Spec(f"queue-8w-m{max_claim * 4}", 8, max_claim * 4, servers, 2, TARGET),
        Spec(f"queue-32w-m{max_claim}", 32, max_claim, servers, 2),
    ]


# --- workers (run in spawned client processes) ----------------------------------------------
def worker_process(spec: dict[str, Any], ready: Any, go: Any, out: Any) -> None:
    barrier_main(_worker_main, spec, ready, go, out)


async def _worker_main(spec: dict[str, Any], ready: Any, go: Any) -> dict[str, Any]:
    workers = spec["workers"]  # [(node, base_url)]
    topic, max_claim = spec["topic"], spec["max"]
    https = [RawHttp(url) for _, url in workers]
    claim_path = f"/v0/topics/{topic}/claim"
    ack_path = f"/v0/topics/{topic}/ack"
    claim_ms: list[float] = []
    ack_ms: list[float] = []
    claimed: list[int] = []
    acked: list[int] = []
    skipped: list[int] = []
    errors: list[str] = []
    counts = {"claims": 0, "acks": 0, "empty_claims": 0, "redeliveries": 0, "dry": 0}
    server_ms = 0.0
    try:
        # Open the connections before the window (a health check each), so it times requests.
        for h in https:
            await h.post("/v0/health", b"")
        ready.wait()
        go.wait()
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        deadline = t0 + spec["duration"]

        async def worker(k: int) -> None:
            nonlocal server_ms
            node, http = workers[k][0], https[k]
            claim_body = json.dumps({"node": node, "max": max_claim, "lease_ms": LEASE_MS}).encode()
            while time.perf_counter() < deadline:
                s = time.perf_counter()
                status, content = await http.post(claim_path, claim_body)
                claim_ms.append((time.perf_counter() - s) * 1000)
                counts["claims"] += 1
                if status != 200:
                    errors.append(f"claim {status} {content[:200]!r}")
                    await asyncio.sleep(0.01)
                    continue
                got = json.loads(content)
                server_ms += got.get("performance", {}).get("server_total_ms", 0.0)
                jobs = got["claimed"]
                if not jobs:
                    counts["empty_claims"] += 1
                    if got["ready"] == 0:  # nothing fresh left, and no lease can expire
                        counts["dry"] += 1
                        return
                    continue
                seqs = [j["$seq"] for j in jobs]
                claimed.extend(seqs)
                counts["redeliveries"] += sum(1 for j in jobs if j["deliveries"] > 1)
                body = json.dumps(
                    {"node": node, "seqs": seqs, "lease_ids": [j["lease_id"] for j in jobs]}
                ).encode()
                s = time.perf_counter()
                status, content = await http.post(ack_path, body)
                ack_ms.append((time.perf_counter() - s) * 1000)
                counts["acks"] += 1
                if status != 200:
                    errors.append(f"ack {status} {content[:200]!r}")
                    continue
                res = json.loads(content)
                server_ms += res.get("performance", {}).get("server_total_ms", 0.0)
                miss = set(res["skipped"])
                skipped.extend(miss)
                acked.extend(q for q in seqs if q not in miss)
                if res["acked"] != len(seqs) - len(miss):
                    errors.append(f"ack said {res['acked']} of {seqs} (skipped {sorted(miss)})")

        await asyncio.gather(*(worker(k) for k in range(len(workers))))
        elapsed = time.perf_counter() - t0
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
    finally:
        for h in https:
            await h.close()
    return {
        **counts,
        "elapsed_s": elapsed,
        "claim_ms": claim_ms,
        "ack_ms": ack_ms,
        "claimed": claimed,
        "acked": acked,
        "skipped": skipped,
        "errors": errors,
        "server_ms_total": server_ms,
        "cpu_s": (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime),
    }


# --- parent-side helpers --------------------------------------------------------------------
def _request(method: str, url: str, body: Mapping[str, Any] | None = None) -> dict[str, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        url, data=data, method=method, headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        out: dict[str, Any] = json.loads(r.read())
        return out


def make_queue(base_url: str, topic: str) -> None:
    _request("PUT", f"{base_url}/v0/topics/{topic}", {"type": "queue", "lease_ms": LEASE_MS})


def prefill(base_url: str, topic: str, jobs: int, job_bytes: int) -> list[int]:
    """Append `jobs` jobs (JSON data of ~job_bytes bytes each) in batches of 100."""
    pad = "x" * max(job_bytes - len('{"j":000000,"p":""}'), 0)

    async def go() -> list[int]:
        http = RawHttp(base_url)
        seqs: list[int] = []
        try:
            for i in range(0, jobs, LOAD_BATCH):
                n = min(LOAD_BATCH, jobs - i)
                records = [{"data": {"j": i + k, "p": pad}} for k in range(n)]
                body = json.dumps({"records": records}, separators=(",", ":")).encode()
                status, content = await http.post(f"/v0/topics/{topic}", body)
                if status >= 300:
                    raise RuntimeError(f"prefill append failed: {status} {content[:300]!r}")
                seqs += json.loads(content)["seqs"]
        finally:
            await http.close()
        return seqs

    return asyncio.run(go())


def remaining_jobs(base_url: str, topic: str) -> list[int]:
    """Seqs of the jobs still in the log (acked jobs are deleted from it)."""
    seqs: list[int] = []
    cur = 0
    while True:
        d = _request("POST", f"{base_url}/v0/topics/{topic}/diff", {"from_seq": cur, "limit": 1000})
        seqs += [r["$seq"] for r in d["records"]]
        nxt = int(d["next_from_seq"])
        if nxt <= cur or nxt >= int(d["head_seq"]):
            return seqs
        cur = nxt


def run_workers(parts: list[dict[str, Any]], begin: Callable[[], None]) -> list[dict[str, Any]]:
    """One process per part; begin() runs once all have their connections open."""
    return run_processes(worker_process, parts, begin, "worker")


def verify(
    produced: Sequence[int],
    parts: Sequence[Mapping[str, Any]],
    left: Sequence[int],
    q: Mapping[str, Any],
) -> dict[str, Any]:
    """Every job acked at most once, and each produced job either acked (and gone from the
    log) or still in the log, never both, never neither; nothing left in flight."""
    made = set(produced)
    acked = [s for p in parts for s in p["acked"]]
    claimed = [s for p in parts for s in p["claimed"]]
    acked_set, left_set = set(acked), set(left)
    facts = {
        "produced": len(made),
        "claimed": len(claimed),
        "acked": len(acked),
        "acked_twice": len(acked) - len(acked_set),
        "claimed_twice": len(claimed) - len(set(claimed)),
        "acked_not_produced": len(acked_set - made),
        "acked_but_still_in_log": len(acked_set & left_set),
        "lost": len(made - acked_set - left_set),
        "left_in_queue": len(left_set),
        "ack_skipped": sum(len(p["skipped"]) for p in parts),
        "redeliveries": sum(p["redeliveries"] for p in parts),
        "queue_ready_after": q.get("ready"),
        "queue_in_flight_after": q.get("in_flight"),
        "drained": not left_set,
    }
    facts["ok"] = (
        facts["acked_twice"]
        == facts["claimed_twice"]
        == facts["acked_not_produced"]
        == facts["acked_but_still_in_log"]
        == facts["lost"]
        == facts["ack_skipped"]
        == 0
        and facts["queue_in_flight_after"] == 0
        and facts["queue_ready_after"] == len(left_set)
    )
    facts["every_job_acked_exactly_once"] = facts["ok"] and facts["drained"]
    return facts


# --- one workload -----------------------------------------------------------------------------
def measure(emu: Emulators, spec: Spec, p: argparse.Namespace) -> dict[str, Any]:
    wl = Workload(
        name=spec.name,
        description=f"{spec.workers} worker{'s' if spec.workers > 1 else ''} loop claim "
        f"max={spec.max_claim} -> ack (with lease ids) on one queue pre-filled with "
        f"{p.jobs:,} jobs, {spec.servers} server process{'es' if spec.servers > 1 else ''}, "
        f"for {p.duration:g} s",
        op="POST /v0/topics/:q/claim or /ack (one request)",
        records_per_op=spec.max_claim,  # nominal; measured: summary["records_per_op"]
        record_bytes=p.job_bytes,
        clients=spec.workers,
        client_processes=spec.client_procs,
        duration_s=p.duration,
        target=spec.target,
        params={
            "workers": spec.workers,
            "max": spec.max_claim,
            "server_processes": spec.servers,
            "jobs_prefilled": p.jobs,
            "lease_ms": LEASE_MS,
        },
    )
    print(f"\n== {wl.name}: {wl.description}")
    names = ["server"] + [f"server-{chr(ord('b') + k)}" for k in range(spec.servers - 1)]
    runs: list[RunResult] = []
    facts: list[dict[str, Any]] = []
    with fresh_servers(emu, names) as srv:
        servers: list[BenchServer] = [srv[n] for n in names]
        counter = RemoteCallCounter([s.url for s in servers])
        pids = {**{n: s.pid for n, s in srv.items()}, **emu.pids()}
        for i in range(p.runs):
            topic = f"q-{uuid.uuid4().hex[:8]}"
            make_queue(servers[0].url, topic)
            produced = prefill(servers[0].url, topic, p.jobs, p.job_bytes)
            nodes = [(f"w{k}", servers[k % len(servers)].url) for k in range(spec.workers)]
            parts = [
                {
                    "workers": nodes[j :: spec.client_procs],
                    "topic": topic,
                    "max": spec.max_claim,
                    "duration": p.duration,
                }
                for j in range(spec.client_procs)
            ]
            cpu0: dict[str, float] = {}
            started: list[float] = []

            def begin(cpu0: dict[str, float] = cpu0, started: list[float] = started) -> None:
                counter.reset()
                cpu0.update({n: process_cpu_seconds(pid) for n, pid in pids.items()})
                cpu0["machine"] = machine_cpu_seconds()
                started.append(time.perf_counter())

            got = run_workers(parts, begin)
            # The timed window ends here: calls and CPU before the checks below.
            calls = counter.snapshot()
            window = time.perf_counter() - started[0]
            cpu = {n: process_cpu_seconds(pid) - cpu0[n] for n, pid in pids.items()}
            cpu["machine"] = machine_cpu_seconds() - cpu0["machine"]
            cpu["server"] = sum(cpu.pop(n) for n in names)  # both server processes
            cpu["clients"] = sum(g["cpu_s"] for g in got)
            left = remaining_jobs(servers[0].url, topic)
            q = _request("GET", f"{servers[0].url}/v0/topics/{topic}").get("queue", {})
            f = verify(produced, got, left, q)
            claim_ms = [x for g in got for x in g["claim_ms"]]
            ack_ms = [x for g in got for x in g["ack_ms"]]
            errors = [e for g in got for e in g["errors"]]
            elapsed = max(g["elapsed_s"] for g in got)
            f.update(
                {
                    "claims": sum(g["claims"] for g in got),
                    "acks": sum(g["acks"] for g in got),
                    "empty_claims": sum(g["empty_claims"] for g in got),
                    "workers_that_ran_dry": sum(g["dry"] for g in got),
                    "claim_p50_ms": percentile(claim_ms, 50),
                    "claim_p99_ms": percentile(claim_ms, 99),
                    "ack_p50_ms": percentile(ack_ms, 50),
                    "ack_p99_ms": percentile(ack_ms, 99),
                    "jobs_per_s": f["acked"] / elapsed if elapsed > 0 else 0.0,
                    "request_errors": len(errors),
                    "first_errors": errors[:3],
                }
            )
            facts.append(f)
            run = RunResult(
                ops=f["claims"] + f["acks"],
                records=f["acked"],
                elapsed_s=elapsed,
                latencies_ms=claim_ms + ack_ms,
                server_ms_total=sum(g["server_ms_total"] for g in got),
                errors=len(errors) + (0 if f["ok"] else 1),
                calls=calls,
                cpu_s=cpu,
                window_s=window,
            )
            runs.append(run)
            print(
                f"  {wl.name} run {i + 1}/{p.runs}: {f['acked']:,} jobs in {elapsed:.1f} s = "
                f"{f['jobs_per_s']:,.0f} jobs/s; claim p50/p99 {f['claim_p50_ms']:.1f}/"
                f"{f['claim_p99_ms']:.1f} ms, ack {f['ack_p50_ms']:.1f}/{f['ack_p99_ms']:.1f} "
                f"ms; {'correct' if f['ok'] else 'WRONG'} (lost {f['lost']}, acked twice "
                f"{f['acked_twice']}, left {f['left_in_queue']}, errors {len(errors)})"
            )
            if not f["ok"] or errors:
                print(f"  !! run {i + 1}: {f} {errors[:3]}", file=sys.stderr)
    summary = summarize(wl, runs, gsi_count=_gsi(servers[0]))
    summary["queue"] = _queue_summary(summary, facts)
    return summary


def _gsi(server: BenchServer) -> dict[str, int]:
    from bench.bench_v0 import _gsi as gsi
    from headwater.storage.schema import TABLES

    return gsi(server, TABLES)


def _queue_summary(
    summary: Mapping[str, Any], facts: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    jobs_per_op = summary["records_per_op"] or 1e-9
    per_job = {
        api: {k: v / jobs_per_op for k, v in f.items()}
        for api, f in summary["aws_calls_per_op"].items()
    }
    out: dict[str, Any] = {
        "jobs_per_s": median([f["jobs_per_s"] for f in facts]),
        "claim_p50_ms": median([f["claim_p50_ms"] for f in facts]),
        "claim_p99_ms": median([f["claim_p99_ms"] for f in facts]),
        "ack_p50_ms": median([f["ack_p50_ms"] for f in facts]),
        "ack_p99_ms": median([f["ack_p99_ms"] for f in facts]),
        "jobs_per_claim": median([f["acked"] / max(f["acks"], 1) for f in facts]),
        "aws_calls_per_job": per_job,
        "aws_calls_per_job_total": sum(f.get("calls", 0.0) for f in per_job.values()),
        "usd_per_million_jobs": summary["usd_per_million_events"],
        "correct": all(f["ok"] for f in facts),
        "ran_dry": any(f["workers_that_ran_dry"] for f in facts),
        "per_run": list(facts),
    }
    for k in (
        "produced",
        "acked",
        "acked_twice",
        "claimed_twice",
        "lost",
        "ack_skipped",
        "redeliveries",
        "request_errors",
    ):
        out[k] = sum(f[k] for f in facts)
    return out


# --- report -----------------------------------------------------------------------------------
def queue_report(summaries: Sequence[Mapping[str, Any]]) -> str:
    rows = []
    for s in summaries:
        q, t, w = s["queue"], s.get("target"), s["workload"]
        rows.append(
            [
                s["workload"]["name"],
                w["clients"],
                w["params"]["max"],
                w["params"]["server_processes"],
                f"{q['jobs_per_s']:,.0f}",
                f"{q['jobs_per_claim']:.1f}",
                f"{q['claim_p50_ms']:.1f}/{q['claim_p99_ms']:.1f}",
                f"{q['ack_p50_ms']:.1f}/{q['ack_p99_ms']:.1f}",
                f"{q['aws_calls_per_job_total']:.2f}",
                f"{q['usd_per_million_jobs']['usd_dynamodb']:.2f}",
                f"{'ok  ' if t['met'] else 'MISS'} {t['label']}" if t else "",
                f"{'yes' if q['correct'] else 'NO'} ({q['acked']:,} acked, {q['lost']} lost, "
                f"{q['acked_twice']} twice{', ran dry' if q['ran_dry'] else ''})",
            ]
        )
    out = [
        "Work queue: claim max=M -> ack (lease ids) per worker; jobs/s = jobs acked per second;",
        "latencies per request; $ DDB/M jobs at harness.PRICES (incl. the log delete on ack).",
        format_table(
            [
                "workload",
                "workers",
                "M",
                "srv",
                "jobs/s",
                "jobs/claim",
                "claim p50/p99 ms",
                "ack p50/p99 ms",
                "AWS calls/job",
                "$ DDB/M jobs",
                "target",
                "correct",
            ],
            rows,
        ),
        "",
        "AWS calls per job by API (errors = calls that failed, e.g. a transaction cancelled by "
        "a concurrent one):",
    ]
    crow = []
    for s in summaries:
        for api, f in sorted(s["queue"]["aws_calls_per_job"].items()):
            crow.append(
                [
                    s["workload"]["name"],
                    api.replace("DynamoDB.", "DDB."),
                    f"{f['calls']:.3f}",
                    f"{f.get('errors', 0.0):.3f}",
                    f"{f.get('items', 0.0):.2f}",
                    f"{f['wru']:.2f}",
                    f"{f['rru']:.2f}",
                ]
            )
    out.append(
        format_table(
            ["workload", "API", "calls/job", "errors/job", "items/job", "WRU", "RRU"], crow
        )
    )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny run: 1 run, the queue drains")
    ap.add_argument("--runs", type=int, default=None, help="runs per workload (default 3)")
    ap.add_argument("--duration", type=float, default=None, help="seconds per run (default 10)")
    ap.add_argument("--jobs", type=int, default=None, help="jobs pre-filled per run")
    ap.add_argument("--job-bytes", type=int, default=256, help="bytes of JSON data per job")
    ap.add_argument("--max", type=int, default=16, help="claim max for the batched workloads")
    ap.add_argument(
        "--servers", type=int, default=2, help="server processes for the 8/32-worker workloads"
    )
    ap.add_argument("--only", default="", help="comma-separated workload names to run")
    ap.add_argument("--out", default=None, help="results JSON (default bench/results/...)")
    p = ap.parse_args(argv)
    p.runs = p.runs or (1 if p.quick else 3)
    # --quick: a small queue that the workers drain well inside the (capped) window, so the
    # check covers every job; full: a queue large enough not to run dry in the window.
    p.duration = p.duration or (60.0 if p.quick else 10.0)
    p.jobs = p.jobs or (200 if p.quick else 15_000)
    only = {x for x in p.only.split(",") if x}
    out_path = Path(p.out or RESULTS / "latest-queue.json")
    every = specs(p.max, p.servers)
    todo = [s for s in every if not only or s.name in only]
    if only - {s.name for s in every}:
        ap.error(f"--only: unknown {sorted(only - {s.name for s in every})}")

    machine = machine_info()
    print(
        f"bench queue | backend moto | {machine['cpu_model']} x{machine['cores']} | Python "
        f"{machine['python']} | runs={p.runs} duration={p.duration:g}s jobs={p.jobs} "
        f"job_bytes={p.job_bytes} max={p.max} servers(8/32 workers)={p.servers} "
        f"lease_ms={LEASE_MS} | "
        f"load {machine.get('loadavg_1m')}"
    )
    summaries: list[dict[str, Any]] = []
    emu = Emulators("moto")
    t0 = time.perf_counter()
    try:
        for spec in todo:
            summaries.append(measure(emu, spec, p))
            print(f"   ({time.perf_counter() - t0:.0f} s so far)")
    finally:
        emu.stop()
    print("\n" + report(summaries, machine))
    print("\n" + queue_report(summaries))
    result = {
        **result_header("queue", argv, machine),
        "settings": {
            "backend": "moto",
            "runs": p.runs,
            "duration_s": p.duration,
            "jobs_prefilled_per_run": p.jobs,
            "job_bytes": p.job_bytes,
            "max": p.max,
            "server_processes_8_32_workers": p.servers,
            "lease_ms": LEASE_MS,
            "producers": "none during the window (queue pre-filled)",
        },
        "targets": {"queue-8w": {"jobs_per_s": TARGET.minimum}},
        "prices": PRICES,
        "workloads": summaries,
    }
    write_results(out_path, result)
    return result


if __name__ == "__main__":
    main()
