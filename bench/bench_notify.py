"""Benchmark notify: the aviso-compatible /api/v1 surface (issue 7).

    python -m bench.bench_notify [--quick] [--runs N] [--records N] [--out PATH] ...

Processes: the emulator (moto, as `make run` uses), the app served by uvicorn from
bench/server.py (AWS calls counted there) with bench/notification_schema.yaml, and the load
generator in this process (raw asyncio HTTP/1.1 and a hand-rolled SSE reader, so the client
costs little CPU on a 2-core box). Workloads:

- notify-c<C>: C concurrent clients POST /api/v1/notification (a 40-byte payload) for
  --duration s. Reported: notifications/s, latency p50/p99, AWS calls per notification.
- watch-latency: one POST /api/v1/watch stream (live, every notification of the event type);
  a publisher sends single notifications at --rate/s whose payload carries
  `time.monotonic_ns()` taken just before the POST is written; the watcher stamps each
  `live-notification` frame when its bytes are read. One machine-wide monotonic clock, so
  latency = arrival - send, across processes. Every notification is checked delivered once,
  in order.
- replay / replay-polygon: --records notifications of event type `area` (each with a random
  2°x2° polygon and a 40-byte payload) are stored once, in appends of 1,000 through
  `NotificationStore.publish_many` from this process, then sealed into S3 segments (the
  history a long replay reads). Each run starts a fresh server (empty caches: every block is
  read from S3) and times POST /api/v1/replay from_id=1 to `replay_completed`; -polygon adds a
  polygon filter (a quarter of the globe). The delivered count is checked against a
  brute-force shapely count over the stored polygons. One operation = one replay; records/s
  = stored notifications replayed (scanned) per second, the targets' measure: 20,000/s
  unfiltered, 5,000/s with the polygon. AWS calls are per replay.
  The replay settings (HEADWATER_REPLAY_BATCH_SIZE, HEADWATER_REPLAY_BATCH_DELAY_MS=0,
  HEADWATER_MAX_HISTORICAL_NOTIFICATIONS above the history) are printed with the results:
  aviso's defaults (batches of 100, 100 ms apart, 10,000 at most) pace a replay at 1,000/s by
  design, so throughput is measured with the pacing off.

Results go to bench/results/latest-notify.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.bench_v0 import REPO, RESULTS, BenchServer, Emulators, RawHttp, sse_stream
from bench.harness import (
    RemoteCallCounter,
    RunResult,
    Target,
    Workload,
    machine_info,
    report,
    result_header,
    run_workload,
    write_results,
)

SCHEMA = REPO / "bench" / "notification_schema.yaml"
NO_SEAL_ENV = {"HEADWATER_TIERING_INLINE": "0", "HEADWATER_TIERING_INTERVAL_MS": "0"}
SEAL_ENV = {
    "HEADWATER_SEAL_RECORDS": "4096",
    "HEADWATER_SEAL_AGE_MS": "0",
    "HEADWATER_SEAL_GRACE_MS": "0",
}
FILL_BATCH = 1000
# The polygon filter of replay-polygon: lat 0..80, lon -90..90 (about a quarter of the
# stored polygons intersect it). aviso's order: lat,lon pairs, closed.
FILTER_RING = [(0.0, -90.0), (0.0, 90.0), (80.0, 90.0), (80.0, -90.0), (0.0, -90.0)]
REPLAY_TARGET = 20_000.0
POLYGON_TARGET = 5_000.0


@dataclass
class Params:
    runs: int = 3
    notify_clients: int = 16
    duration: float = 8.0
    rate: float = 50.0
    watch_duration: float = 10.0
    records: int = 100_000
    replay_batch_size: int = 1000
    seed: int = 7


def ring_text(ring: list[tuple[float, float]]) -> str:
    return "(" + ",".join(f"{lat:g},{lon:g}" for lat, lon in ring) + ")"


def square(rng: random.Random) -> list[tuple[float, float]]:
    lat = round(rng.uniform(-80, 78), 2)
    lon = round(rng.uniform(-180, 178), 2)
    return [(lat, lon), (lat, lon + 2), (lat + 2, lon + 2), (lat + 2, lon), (lat, lon)]


# --- SSE over a raw socket --------------------------------------------------------------------
async def sse_post(base_url: str, path: str, body: bytes) -> AsyncIterator[tuple[list[bytes], int]]:
    """POST `body`, then yield (complete SSE frames, arrival monotonic ns) as chunks arrive."""
    hostport = base_url.split("://", 1)[1]
    request = (
        f"POST {path} HTTP/1.1\r\nHost: {hostport}\r\nContent-Type: application/json\r\n"
        f"Accept: text/event-stream\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    async for item in sse_stream(base_url, request):
        yield item


def frame_parts(frame: bytes) -> tuple[bytes, bytes]:
    event, _, rest = frame.partition(b"\n")
    return event.removeprefix(b"event: "), rest.removeprefix(b"data: ")


def note_body(tag: str, payload: dict[str, Any]) -> bytes:
    return json.dumps(
        {"event_type": "note", "identifier": {"run": tag}, "payload": payload}
    ).encode()


def runner(
    measure: Callable[[str, Params, Callable[[], None]], Coroutine[Any, Any, RunResult]],
    base_url: str,
    p: Params,
) -> Callable[[int, Callable[[], None]], RunResult]:
    """run_workload's `run_once` for an async measurement against one server."""

    def run_once(i: int, begin: Callable[[], None]) -> RunResult:
        return asyncio.run(measure(base_url, p, begin))

    return run_once


