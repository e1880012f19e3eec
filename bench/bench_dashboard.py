"""Benchmark dashboard: the /api/v2 feed (issue 9): ingest -> sentiment_update latency,
ingest -> metrics, ingest throughput and the AWS calls behind them.

    python -m bench.bench_dashboard [--quick] [--runs N] [--items N] [--interval S]
                                    [--clients 1,10,50] [--duration S] [--out PATH]

Processes: the emulator (moto, as `make run` uses), two app processes A and B served by
uvicorn from bench/server.py (AWS calls counted there; tiering off, as in bench_flags;
dashboard settings at their local defaults: the feed polls the head every 200 ms,
metrics on change at most every 1 s), a third one M for the metrics workload, and the load
generator in this process (raw asyncio HTTP/1.1 and a hand-rolled SSE reader). The topic
`sentiment` is created once; one configuration (`X-User-ID: bench`, tickers [AAPL]).

- update-latency-<same|cross>-c<N>: N configuration streams
  (GET /api/v2/configurations/{id}/stream) on A (`same`: the process that ingests, woken
  at once by its own append) or on B (`cross`: B sees A's appends by polling the head).
  Each stream reads its first heartbeat and a warm-up item before the timed part. Then
  --items single-item POST /api/v2/sentiment to A, --interval apart (each measured
  alone). `time.monotonic_ns()` is taken just before each POST is written; each stream
  stamps the bytes of its `sentiment_update` when it reads them (one machine-wide clock),
  so latency = arrival - send, including the ingest itself (validation, the DynamoDB
  commit). p50/p99 are over every (stream, item) delivery; records/s = deliveries/s; one
  operation = one ingested item, so "AWS calls per operation" are per single-item ingest
  plus, on B, the feed's polling and reads in the window (both processes are counted).
  Checked, else an error: every stream receives every item exactly once, in order.
  Target: p50 <= 1 s (the issue).
- metrics-tick-c10: 10 metrics streams (GET /api/v2/stream) on M while A ingests one item
  every --interval / 2 for --duration: one operation = one metrics event (a tick) of one
  stream; latency = an item's POST sent -> the first metrics event whose total includes it
  (so it includes the 1 s minimum interval); AWS calls counted on M only: what the feed
  costs per tick (head polls + reading the new records), whatever the number of streams.
- ingest-b100: 4 connections (2 to A, 2 to B) POST /api/v2/sentiment with 100 items each,
  back to back, for --duration; no stream open. One operation = one batch; records = items.

Results go to bench/results/latest-dashboard.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.bench_v0 import RESULTS, BenchServer, Emulators, RawHttp, sse_stream
from bench.harness import (
    RemoteCallCounter,
    RunResult,
    Workload,
    machine_info,
    report,
    result_header,
    run_workload,
    write_results,
)

TOPIC = "sentiment"
USER = "bench"
TICKERS = ["AAPL", "MSFT", "GOOGL", "TSLA", "NVDA", "AMZN", "META", "BRK.B"]
LATENCY_P50_MS = 1000.0
INGEST_CONNECTIONS = 4
METRICS_STREAMS = 10
DASH_ENV = {
    "HEADWATER_TIERING_INLINE": "0",
    "HEADWATER_TIERING_INTERVAL_MS": "0",
    "HEADWATER_DASHBOARD_MAX_CONNECTIONS": "1000",
}


@dataclass
class Params:
    runs: int = 3
    items: int = 20
    interval_s: float = 0.4
    clients: list[int] = field(default_factory=lambda: [1, 10, 50])
    duration_s: float = 8.0
    seed: int = 9


# --- helpers -------------------------------------------------------------------------------
def item(source: str, rng: random.Random, ticker: str = "AAPL") -> dict[str, Any]:
    return {
        "ticker": ticker,
        "score": round(rng.uniform(-1, 1), 4),
        "label": rng.choice(["positive", "neutral", "negative"]),
        "confidence": round(rng.uniform(0, 1), 4),
        "source": source,
    }


def event_of(frame: bytes) -> tuple[bytes, bytes]:
    """(event type, data) of one SSE frame; (b"", b"") for `retry:` or a comment."""
    event = data = b""
    for line in frame.split(b"\n"):
        if line.startswith(b"event: "):
            event = line[7:]
        elif line.startswith(b"data: "):
            data = line[6:]
    return event, data


def stream_request(base_url: str, path: str) -> bytes:
    hostport = base_url.split("://", 1)[1].rstrip("/")
    return (
        f"GET {path} HTTP/1.1\r\nHost: {hostport}\r\nX-User-ID: {USER}\r\n"
        "Accept: text/event-stream\r\n\r\n"
    ).encode()


async def post_items(
    http: RawHttp, items: list[dict[str, Any]], stamp: list[int] | None = None
) -> None:
    status, body = await http.request(
        "POST", "/api/v2/sentiment", json.dumps(items).encode(), stamp
    )
    if status != 201:
        raise RuntimeError(f"POST /api/v2/sentiment: {status} {body[:300]!r}")


def setup(url: str) -> str:
    """Create the topic and the configuration; its id."""

    async def go() -> str:
        http = RawHttp(url, headers=f"X-User-ID: {USER}\r\n")
        try:
            status, body = await http.request("PUT", f"/v0/topics/{TOPIC}", b"{}")
            if status not in (200, 201):
                raise RuntimeError(f"PUT topic: {status} {body[:200]!r}")
            doc = json.dumps({"name": "bench", "tickers": ["AAPL"]}).encode()
            status, body = await http.request("POST", "/api/v2/configurations", doc)
            if status != 201:
                raise RuntimeError(f"POST configuration: {status} {body[:200]!r}")
            return str(json.loads(body)["config_id"])
        finally:
            await http.close()

    return asyncio.run(go())


# --- ingest -> sentiment_update ----------------------------------------------------------
@dataclass
class _Conn:
    got: list[tuple[str, int]] = field(default_factory=list)  # (source, arrival ns)
    heartbeat: bool = False
    failed: str | None = None


def latency_runner(
    ingest_url: str, stream_url: str, cid: str, n: int, p: Params, facts: list[dict[str, Any]]
) -> Callable[[int, Callable[[], None]], RunResult]:
    def run_once(i: int, begin: Callable[[], None]) -> RunResult:
        return asyncio.run(_latency(ingest_url, stream_url, cid, n, p, begin, facts, i))

    return run_once


async def _latency(
    ingest_url: str,
    stream_url: str,
    cid: str,
    n: int,
    p: Params,
    begin: Callable[[], None],
    facts: list[dict[str, Any]],
    run: int,
) -> RunResult:
    tag = f"r{uuid.uuid4().hex[:6]}"
    warm = f"{tag}-warm"
    names = [f"{tag}-{k}" for k in range(p.items)]
    conns = [_Conn() for _ in range(n)]
    warmed = asyncio.Event()
    done = asyncio.Event()
    counts = {"warm": 0, "done": 0}
    request = stream_request(stream_url, f"/api/v2/configurations/{cid}/stream")

    async def follow(c: _Conn) -> None:
        try:
            async for frames, now in sse_stream(stream_url, request):
                for f in frames:
                    event, data = event_of(f)
                    if event == b"heartbeat":
                        c.heartbeat = True
                    elif event == b"sentiment_update":
                        source = json.loads(data)["source"]
                        if source == warm:
                            counts["warm"] += 1
                            if counts["warm"] == n:
                                warmed.set()
                        elif source.startswith(tag):
                            c.got.append((source, now))
                            if len(c.got) == p.items:
                                counts["done"] += 1
                                if counts["done"] == n:
                                    done.set()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            c.failed = repr(exc)[:300]
            warmed.set()
            done.set()

    rng = random.Random(p.seed + run)
    tasks = [asyncio.create_task(follow(c)) for c in conns]
    http = RawHttp(ingest_url)
    sent: dict[str, int] = {}
    errors = 0
    try:
        deadline = time.monotonic() + 60
        while not all(c.heartbeat or c.failed for c in conns):
            if time.monotonic() > deadline:
                raise RuntimeError("streams did not start")
            await asyncio.sleep(0.05)
        await post_items(http, [item(warm, rng)])
        await asyncio.wait_for(warmed.wait(), 30)
        failed = [c.failed for c in conns if c.failed]
        if failed:
            raise RuntimeError(f"streams failed: {failed[:3]}")
        begin()
        t0 = time.perf_counter()
        for k, name in enumerate(names):
            delay = t0 + k * p.interval_s - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            stamp: list[int] = []
            try:
                await post_items(http, [item(name, rng)], stamp)
            except RuntimeError as exc:
                print(f"  {exc}")
                errors += 1
                continue
            sent[name] = stamp[0]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), 15)
        elapsed = time.perf_counter() - t0
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await http.close()
    lat: list[float] = []
    problems: list[str] = []
    expected = [x for x in names if x in sent]
    for k, c in enumerate(conns):
        if c.failed:
            problems.append(f"stream {k}: {c.failed}")
        order = [s for s, _ in c.got]
        if order != expected:
            problems.append(f"stream {k}: got {len(order)} of {len(expected)} (or out of order)")
        lat += [(now - sent[s]) / 1e6 for s, now in c.got if s in sent]
    facts.append(
        {
            "streams": n,
            "deliveries": len(lat),
            "expected": len(expected) * n,
            "problems": problems[:5],
        }
    )
    if problems:
        print(f"  update-latency: {len(problems)} problems, e.g. {problems[:3]}")
    return RunResult(
        ops=len(sent),
        records=len(lat),
        elapsed_s=elapsed,
        latencies_ms=lat,
        errors=errors + len(problems),
    )


def measure_latency(
    a: BenchServer,
    b: BenchServer,
    cid: str,
    p: Params,
    pids: dict[str, int],
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for where, stream_server in (("same", a), ("cross", b)):
        for n in p.clients:
            facts: list[dict[str, Any]] = []
            wl = Workload(
                name=f"update-latency-{where}-c{n}",
                description=f"{n} configuration stream(s) on "
                f"{'A, the ingesting process' if where == 'same' else 'B (A ingests: B polls)'}; "
                f"{p.items} single-item POST /api/v2/sentiment to A, "
                f"{p.interval_s * 1000:g} ms apart; latency = POST written -> "
                "sentiment_update read, over every delivery",
                op="POST /api/v2/sentiment (one item) delivered to every stream",
                records_per_op=n,
                record_bytes=len(json.dumps(item("r000000-00", random.Random(0)))),
                clients=n + 1,
                duration_s=p.items * p.interval_s,
                params={"streams": n, "where": where, "items": p.items, "interval_s": p.interval_s},
            )
            summary = run_workload(
                wl,
                latency_runner(a.url, stream_server.url, cid, n, p, facts),
                repeats=p.runs,
                counter=RemoteCallCounter([a.url, b.url]),
                cpu_pids={**pids, "clients": os.getpid()},
            )
            summary["latency_measures"] = (
                "POST written -> sentiment_update read by each stream (ms)"
            )
            summary["delivery"] = facts
            met = summary["p50_ms"] <= LATENCY_P50_MS and summary["errors"] == 0
            summary["target"] = {
                "metric": "p50_ms",
                "maximum": LATENCY_P50_MS,
                "label": f"p50 <= {LATENCY_P50_MS:g} ms",
                "met": bool(met),
            }
            out.append(summary)
    return out


# --- ingest -> metrics ---------------------------------------------------------------------
def metrics_runner(
    ingest_url: str, metrics_url: str, p: Params, facts: list[dict[str, Any]]
) -> Callable[[int, Callable[[], None]], RunResult]:
    def run_once(i: int, begin: Callable[[], None]) -> RunResult:
        return asyncio.run(_metrics(ingest_url, metrics_url, p, begin, facts, i))

    return run_once


async def _metrics(
    ingest_url: str,
    metrics_url: str,
    p: Params,
    begin: Callable[[], None],
    facts: list[dict[str, Any]],
    run: int,
) -> RunResult:
    streams: list[list[tuple[int, int]]] = [[] for _ in range(METRICS_STREAMS)]  # (total, ns)
    failures: list[str] = []
    request = stream_request(metrics_url, "/api/v2/stream")

    async def follow(k: int) -> None:
        try:
            async for frames, now in sse_stream(metrics_url, request):
                for f in frames:
                    event, data = event_of(f)
                    if event == b"metrics":
                        streams[k].append((int(json.loads(data)["total"]), now))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            failures.append(repr(exc)[:300])

    rng = random.Random(p.seed + 100 + run)
    tasks = [asyncio.create_task(follow(k)) for k in range(METRICS_STREAMS)]
    http = RawHttp(ingest_url)
    every = p.interval_s / 2
    stamps: list[int] = []  # stamps[j]: the POST that makes the total base + j + 1
    errors = 0
    try:
        deadline = time.monotonic() + 60
        while not all(streams) and not failures:
            if time.monotonic() > deadline:
                raise RuntimeError("metrics streams did not start")
            await asyncio.sleep(0.05)
        if failures:
            raise RuntimeError(f"metrics streams failed: {failures[:3]}")
        await asyncio.sleep(1.2)  # past the first event's minimum interval
        base = max(s[-1][0] for s in streams)
        begin()
        marks = [len(s) for s in streams]
        t0 = time.perf_counter()
        k = 0
        while time.perf_counter() - t0 < p.duration_s:
            delay = t0 + k * every - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            stamp: list[int] = []
            await post_items(http, [item(f"m-{k}", rng, rng.choice(TICKERS))], stamp)
            stamps.append(stamp[0])
            k += 1
        final = base + len(stamps)
        wait_until = time.monotonic() + 10
        while any(s[-1][0] < final for s in streams) and time.monotonic() < wait_until:
            await asyncio.sleep(0.05)
        elapsed = time.perf_counter() - t0
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await http.close()
    lat: list[float] = []
    ticks = 0
    for k, s in enumerate(streams):
        events = s[marks[k] :]
        ticks += len(events)
        if not events or events[-1][0] != final:
            errors += 1
        if any(later < earlier for (earlier, _), (later, _) in itertools.pairwise(events)):
            errors += 1
        covered = 0  # items (after base) already shown
        for total, now in events:
            while covered < min(total - base, len(stamps)):
                lat.append((now - stamps[covered]) / 1e6)
                covered += 1
    facts.append(
        {"items": len(stamps), "ticks_per_stream": ticks / METRICS_STREAMS, "errors": errors}
    )
    # one operation = one tick of one stream; AWS calls are the feed's (M), per stream-tick
    # they would fall with more streams: report them per tick of a single stream too
    return RunResult(
        ops=max(1, round(ticks / METRICS_STREAMS)),
        records=ticks,
        elapsed_s=elapsed,
        latencies_ms=lat,
        errors=errors,
    )


def measure_metrics(
    env: dict[str, str], a: BenchServer, p: Params, pids: dict[str, int]
) -> tuple[dict[str, Any], dict[str, Any]]:
    m = BenchServer("metrics", env).start()
    try:
        facts: list[dict[str, Any]] = []
        wl = Workload(
            name=f"metrics-tick-c{METRICS_STREAMS}",
            description=f"{METRICS_STREAMS} metrics streams on M while A ingests one item every "
            f"{p.interval_s * 500:g} ms for {p.duration_s:g} s; latency = POST written -> first "
            "metrics event counting it (includes the 1 s minimum interval)",
            op="one metrics tick (AWS calls: the feed of M per tick, all streams share it)",
            records_per_op=METRICS_STREAMS,
            record_bytes=0,
            clients=METRICS_STREAMS + 1,
            duration_s=p.duration_s,
            params={"streams": METRICS_STREAMS, "item_every_s": p.interval_s / 2},
        )
        summary = run_workload(
            wl,
            metrics_runner(a.url, m.url, p, facts),
            repeats=p.runs,
            counter=RemoteCallCounter([m.url]),
            cpu_pids={**pids, "server": m.pid, "clients": os.getpid()},
        )
        summary["latency_measures"] = "POST written -> first metrics event including it (ms)"
        summary["delivery"] = facts
        idle = asyncio.run(_idle_cost(m.url, min(p.duration_s, 5.0)))
    finally:
        m.stop()
    return summary, idle


async def _idle_cost(url: str, seconds: float) -> dict[str, Any]:
    """AWS calls per second of a feed with one metrics stream open and nothing ingested."""
    counter = RemoteCallCounter([url])
    request = stream_request(url, "/api/v2/stream")
    got: list[int] = []

    async def follow() -> None:
        async for frames, _ in sse_stream(url, request):
            got.extend(1 for f in frames if event_of(f)[0] == b"metrics")

    task = asyncio.create_task(follow())
    try:
        while not got:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
        counter.reset()
        await asyncio.sleep(seconds)
        snap = counter.snapshot()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    calls = {api: f["calls"] / seconds for api, f in snap.get("calls", {}).items()}
    return {"seconds": seconds, "aws_calls_per_s": calls, "total_per_s": sum(calls.values())}


# --- ingest throughput ---------------------------------------------------------------------
def ingest_runner(urls: list[str], p: Params) -> Callable[[int, Callable[[], None]], RunResult]:
    def run_once(i: int, begin: Callable[[], None]) -> RunResult:
        return asyncio.run(_ingest(urls, p, begin, i))

    return run_once


async def _ingest(urls: list[str], p: Params, begin: Callable[[], None], run: int) -> RunResult:
    rng = random.Random(p.seed + 200 + run)
    bodies = [
        json.dumps([item(f"t{c}-{j}", rng, rng.choice(TICKERS)) for j in range(100)]).encode()
        for c in range(INGEST_CONNECTIONS)
    ]
    conns = [RawHttp(urls[c % len(urls)]) for c in range(INGEST_CONNECTIONS)]
    lat: list[float] = []
    errors = 0
    ops = 0
    try:
        for c, http in enumerate(conns):  # warm-up: open the connections
            status, _ = await http.request("POST", "/api/v2/sentiment", bodies[c])
            if status != 201:
                raise RuntimeError(f"warm-up ingest: {status}")
        begin()
        t0 = time.perf_counter()
        end = t0 + p.duration_s

        async def loop(c: int) -> None:
            nonlocal errors, ops
            while time.perf_counter() < end:
                s = time.perf_counter()
                status, _ = await conns[c].request("POST", "/api/v2/sentiment", bodies[c])
                lat.append((time.perf_counter() - s) * 1000)
                if status == 201:
                    ops += 1
                else:
                    errors += 1

        await asyncio.gather(*(loop(c) for c in range(INGEST_CONNECTIONS)))
        elapsed = time.perf_counter() - t0
    finally:
        for http in conns:
            await http.close()
    return RunResult(ops=ops, records=ops * 100, elapsed_s=elapsed, latencies_ms=lat, errors=errors)


def measure_ingest(
    a: BenchServer, b: BenchServer, p: Params, pids: dict[str, int]
) -> dict[str, Any]:
    wl = Workload(
        name="ingest-b100",
        description=f"{INGEST_CONNECTIONS} connections (half to A, half to B) POST "
        f"/api/v2/sentiment with 100 items, back to back for {p.duration_s:g} s; no stream open",
        op="POST /api/v2/sentiment (100 items)",
        records_per_op=100,
        record_bytes=len(json.dumps(item("t0-00", random.Random(0)))),
        clients=INGEST_CONNECTIONS,
        duration_s=p.duration_s,
    )
    return run_workload(
        wl,
        ingest_runner([a.url, b.url], p),
        repeats=p.runs,
        counter=RemoteCallCounter([a.url, b.url]),
        cpu_pids={**pids, "clients": os.getpid()},
    )


# --- main ----------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short smoke run")
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--items", type=int, default=None, help="items per latency run")
    ap.add_argument("--interval", type=float, default=None, help="seconds between items")
    ap.add_argument("--clients", default="", help="stream counts, e.g. 1,10,50")
    ap.add_argument("--duration", type=float, default=None, help="seconds per ingest/metrics run")
    ap.add_argument("--out", type=Path, default=RESULTS / "latest-dashboard.json")
    args = ap.parse_args(argv)
    p = Params()
    if args.quick:
        p = Params(runs=1, items=8, clients=[1, 10], duration_s=3.0)
    if args.runs:
        p.runs = args.runs
    if args.items:
        p.items = args.items
    if args.interval:
        p.interval_s = args.interval
    if args.clients:
        p.clients = [int(x) for x in args.clients.split(",") if x]
    if args.duration:
        p.duration_s = args.duration
    machine = machine_info()
    summaries: list[dict[str, Any]] = []
    emu = Emulators("moto")
    idle: dict[str, Any] = {}
    try:
        env = {
            **emu.env(),
            **DASH_ENV,
            "HEADWATER_RESOURCE_PREFIX": f"bench-{uuid.uuid4().hex[:6]}",
        }
        pids: dict[str, int] = {"moto": emu.pids()["moto"]}
        a = BenchServer("a", env).start()
        try:
            b = BenchServer("b", env).start()
            try:
                pids.update({"server": a.pid, "server_b": b.pid})
                cid = setup(a.url)
                summaries += measure_latency(a, b, cid, p, pids)
                metrics, idle = measure_metrics(env, a, p, pids)
                summaries.append(metrics)
                summaries.append(measure_ingest(a, b, p, pids))
            finally:
                b.stop()
        finally:
            a.stop()
    finally:
        emu.stop()
    print()
    print(report(summaries, machine))
    print(
        f"\nidle feed (one metrics stream, nothing ingested): "
        f"{idle.get('total_per_s', 0.0):.2f} AWS calls/s "
        f"{json.dumps({k: round(v, 2) for k, v in idle.get('aws_calls_per_s', {}).items()})}"
    )
    for s in summaries:
        t = s.get("target")
        if t:
            print(
                f"  {s['workload']['name']}: p50 {s['p50_ms']:.1f} ms, p99 {s['p99_ms']:.1f} ms "
                f"({'met' if t['met'] else 'MISSED'}: {t['label']}), errors {s['errors']}"
            )
    result = {
        **result_header("dashboard", argv, machine),
        "idle_feed": idle,
        "workloads": summaries,
    }
    write_results(args.out, result)
    return result


if __name__ == "__main__":
    res = main()
    sys.exit(1 if any(s["errors"] for s in res["workloads"]) else 0)
