"""Benchmark stalled: a normal client's latency while hostile clients stall the server.

    python -m bench.bench_stalled [--quick] [--runs N] [--duration S] [--stalled N] ...

Processes: the emulator (moto), the app served by uvicorn from bench/server.py (through
headwater.http.serving's protocol, as `make run`; AWS calls counted there), the hostile
clients in one spawned process (plain sockets, nothing read, ever), and the probe and the
writer in this process (the raw HTTP/1.1 client of bench_v0). Every measurement gets fresh
tables and a fresh server process, started with the default limits.

Measurements (the probe: GET /v0/topics/probe, 20 per second, one keep-alive connection;
one operation = one probe request):
- idle: the probe alone.
- writer: the probe while a writer appends --rate records/s (~100 B each; batches of 100,
  alternately to the /v0 topic and the /v1 JSON stream the stalled readers follow).
- stalled: the writer, plus --stalled SSE clients that never read (half GET
  /v0/watch/:wid, half GET /v1/stream/:name?offset=-1&live=sse of a stream with history)
  and --loris slowloris sockets (a request head sent a byte a second, never finished;
  each reopened as soon as the server closes it), for --duration s. Reported: the probe's
  p50/p99 and their ratio to idle (target: p99 <= 4x idle), how many stalled streams the
  server closed (a reset or FIN seen in TCP_INFO by a client that never reads) and how
  long after opening, slowloris sockets closed and how fast, the stream slots the server
  held, and the server's RSS before, at its peak and at the end.
Results go to bench/results/latest-stalled.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing as mp
import os
import socket
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.bench_v0 import RESULTS, Emulators, RawHttp, fresh_servers, read_body
from bench.harness import (
    RemoteCallCounter,
    RunResult,
    Workload,
    machine_info,
    median,
    percentile,
    process_cpu_seconds,
    report,
    result_header,
    run_workload,
    write_results,
)

TOPIC = "fire"
STREAM = "dfire"
PROBE = "probe"
PROBE_HZ = 20.0
BATCH = 100
HISTORY = 10_000  # records (~1 MB) in the /v1 stream before its offset=-1 readers open
RATIO_TARGET = 4.0
TCP_ESTABLISHED = 1


@dataclass(frozen=True)
class Params:
    runs: int
    duration: float
    idle_duration: float
    rate: float
    stalled: int
    loris: int
    frame_cache_mb: int | None


# --- hostile clients (a spawned process; plain sockets, never read) -----------------------
def _tcp_state(sock: socket.socket) -> int:
    try:
        return int(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0])
    except OSError:
        return 0


def _connect(host: str, port: int) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=10)
    sock.setblocking(False)
    return sock


def hostile_main(spec: dict[str, Any], ready: Any, go: Any, out: Any) -> None:
    try:
        out.put(_hostile(spec, ready, go))
    except BaseException as exc:
        ready.abort()
        go.abort()
        out.put({"error": repr(exc)})
        raise


def _hostile(spec: dict[str, Any], ready: Any, go: Any) -> dict[str, Any]:
    host, port = spec["host"], spec["port"]
    streams: list[tuple[socket.socket, float]] = []
    for path in spec["paths"]:
        sock = _connect(host, port)
        sock.sendall(
            f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n\r\n".encode()
        )
        streams.append((sock, time.monotonic()))
    loris_head = f"GET /v0/health HTTP/1.1\r\nHost: {host}\r\n".encode()
    loris: list[tuple[socket.socket, float]] = []
    for _ in range(spec["loris"]):
        sock = _connect(host, port)
        sock.sendall(loris_head)
        loris.append((sock, time.monotonic()))
    ready.wait(timeout=120)
    go.wait(timeout=300)  # the parent waits for the server to take every stream first
    end = time.monotonic() + spec["duration"]
    stream_closed: list[float] = []  # seconds after opening, per stream closed by the server
    closed_idx: set[int] = set()
    loris_closed: list[float] = []
    next_byte = time.monotonic() + 1.0
    while time.monotonic() < end:
        now = time.monotonic()
        for i, (sock, opened) in enumerate(streams):
            if i not in closed_idx and _tcp_state(sock) != TCP_ESTABLISHED:
                closed_idx.add(i)
                stream_closed.append(now - opened)
        tick = now >= next_byte
        for i, (sock, opened) in enumerate(loris):
            gone = _tcp_state(sock) != TCP_ESTABLISHED
            if not gone and tick:
                try:
                    sock.send(b"X")  # one more byte of a header name
                except OSError:
                    gone = True
            if gone:
                loris_closed.append(now - opened)
                sock.close()
                fresh = _connect(host, port)
                fresh.sendall(loris_head)
                loris[i] = (fresh, time.monotonic())
        if tick:
            next_byte = now + 1.0
        time.sleep(0.2)
    for sock, _ in streams + loris:
        sock.close()
    return {"stream_closed_s": stream_closed, "loris_closed_s": loris_closed}


# --- probe, writer, sampling (this process) -----------------------------------------------
def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _gauge(base: str, name: str) -> float:
    req = urllib.request.Request(f"{base}/v0/metrics", headers={"Accept": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return float(json.loads(r.read())["gauges"][name])


def _records(start: int, n: int) -> list[dict[str, Any]]:
    return [{"i": start + k, "pad": "x" * 80} for k in range(n)]


async def _probe(
    base: str, path: str, until: float, latencies: list[float], errors: list[int]
) -> None:
    http = RawHttp(base)
    try:
        while time.monotonic() < until:
            t0 = time.perf_counter()
            status, _ = await http.request("GET", path)
            latencies.append((time.perf_counter() - t0) * 1000)
            if status != 200:
                errors.append(status)
            await asyncio.sleep(max(0.0, 1 / PROBE_HZ - (time.perf_counter() - t0)))
    finally:
        await http.close()


class _Writer(RawHttp):
    """RawHttp that also takes bodiless 204s (a /v1 append answers 204 No Content)."""

    async def request(
        self, method: str, path: str, body: bytes = b"", stamp: list[int] | None = None
    ) -> tuple[int, bytes]:
        if self._w is None:
            self._r, self._w = await asyncio.open_connection(self.host, self.port)
        assert self._r is not None
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self.hostport}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        self._w.writelines([head, body])
        await self._w.drain()
        raw = await self._r.readuntil(b"\r\n\r\n")
        status = int(raw[9:12])
        if status in (204, 304):
            return status, b""
        return status, await read_body(self._r, raw)


async def _writer(base: str, rate: float, until: float, written: list[int]) -> None:
    http = _Writer(base)
    period = BATCH / rate
    n = 0
    nxt = time.monotonic()
    try:
        while time.monotonic() < until:
            recs = _records(n, BATCH)
            if (n // BATCH) % 2 == 0:
                body = json.dumps({"records": [{"data": r} for r in recs]}).encode()
                status, _ = await http.post(f"/v0/topics/{TOPIC}", body)
            else:
                status, _ = await http.post(f"/v1/stream/{STREAM}", json.dumps(recs).encode())
            if status < 300:
                n += BATCH
            nxt += period
            await asyncio.sleep(max(0.0, nxt - time.monotonic()))
    finally:
        written.append(n)
        await http.close()


async def _sample_rss(pid: int, until: float, out: list[float]) -> None:
    while time.monotonic() < until:
        out.append(_rss_mb(pid))
        await asyncio.sleep(0.5)


def _setup(base: str, watchers: int) -> list[str]:
    """Topics, the /v1 stream with history, and the watch sessions (wids)."""

    def call(method: str, path: str, body: bytes | None, ctype: str = "application/json") -> Any:
        req = urllib.request.Request(
            f"{base}{path}", data=body, method=method, headers={"Content-Type": ctype}
        )
        with urllib.request.urlopen(req, timeout=60) as r:
            raw = r.read()
            return json.loads(raw) if raw else None

    for t in (TOPIC, PROBE):
        call("PUT", f"/v0/topics/{t}", b"{}")
    call("PUT", f"/v1/stream/{STREAM}", b"")
    for i in range(0, HISTORY, 500):
        call("POST", f"/v1/stream/{STREAM}", json.dumps(_records(i, 500)).encode())
    body = json.dumps({"topics": {TOPIC: {}}}).encode()
    return [call("POST", "/v0/watch", body)["wid"] for _ in range(watchers)]


def _phase_runner(p: Params, emu: Emulators, phase: str, extras: list[dict[str, Any]]) -> Any:
    def run_once(i: int, begin: Callable[[], None]) -> RunResult:
        with fresh_servers(emu, ["server"]) as servers:
            srv = servers["server"]
            base = srv.url
            n_watch = p.stalled // 2 if phase == "stalled" else 0
            wids = _setup(base, n_watch)
            counter = RemoteCallCounter([base])
            rss_before = _rss_mb(srv.pid)
            duration = p.duration if phase == "stalled" else p.idle_duration
            hostile: dict[str, Any] = {}
            ctx = mp.get_context("spawn")
            proc = None
            if phase == "stalled":
                paths = [f"/v0/watch/{w}" for w in wids] + [
                    f"/v1/stream/{STREAM}?offset=-1&live=sse"
                ] * (p.stalled - n_watch)
                spec = {
                    "host": "127.0.0.1",
                    "port": srv.port,
                    "paths": paths,
                    "loris": p.loris,
                    "duration": duration,
                }
                ready, go, out = ctx.Barrier(2), ctx.Barrier(2), ctx.Queue()
                proc = ctx.Process(target=hostile_main, args=(spec, ready, go, out))
                proc.start()
                ready.wait(timeout=180)
                # the window starts once the server holds every stream (its slot taken), or
                # once the count has not moved for 5 s (a server whose streams take none)
                deadline = time.monotonic() + 120
                still = time.monotonic()
                held = -1.0
                while time.monotonic() < deadline and time.monotonic() - still < 5:
                    now_held = _gauge(base, "topics_sse_connections")
                    if now_held != held:
                        held, still = now_held, time.monotonic()
                    if held >= p.stalled:
                        break
                    time.sleep(0.5)
                hostile["slots_held"] = held
            counter.reset()
            begin()
            cpu0 = process_cpu_seconds(srv.pid)
            if proc is not None:
                go.wait(timeout=30)
            latencies: list[float] = []
            health: list[float] = []
            errors: list[int] = []
            written: list[int] = []
            rss: list[float] = []
            started = time.monotonic()
            until = started + duration

            async def main() -> None:
                jobs = [
                    _probe(base, f"/v0/topics/{PROBE}", until, latencies, errors),
                    _probe(base, "/v0/health", until, health, errors),
                    _sample_rss(srv.pid, until, rss),
                ]
                if phase != "idle":
                    jobs.append(_writer(base, p.rate, until, written))
                await asyncio.gather(*jobs)

            asyncio.run(main())
            elapsed = time.monotonic() - started
            cpu = process_cpu_seconds(srv.pid) - cpu0
            calls = counter.snapshot()
            if proc is not None:
                got = out.get(timeout=120)
                proc.join(timeout=30)
                if "error" in got:
                    raise RuntimeError(f"hostile clients failed: {got['error']}")
                hostile.update(got)
                time.sleep(1.0)
                hostile["slots_after"] = _gauge(base, "topics_sse_connections")
            extras.append(
                {
                    "rss_mb": {
                        "before": rss_before,
                        "peak": max(rss, default=rss_before),
                        "end": rss[-1] if rss else rss_before,
                    },
                    "health_ms": {
                        "p50": percentile(health, 50),
                        "p99": percentile(health, 99),
                        "n": len(health),
                    },
                    "records_written": sum(written),
                    "records_per_s_written": sum(written) / elapsed,
                    **hostile,
                }
            )
            result = RunResult(
                ops=len(latencies),
                records=len(latencies),
                elapsed_s=elapsed,
                latencies_ms=latencies,
                errors=len(errors),
                calls=calls,
                cpu_s={"server": cpu},
            )
            return result

    return run_once


def _stalled_summary(extras: list[dict[str, Any]], p: Params) -> dict[str, Any]:
    closed = [e.get("stream_closed_s", []) for e in extras]
    loris = [e.get("loris_closed_s", []) for e in extras]
    return {
        "stalled_streams": p.stalled,
        "slots_held": median([e.get("slots_held", 0.0) for e in extras]),
        "slots_after": median([e.get("slots_after", 0.0) for e in extras]),
        "streams_closed": median([len(c) for c in closed]),
        "streams_closed_within_45s": median([sum(1 for x in c if x <= 45) for c in closed]),
        "streams_closed_after_s": {
            "p50": median([percentile(c, 50) for c in closed if c]),
            "max": median([max(c) for c in closed if c]),
        },
        "loris_sockets": p.loris,
        "loris_closed": median([len(c) for c in loris]),
        "loris_closed_after_s": {
            "p50": median([percentile(c, 50) for c in loris if c]),
            "max": median([max(c) for c in loris if c]),
        },
        "rss_mb": {k: median([e["rss_mb"][k] for e in extras]) for k in ("before", "peak", "end")},
        "records_per_s_written": median([e["records_per_s_written"] for e in extras]),
        "per_run": [_brief(e) for e in extras],
    }


def _brief(extra: dict[str, Any]) -> dict[str, Any]:
    """One run's extras with its close times summarised (count, p50, max), not listed."""
    out = {k: v for k, v in extra.items() if not k.endswith("_closed_s")}
    for key in ("stream_closed_s", "loris_closed_s"):
        xs = extra.get(key, [])
        out[key] = {"n": len(xs), "p50": percentile(xs, 50), "max": max(xs, default=math.nan)}
    return out