# --- notify throughput ---------------------------------------------------------------------


async def _notify(base_url: str, p: Params, begin: Callable[[], None]) -> RunResult:
    tag = uuid.uuid4().hex[:8]
    clients = [RawHttp(base_url) for _ in range(p.notify_clients)]
    lat: list[float] = []
    errors = 0
    # warm-up: one notification per connection (connections open, the log exists)
    for c in clients:
        status, body = await c.post("/api/v1/notification", note_body(tag, {"warm": True}))
        if status != 200:
            raise RuntimeError(f"notify warm-up: {status} {body[:300]!r}")
    begin()
    t0 = time.perf_counter()
    deadline = t0 + p.duration

    async def client(k: int) -> None:
        nonlocal errors
        n = 0
        while time.perf_counter() < deadline:
            body = note_body(tag, {"c": k, "n": n, "pad": "x" * 16})
            t = time.perf_counter()
            status, _ = await clients[k].post("/api/v1/notification", body)
            lat.append((time.perf_counter() - t) * 1000)
            errors += status != 200
            n += 1

    try:
        await asyncio.gather(*(client(k) for k in range(len(clients))))
    finally:
        elapsed = time.perf_counter() - t0
        await asyncio.gather(*(c.close() for c in clients))
    return RunResult(
        ops=len(lat), records=len(lat), elapsed_s=elapsed, latencies_ms=lat, errors=errors
    )


# --- watch delivery latency ------------------------------------------------------------------


async def _watch(base_url: str, p: Params, begin: Callable[[], None]) -> RunResult:
    tag = uuid.uuid4().hex[:8]
    n = int(p.rate * p.watch_duration)
    arrived: dict[int, float] = {}
    problems: list[str] = []
    established = asyncio.Event()
    done = asyncio.Event()
    body = json.dumps({"event_type": "note", "identifier": {"run": tag}}).encode()

    async def watcher() -> None:
        last = -1
        async for frames, now in sse_post(base_url, "/api/v1/watch", body):
            for f in frames:
                event, data = frame_parts(f)
                if event != b"live-notification":
                    if event not in (b"heartbeat",):
                        problems.append(f"{event!r}: {data[:200]!r}")
                    continue
                doc = json.loads(data)
                if doc.get("type") == "connection_established":
                    established.set()
                    continue
                payload = doc["data"]["payload"]
                i = payload["i"]
                if i in arrived:
                    problems.append(f"duplicate {i}")
                elif i < last:
                    problems.append(f"out of order {i} after {last}")
                last = i
                arrived[i] = (now - payload["t"]) / 1e6
            if len(arrived) >= n:
                done.set()
                return

    task = asyncio.create_task(watcher())
    await asyncio.wait_for(established.wait(), 30)
    http = RawHttp(base_url)
    begin()
    t0 = time.perf_counter()
    errors = 0
    try:
        for i in range(n):
            delay = t0 + i / p.rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            status, _ = await http.post(
                "/api/v1/notification", note_body(tag, {"i": i, "t": time.monotonic_ns()})
            )
            errors += status != 200
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), 30)
    finally:
        elapsed = time.perf_counter() - t0
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        await http.close()
    missing = n - len(arrived)
    if missing or problems:
        print(f"  watch-latency: {missing} missing, problems: {problems[:5]}")
    return RunResult(
        ops=len(arrived),
        records=len(arrived),
        elapsed_s=elapsed,
        latencies_ms=list(arrived.values()),
        errors=errors + missing + len(problems),
    )


# --- replay ----------------------------------------------------------------------------------
def fill(env: dict[str, str], p: Params) -> tuple[int, list[str]]:
    """Store p.records `area` notifications through the store and seal them into segments
    (this process; not timed). Returns (last seq, each notification's polygon text)."""
    from headwater.notify.store import NotificationStore, topic_of
    from headwater.services import Core
    from headwater.settings import Settings
    from headwater.storage.bootstrap import ensure_resources
    from headwater.storage.clients import AwsClients

    saved = dict(os.environ)
    os.environ.update({**env, **SEAL_ENV})
    try:
        settings = Settings.from_env()
        clients = AwsClients.create(settings)
        ensure_resources(settings, clients)  # tables and bucket (a server may not have run)
        core = Core.build(settings, clients)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    rng = random.Random(p.seed)
    store = NotificationStore(core.engine)
    polygons: list[str] = []

    async def load() -> int:
        last = 0
        for start in range(0, p.records, FILL_BATCH):
            items = []
            for k in range(start, min(start + FILL_BATCH, p.records)):
                ring = ring_text(square(rng))
                polygons.append(ring)
                ident = {"date": "20261122", "time": f"{(k % 24):02d}00", "polygon": ring}
                payload = b'{"location":"s3://bench/area/%09d.grib"}' % k
                items.append((f"area.20261122.{k % 24:02d}00", ident, payload))
            _, last = await store.publish_many("area", items)
        return last

    t0 = time.perf_counter()
    last = asyncio.run(load())
    loaded = time.perf_counter() - t0
    topic = topic_of("area")
    for _ in range(10_000):
        core.upkeep.run(topic)
        head = core.engine.heads.get(topic)
        if head is not None and head.sealed_through >= head.head_seq:
            break
    else:
        raise RuntimeError("the replay history never sealed")
    print(
        f"  filled {p.records:,} notifications in {loaded:.1f} s, sealed through "
        f"{head.sealed_through:,} in {time.perf_counter() - t0 - loaded:.1f} s"
    )
    core.engine.close()
    return last, polygons


def expected_polygon_matches(polygons: list[str]) -> int:
    """Brute force: how many stored polygons intersect the filter (shapely, lon/lat)."""
    from shapely.geometry import Polygon

    def poly(text: str) -> Polygon:
        nums = [float(x) for x in text.strip("()").split(",")]
        return Polygon([(nums[i + 1], nums[i]) for i in range(0, len(nums), 2)])

    region = poly(ring_text(FILTER_RING))
    return sum(1 for t in polygons if region.intersects(poly(t)))


def stop_server(holder: dict[str, Any]) -> None:
    server = holder.pop("server", None)
    if server is not None:
        server.stop()


def replay_runner(
    env: dict[str, str],
    holder: dict[str, Any],
    expect: int,
    polygon: bool,
) -> Callable[[int, Callable[[], None]], RunResult]:
    identifier = {"polygon": ring_text(FILTER_RING)} if polygon else {}
    body = json.dumps({"event_type": "area", "identifier": identifier, "from_id": "1"}).encode()

    def run_once(i: int, begin: Callable[[], None]) -> RunResult:
        # The previous run's server is stopped only now: its counters are read after its
        # run returns.
        stop_server(holder)
        server = holder["server"] = BenchServer("server", env).start()
        holder["counter"].base_urls = [server.url]
        holder["pids"]["server"] = server.pid
        return asyncio.run(_replay(server.url, body, expect, holder["records"], begin))

    return run_once


async def _replay(
    base_url: str, body: bytes, expect: int, scanned: int, begin: Callable[[], None]
) -> RunResult:
    begin()
    t0 = time.perf_counter()
    first_ms: float | None = None
    delivered = 0
    completed = False
    problems: list[str] = []
    async for frames, _ in sse_post(base_url, "/api/v1/replay", body):
        for f in frames:
            if f.startswith(b"event: replay\n"):
                if first_ms is None:
                    first_ms = (time.perf_counter() - t0) * 1000
                delivered += 1
            elif f.startswith(b"event: replay-control\n"):
                if b'"replay_completed"' in f:
                    completed = True
                elif b'"replay_started"' not in f:
                    problems.append(f[:200].decode(errors="replace"))
            elif f.startswith(b"event: connection-closing\n"):
                if b'"end_of_stream"' not in f:
                    problems.append(f[:200].decode(errors="replace"))
            elif not f.startswith(b"event: heartbeat"):
                problems.append(f[:200].decode(errors="replace"))
    elapsed = time.perf_counter() - t0
    errors = (delivered != expect) + (not completed) + len(problems)
    if errors:
        print(f"  replay: delivered {delivered} of {expect}, completed {completed}, {problems[:3]}")
    print(f"  replay: {delivered:,} delivered, {delivered / elapsed:,.0f}/s")
    return RunResult(
        ops=1,
        records=scanned,
        elapsed_s=elapsed,
        latencies_ms=[first_ms if first_ms is not None else elapsed * 1000],
        errors=errors,
    )