def run(p: Params, out_path: Path, argv: list[str] | None) -> dict[str, Any]:
    machine = machine_info()
    emu = Emulators("moto")
    summaries: list[dict[str, Any]] = []
    try:
        for phase in ("idle", "writer", "stalled"):
            extras: list[dict[str, Any]] = []
            wl = Workload(
                name=phase,
                description={
                    "idle": "the probe alone",
                    "writer": f"the probe while a writer appends {p.rate:g} records/s",
                    "stalled": f"the probe, the writer, {p.stalled} never-reading SSE clients "
                    f"({p.stalled // 2} /v0/watch, {p.stalled - p.stalled // 2} /v1 live=sse) "
                    f"and {p.loris} slowloris sockets",
                }[phase],
                op=f"GET /v0/topics/:t ({PROBE_HZ:g}/s, one keep-alive connection)",
                records_per_op=1,
                record_bytes=0,
                clients=1,
                duration_s=p.duration if phase == "stalled" else p.idle_duration,
            )
            print(f"\n== {phase}: {wl.description}")
            runner = _phase_runner(p, emu, phase, extras)
            # the server is fresh each run: the runner samples its CPU and AWS calls itself
            s = run_workload(wl, runner, repeats=p.runs, cpu_pids={"moto": emu.pids()["moto"]})
            s["phase"] = _phase_extras(extras)
            if phase == "stalled":
                s["stalled"] = _stalled_summary(extras, p)
            summaries.append(s)
    finally:
        emu.stop()
    idle, loaded = summaries[0], summaries[2]
    ratio = loaded["p99_ms"] / idle["p99_ms"] if idle["p99_ms"] else float("nan")
    h_idle, h_loaded = idle["phase"]["health_p99_ms"], loaded["phase"]["health_p99_ms"]
    verdict = {
        "p99_ratio_stalled_to_idle": ratio,
        "p50_ratio_stalled_to_idle": loaded["p50_ms"] / idle["p50_ms"],
        "health_p99_ratio_stalled_to_idle": h_loaded / h_idle,
        "health_met": h_loaded / h_idle <= RATIO_TARGET,
        "target": f"p99 <= {RATIO_TARGET:g}x idle",
        "met": ratio <= RATIO_TARGET,
    }
    loaded["target"] = {
        "metric": "p99_ratio",
        "minimum": RATIO_TARGET,
        "label": verdict["target"],
        "met": verdict["met"],
    }
    print()
    print(report(summaries, machine))
    st = loaded["stalled"]
    for s in summaries:
        ph = s["phase"]
        print(
            f"{s['workload']['name']:8} GET /v0/health p50/p99 {ph['health_p50_ms']:.1f}/"
            f"{ph['health_p99_ms']:.1f} ms; writer {ph['records_per_s_written']:,.0f} rec/s; "
            f"RSS {ph['rss_mb']['before']:.0f} -> peak {ph['rss_mb']['peak']:.0f} MB"
        )
    print(
        f"\nstalled: p99 {loaded['p99_ms']:.1f} ms vs idle {idle['p99_ms']:.1f} ms = "
        f"{ratio:.2f}x ({'met' if verdict['met'] else 'MISSED'}: {verdict['target']}); "
        f"streams closed {st['streams_closed']:.0f}/{p.stalled} "
        f"(p50 {st['streams_closed_after_s']['p50']:.1f} s, max "
        f"{st['streams_closed_after_s']['max']:.1f} s after opening); slots held "
        f"{st['slots_held']:.0f} -> {st['slots_after']:.0f}; slowloris closed "
        f"{st['loris_closed']:.0f} (p50 {st['loris_closed_after_s']['p50']:.1f} s); RSS "
        f"{st['rss_mb']['before']:.0f} -> peak {st['rss_mb']['peak']:.0f} -> "
        f"{st['rss_mb']['end']:.0f} MB"
    )
    result = {
        **result_header("stalled", argv, machine),
        "params": p.__dict__,
        "verdict": verdict,
        "workloads": summaries,
    }
    write_results(out_path, result)
    return result