# --- main ------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short smoke run")
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--records", type=int, default=None, help="stored notifications to replay")
    ap.add_argument("--replay-batch-size", type=int, default=None)
    ap.add_argument("--only", default="", help="comma-separated: notify,watch,replay")
    ap.add_argument("--out", type=Path, default=RESULTS / "latest-notify.json")
    args = ap.parse_args(argv)
    p = Params()
    if args.quick:
        p = Params(runs=1, duration=2.0, watch_duration=3.0, records=5_000)
    if args.runs:
        p.runs = args.runs
    if args.records:
        p.records = args.records
    if args.replay_batch_size:
        p.replay_batch_size = args.replay_batch_size
    only = {x for x in args.only.split(",") if x}
    machine = machine_info()
    summaries: list[dict[str, Any]] = []
    emu = Emulators("moto")
    try:
        prefix = f"bench-{uuid.uuid4().hex[:6]}"
        env = {
            **emu.env(),
            **NO_SEAL_ENV,
            "HEADWATER_RESOURCE_PREFIX": prefix,
            "HEADWATER_NOTIFICATION_SCHEMA": str(SCHEMA),
            "HEADWATER_REPLAY_BATCH_SIZE": str(p.replay_batch_size),
            "HEADWATER_REPLAY_BATCH_DELAY_MS": "0",
            "HEADWATER_MAX_HISTORICAL_NOTIFICATIONS": str(max(p.records, 1) * 2),
        }
        pids: dict[str, int] = {"moto": emu.pids()["moto"]}
        if not only or only & {"notify", "watch"}:
            server = BenchServer("server", env).start()
            pids["server"] = server.pid
            counter = RemoteCallCounter([server.url])
            try:
                if not only or "notify" in only:
                    wl = Workload(
                        name=f"notify-c{p.notify_clients}",
                        description=f"{p.notify_clients} clients POST /api/v1/notification "
                        f"for {p.duration:g} s",
                        op="POST /api/v1/notification",
                        records_per_op=1,
                        record_bytes=40,
                        clients=p.notify_clients,
                        duration_s=p.duration,
                    )
                    summaries.append(
                        run_workload(
                            wl,
                            runner(_notify, server.url, p),
                            repeats=p.runs,
                            counter=counter,
                            cpu_pids=pids,
                        )
                    )
                if not only or "watch" in only:
                    wl = Workload(
                        name="watch-latency",
                        description=f"1 watch stream; single notifications at {p.rate:g}/s "
                        f"for {p.watch_duration:g} s; latency = send -> frame read",
                        op="one notification published and delivered",
                        records_per_op=1,
                        record_bytes=60,
                        clients=1,
                        duration_s=p.watch_duration,
                    )
                    summaries.append(
                        run_workload(
                            wl,
                            runner(_watch, server.url, p),
                            repeats=p.runs,
                            counter=counter,
                            cpu_pids=pids,
                        )
                    )
            finally:
                server.stop()
                pids.pop("server", None)
        replay_info: dict[str, Any] = {}
        if not only or "replay" in only:
            _, polygons = fill(env, p)
            expect_poly = expected_polygon_matches(polygons)
            replay_info = {
                "records": p.records,
                "polygon_matches": expect_poly,
                "replay_batch_size": p.replay_batch_size,
                "replay_batch_delay_ms": 0,
            }
            holder: dict[str, Any] = {
                "counter": RemoteCallCounter([]),
                "pids": pids,
                "records": p.records,
            }
            for polygon, target in ((False, REPLAY_TARGET), (True, POLYGON_TARGET)):
                name = "replay-polygon" if polygon else "replay"
                wl = Workload(
                    name=name,
                    description=f"POST /api/v1/replay from_id=1 over {p.records:,} sealed "
                    "notifications"
                    + (f", polygon filter ({expect_poly:,} match)" if polygon else "")
                    + "; fresh server per run; p50/p99 = time to the first replay frame",
                    op="one replay of the whole history (records = notifications scanned)",
                    records_per_op=p.records,
                    record_bytes=40,
                    clients=1,
                    target=Target("records_per_s", target, f">= {target:,.0f}/s"),
                    params={"batch_size": p.replay_batch_size},
                )
                try:
                    summaries.append(
                        run_workload(
                            wl,
                            replay_runner(
                                env, holder, expect_poly if polygon else p.records, polygon
                            ),
                            repeats=p.runs,
                            counter=holder["counter"],
                            cpu_pids=pids,
                        )
                    )
                finally:
                    stop_server(holder)
    finally:
        emu.stop()
    print()
    print(report(summaries, machine))
    if replay_info:
        print(f"\nreplay settings: {replay_info}")
    result = {
        **result_header("notify", argv, machine),
        "replay": replay_info,
        "workloads": summaries,
    }
    write_results(args.out, result)
    return result


if __name__ == "__main__":
    res = main()
    sys.exit(1 if any(s["errors"] for s in res["workloads"]) else 0)