def _phase_extras(extras: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "health_p50_ms": median([e["health_ms"]["p50"] for e in extras]),
        "health_p99_ms": median([e["health_ms"]["p99"] for e in extras]),
        "rss_mb": {k: median([e["rss_mb"][k] for e in extras]) for k in ("before", "peak", "end")},
        "records_per_s_written": median([e["records_per_s_written"] for e in extras]),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short smoke run")
    ap.add_argument("--runs", type=int, default=None, help="runs per measurement (default 3)")
    ap.add_argument("--duration", type=float, default=None, help="seconds of the stalled run")
    ap.add_argument("--idle-duration", type=float, default=None, help="seconds of idle/writer")
    ap.add_argument("--rate", type=float, default=None, help="writer records/s (800)")
    ap.add_argument("--stalled", type=int, default=None, help="never-reading SSE clients (200)")
    ap.add_argument("--loris", type=int, default=None, help="slowloris sockets (200)")
    ap.add_argument(
        "--slow-consumer-ms",
        type=int,
        default=None,
        help="HEADWATER_SLOW_CONSUMER_TIMEOUT_MS of the server (default: the server's, 30000)",
    )
    ap.add_argument(
        "--header-timeout-ms",
        type=int,
        default=None,
        help="HEADWATER_HEADER_TIMEOUT_MS of the server (default: the server's, 10000)",
    )
    ap.add_argument(
        "--frame-cache-mb",
        type=int,
        default=None,
        help="HEADWATER_FRAME_CACHE_BYTES of the server in MiB (default: the server's). "
        "With the cache on, RSS grows with what the writer appends, not only with the "
        "connections; with it off, every delivery reads the emulator, which then dominates",
    )
    ap.add_argument("--out", default=None, help="results JSON (default bench/results/...)")
    args = ap.parse_args(argv)
    if args.frame_cache_mb is not None:
        os.environ["HEADWATER_FRAME_CACHE_BYTES"] = str(args.frame_cache_mb << 20)
    # The server processes inherit this process's environment (bench_v0.BenchServer).
    if args.slow_consumer_ms is not None:
        os.environ["HEADWATER_SLOW_CONSUMER_TIMEOUT_MS"] = str(args.slow_consumer_ms)
    if args.header_timeout_ms is not None:
        os.environ["HEADWATER_HEADER_TIMEOUT_MS"] = str(args.header_timeout_ms)
    q = args.quick
    p = Params(
        runs=args.runs or (1 if q else 3),
        duration=args.duration or (10.0 if q else 60.0),
        idle_duration=args.idle_duration or (3.0 if q else 15.0),
        rate=args.rate or 800.0,
        stalled=200 if args.stalled is None else args.stalled,
        loris=200 if args.loris is None else args.loris,
        frame_cache_mb=args.frame_cache_mb,
    )
    return run(p, Path(args.out or RESULTS / "latest-stalled.json"), argv)


if __name__ == "__main__":
    main()
