"""Benchmark soak: does one server process stay flat for a long run of mixed load?

    python -m bench.bench_soak [--minutes 30] [--quick] [--idle-sse 1000] [--stalled 200]
                               [--trace N]

Processes: the emulator (moto; --backend ddblocal puts DynamoDB on DynamoDB Local, which
does not slow down as its tables grow as moto does), the app served by uvicorn from
bench/server.py (as `make run`; AWS calls counted there), the idle and stalled SSE clients
in one spawned process (plain sockets), and the load in this process (bench_v0's raw
HTTP/1.1 client).

Steps, on fresh tables and a fresh server process:
1. idle connections: --idle-sse SSE streams that read everything but get nothing (half
   /v1 live SSE on idle streams, half /v0 watch sessions of an idle topic). Reported: the
   server's RSS before and after, per connection (target: <= 64 KB each).
2. the soak, --minutes long, the idle connections still open: --writers clients appending
   single 1 KB records back to back to --topics /v0 topics, --readers clients paging each
   topic with diff (limit 100; 0.5 s pause when caught up), --watchers SSE watch sessions
   (reading every event), and one Durable Streams writer (1 KB JSON messages, back to back)
   with a long-poll reader following it. Sampled every --sample-s: the server's RSS and
   CPU, the emulator's RSS and CPU, the server's memory gauges (/v0/metrics: what each
   budgeted cache and buffer holds). Reported per minute: appends, append p50/p99, server
   and emulator CPU ms per append (to tell our slowing from the emulator's), RSS.
   Targets: RSS grows <= 10% from the end of minute 5 to the end; the last minute's append
   p99 <= 1.2x the second minute's.
3. stalled connections, the load still running: --stalled SSE streams that never read
   (half /v0 watch sessions of the busy topics, half /v1 live SSE of the Durable Streams
   stream from its start). RSS is sampled each second for --stalled-s (less than the
   server's slow-consumer timeout, 30 s, which then closes them); per stalled connection
   = (peak - before) / N, and what it holds = (RSS after malloc_trim(0) - before) / N (the
   allocator keeps what a catch-up's peak freed; before is taken after a trim too). Target:
   <= its send budget (HEADWATER_STREAM_BUFFER_BYTES + HEADWATER_SOCKET_BUFFER_BYTES,
   64 + 64 KB by default) + 64 KB.

--trace N starts the server with tracemalloc (N frames) and prints where the Python memory
it holds at the end was allocated (slow: for finding a leak, not for the figures).
Results go to bench/results/latest-soak.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing as mp
import os
import select
import socket
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.bench_v0 import RESULTS, Emulators, RawHttp, fresh_servers, make_body, sse_stream
from bench.harness import (
    PRICES,
    RemoteCallCounter,
    cost_per_op,
    machine_info,
    per_op_calls,
    percentile,
    process_cpu_seconds,
    result_header,
    write_results,
)

DS_STREAM = "soak-ds"
IDLE_TOPIC = "soak-idle"
IDLE_STREAMS = 10
KB = 1024
MB = 1024 * 1024
IDLE_TARGET_KB = 64
GROWTH_TARGET = 0.10
P99_RATIO_TARGET = 1.2
ITEM_SIZES = 20_000  # items whose sizes the server's call counter remembers (see run)


@dataclass(frozen=True)
class Params:
    minutes: float
    writers: int = 8
    topics: int = 4
    readers: int = 4
    watchers: int = 20
    idle_sse: int = 1000
    stalled: int = 200
    stalled_s: float = 20.0
    sample_s: float = 10.0
    trace: int = 0
    backend: str = "moto"  # DynamoDB on moto, or on DynamoDB Local ("ddblocal"; S3 on moto)
    env: tuple[tuple[str, str], ...] = ()  # extra server settings (--env K=V)


@dataclass
class Minute:
    appends: int = 0
    append_ms: list[float] = field(default_factory=list)
    errors: int = 0
    diff_pages: int = 0
    sse_events: int = 0
    ds_appends: int = 0
    ds_polls: int = 0


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _call(base: str, method: str, path: str, body: bytes | None = None, ctype: str = "") -> Any:
    headers = {"Content-Type": ctype or "application/json", "Accept": "application/json"}
    req = urllib.request.Request(f"{base}{path}", data=body, method=method, headers=headers)
    with urllib.request.urlopen(req, timeout=60) as r:
        raw = r.read()
        return json.loads(raw) if raw and raw[:1] in b"{[" else None


def _gauges(base: str) -> dict[str, float]:
    got = _call(base, "GET", "/v0/metrics")
    return {k: v for k, v in got["gauges"].items() if k.startswith("headwater_memory")}


def _watch(base: str, topic: str) -> str:
    body = json.dumps({"topics": {topic: {}}}).encode()
    return str(_call(base, "POST", "/v0/watch", body)["wid"])


# --- idle and stalled SSE clients (a spawned process; plain sockets) ---------------------
def sockets_main(spec: dict[str, Any], conn: Any) -> None:
    """Open spec["idle"] paths and read them; on "stall", open spec["stalled"] paths and
    never read them; on "stop", close everything and report."""
    host, port = spec["host"], spec["port"]

    def open_stream(path: str) -> socket.socket:
        s = socket.create_connection((host, port))
        s.sendall(
            f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n\r\n".encode()
        )
        return s

    idle = [open_stream(p) for p in spec["idle"]]
    for s in idle:
        s.setblocking(False)
    conn.send("open")
    stalled: list[socket.socket] = []
    idle_bytes = 0
    idle_closed = 0
    live = set(idle)
    while True:
        if conn.poll(0):
            cmd = conn.recv()
            if cmd == "stall":
                stalled = [open_stream(p) for p in spec["stalled"]]
                conn.send("stalled")
            elif cmd == "stop":
                break
        readable, _, _ = select.select(list(live), [], [], 0.2) if live else ([], [], [])
        for s in readable:
            try:
                data = s.recv(1 << 16)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                live.discard(s)
                idle_closed += 1
            idle_bytes += len(data)
        if not live:
            time.sleep(0.2)
    for s in idle + stalled:
        s.close()
    conn.send({"idle_bytes": idle_bytes, "idle_closed_by_server": idle_closed})


# --- the load (this process) ---------------------------------------------------------------
class Load:
    def __init__(self, base: str, p: Params, t0: float) -> None:
        self.base = base
        self.p = p
        self.t0 = t0
        self.minutes: dict[int, Minute] = {}
        self.stop = False

    def minute(self) -> Minute:
        m = int((time.monotonic() - self.t0) // 60)
        return self.minutes.setdefault(m, Minute())

    async def writer(self, i: int) -> None:
        http = RawHttp(self.base)
        path = f"/v0/topics/soak{i % self.p.topics}"
        body = make_body(1, i)
        try:
            while not self.stop:
                s = time.perf_counter()
                status, _ = await http.post(path, body)
                ms = (time.perf_counter() - s) * 1000
                m = self.minute()
                if status >= 300:
                    m.errors += 1
                    await asyncio.sleep(0.05 if status == 429 else 0.5)
                    continue
                m.appends += 1
                m.append_ms.append(ms)
        finally:
            await http.close()

    async def reader(self, i: int) -> None:
        http = RawHttp(self.base, limit=1 << 24)
        path = f"/v0/topics/soak{i % self.p.topics}/diff"
        cur = 0
        try:
            while not self.stop:
                body = json.dumps({"from_seq": cur, "limit": 100}).encode()
                status, content = await http.post(path, body)
                m = self.minute()
                if status >= 300:
                    m.errors += 1
                    await asyncio.sleep(0.5)
                    continue
                m.diff_pages += 1
                nxt = int(json.loads(content).get("next_from_seq", cur))
                if nxt <= cur:
                    await asyncio.sleep(0.5)
                cur = max(cur, nxt)
        finally:
            await http.close()

    async def watcher(self, wid: str) -> None:
        req = (
            f"GET /v0/watch/{wid} HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n"
        ).encode()
        while not self.stop:
            try:
                async for frames, _ in sse_stream(self.base, req):
                    self.minute().sse_events += sum(1 for f in frames if b"data:" in f)
                    if self.stop:
                        return
            except (OSError, RuntimeError, asyncio.IncompleteReadError):
                self.minute().errors += 1
                await asyncio.sleep(0.5)

    async def ds_writer(self) -> None:
        http = RawHttp(self.base)
        body = json.dumps([{"i": 0, "p": "x" * 1000}]).encode()
        try:
            while not self.stop:
                status, _ = await http.post(f"/v1/stream/{DS_STREAM}", body)
                m = self.minute()
                if status >= 300:
                    m.errors += 1
                    await asyncio.sleep(0.05 if status == 429 else 0.5)
                else:
                    m.ds_appends += 1
        finally:
            await http.close()

    async def ds_reader(self) -> None:
        http = RawHttp(self.base, limit=1 << 24)
        offset = "-1"
        try:
            while not self.stop:
                heads: list[bytes] = []
                status, _ = await http.request(
                    "GET", f"/v1/stream/{DS_STREAM}?offset={offset}&live=long-poll", heads=heads
                )
                m = self.minute()
                if status not in (200, 204):
                    m.errors += 1
                    await asyncio.sleep(0.5)
                    continue
                m.ds_polls += 1
                for line in heads[0].split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"stream-next-offset":
                        offset = value.strip().decode()
        finally:
            await http.close()


async def _sampler(
    base: str, pids: dict[str, int], t0: float, until_s: float, every_s: float, out: list[Any]
) -> None:
    while (now := time.monotonic()) - t0 <= until_s:
        sample = {
            "t_s": round(now - t0, 1),
            "rss_kb": {n: _rss_kb(pid) for n, pid in pids.items()},
            "cpu_s": {n: round(process_cpu_seconds(pid), 3) for n, pid in pids.items()},
        }
        try:
            sample["gauges"] = await asyncio.to_thread(_gauges, base)
            sample["heap"] = await asyncio.to_thread(_call, base, "GET", "/_bench/heap")
        except OSError as exc:
            sample["gauges_error"] = repr(exc)
        out.append(sample)
        await asyncio.sleep(max(0.0, every_s - (time.monotonic() - now)))


async def _soak(base: str, p: Params, pids: dict[str, int], wids: list[str]) -> dict[str, Any]:
    t0 = time.monotonic()
    load = Load(base, p, t0)
    samples: list[Any] = []
    tasks = [asyncio.create_task(load.writer(i)) for i in range(p.writers)]
    tasks += [asyncio.create_task(load.reader(i)) for i in range(p.readers)]
    tasks += [asyncio.create_task(load.watcher(w)) for w in wids]
    tasks += [asyncio.create_task(load.ds_writer()), asyncio.create_task(load.ds_reader())]
    sampler = asyncio.create_task(_sampler(base, pids, t0, p.minutes * 60, p.sample_s, samples))
    await sampler
    return {"load": load, "tasks": tasks, "samples": samples, "t0": t0}


def _per_minute(load: Load, samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for m in sorted(load.minutes):
        mm = load.minutes[m]
        inside = [s for s in samples if m * 60 <= s["t_s"] <= (m + 1) * 60]
        row: dict[str, Any] = {
            "minute": m + 1,
            "appends": mm.appends,
            "append_p50_ms": round(percentile(mm.append_ms, 50), 1) if mm.append_ms else None,
            "append_p99_ms": round(percentile(mm.append_ms, 99), 1) if mm.append_ms else None,
            "errors": mm.errors,
            "diff_pages": mm.diff_pages,
            "sse_events": mm.sse_events,
            "ds_appends": mm.ds_appends,
            "ds_polls": mm.ds_polls,
        }
        if len(inside) >= 2 and mm.appends:
            a, b = inside[0], inside[-1]
            ops = mm.appends + mm.ds_appends
            for name in a["cpu_s"]:
                row[f"{name}_cpu_ms_per_append"] = round(
                    (b["cpu_s"][name] - a["cpu_s"][name])
                    * 1000
                    / ops
                    * 60
                    / max(b["t_s"] - a["t_s"], 1e-9),
                    2,
                )
        emulators = [n for n in (inside[-1]["rss_kb"] if inside else {}) if n != "server"]
        if f"{emulators[0] if emulators else ''}_cpu_ms_per_append" in row:
            row["emulator_cpu_ms_per_append"] = round(
                sum(row[f"{n}_cpu_ms_per_append"] for n in emulators), 2
            )
        if inside:
            row["server_rss_mb"] = round(inside[-1]["rss_kb"]["server"] / KB, 1)
            row["emulator_rss_mb"] = round(sum(inside[-1]["rss_kb"][n] for n in emulators) / KB, 1)
        rows.append(row)
    return rows


def _pooled_p99(load: Load, minutes: int) -> dict[str, float | None]:
    """Append p99 of three minutes pooled: minutes 2-4, minutes 6-8 and the last three. One
    minute's p99 is its ~40 slowest appends and moves by 1.5x from minute to minute at steady
    load (a seal, a catch-up), so a trend shows better in three minutes pooled. Minutes 6-8
    are the first after minute 5 (the RSS target's start): by then, at the soak's load, the
    topics seal and trim in the background, which minute 2 has not begun."""

    def p99(ms: list[int]) -> float | None:
        got = [x for m in ms if m in load.minutes for x in load.minutes[m].append_ms]
        return round(percentile(got, 99), 1) if got else None

    early, steady = p99([1, 2, 3]), p99([5, 6, 7]) if minutes >= 11 else None
    late = p99([minutes - 3, minutes - 2, minutes - 1])
    return {
        "minutes_2_4_ms": early,
        "minutes_6_8_ms": steady,
        "last_3_minutes_ms": late,
        "ratio": round(late / early, 3) if early and late else None,
        "steady_ratio": round(late / steady, 3) if steady and late else None,
    }


def _floor(samples: list[dict[str, Any]], lo_s: float, hi_s: float) -> int:
    """The lowest server RSS sampled in [lo_s, hi_s] (the nearest sample if none is)."""
    low = _floor_sample(samples, lo_s, hi_s) or _at(samples, hi_s)
    return int(low["rss_kb"]["server"])


def _floor_sample(samples: list[dict[str, Any]], lo_s: float, hi_s: float) -> Any:
    """The sample with the lowest server RSS in [lo_s, hi_s] (None when there is none)."""
    inside = [x for x in samples if lo_s <= x["t_s"] <= hi_s]
    return min(inside, key=lambda x: x["rss_kb"]["server"]) if inside else None


def _at(samples: list[dict[str, Any]], t_s: float) -> dict[str, Any]:
    return min(samples, key=lambda s: abs(s["t_s"] - t_s))


def run(p: Params, out_path: Path, argv: list[str] | None) -> dict[str, Any]:
    machine = machine_info()
    emu = Emulators(p.backend)
    ctx = mp.get_context("spawn")
    # The call counter in the server (bench/server.py) remembers the size of each item it
    # sees, to bill Updates and Deletes: every appended frame is one, so over a soak it is the
    # process's largest growing structure (~400 B an item: +14 MB in 5 minutes at 80
    # appends/s). Bounded here, the RSS measured is the server's own; the items it bills
    # (heads, quotas, producer state) are written all the time and stay in it.
    server_env = {"HEADWATER_BENCH_ITEM_SIZES": str(ITEM_SIZES), **dict(p.env)}
    if p.trace:
        server_env["HEADWATER_BENCH_TRACEMALLOC"] = str(p.trace)
    stream_budget = int(os.environ.get("HEADWATER_STREAM_BUFFER_BYTES", 64 * KB))
    socket_budget = int(os.environ.get("HEADWATER_SOCKET_BUFFER_BYTES", 64 * KB))
    try:
        with fresh_servers(emu, ["server"], server_env) as servers:
            srv = servers["server"]
            base = srv.url
            pids = {"server": srv.pid, **emu.pids()}
            counter = RemoteCallCounter([base])
            for t in range(p.topics):
                _call(base, "PUT", f"/v0/topics/soak{t}", b"{}")
            _call(base, "PUT", f"/v0/topics/{IDLE_TOPIC}", b"{}")
            for s in [DS_STREAM, *(f"soak-idle-{k}" for k in range(IDLE_STREAMS))]:
                _call(base, "PUT", f"/v1/stream/{s}", b"", "application/json")
            wids = [_watch(base, f"soak{i % p.topics}") for i in range(p.watchers)]
            n_idle_watch = p.idle_sse // 2
            idle_paths = [f"/v0/watch/{_watch(base, IDLE_TOPIC)}" for _ in range(n_idle_watch)]
            idle_paths += [
                f"/v1/stream/soak-idle-{k % IDLE_STREAMS}?offset=now&live=sse"
                for k in range(p.idle_sse - n_idle_watch)
            ]
            n_stall_watch = p.stalled // 2
            stalled_paths = [
                f"/v0/watch/{_watch(base, f'soak{i % p.topics}')}" for i in range(n_stall_watch)
            ]
            stalled_paths += [
                f"/v1/stream/{DS_STREAM}?offset=-1&live=sse"
                for _ in range(p.stalled - n_stall_watch)
            ]
            time.sleep(2.0)
            rss_before_idle = _rss_kb(srv.pid)
            parent, child = ctx.Pipe()
            host, port = "127.0.0.1", srv.port
            spec = {"host": host, "port": port, "idle": idle_paths, "stalled": stalled_paths}
            proc = ctx.Process(target=sockets_main, args=(spec, child))
            proc.start()
            try:
                assert parent.poll(120) and parent.recv() == "open"
                _wait_connections(base, p.idle_sse)
                settled_s = _wait_settled(base)
                rss_after_idle = _rss_kb(srv.pid)
                idle_kb = (rss_after_idle - rss_before_idle) / max(p.idle_sse, 1)
                print(
                    f"idle SSE: {p.idle_sse} connections, server RSS {rss_before_idle / KB:.1f}"
                    f" -> {rss_after_idle / KB:.1f} MB, {idle_kb:.1f} KB each (settled in "
                    f"{settled_s} s)"
                )
                _retry(counter.reset)
                print(f"soak: {p.minutes:g} min of mixed load ...", flush=True)
                got = asyncio.run(_soak_and_stall(base, p, pids, wids, parent))
                calls = _retry(counter.snapshot)
                parent.send("stop")
                sockets_report = parent.recv() if parent.poll(60) else {}
            finally:
                proc.join(timeout=30)
                if proc.is_alive():
                    proc.terminate()
            memory_top = None
            if p.trace:
                memory_top = _call(base, "GET", "/_bench/memory?top=30")
    finally:
        emu.stop()
    load: Load = got["load"]
    samples = got["samples"]
    rows = _per_minute(load, samples)
    return _report(
        p,
        argv,
        machine,
        out_path,
        rows=rows,
        p99_pooled=_pooled_p99(load, math.ceil(p.minutes)),
        samples=samples,
        stall=got["stall"],
        client_failures=got["client_failures"],
        calls=calls,
        idle={
            "connections": p.idle_sse,
            "rss_before_mb": rss_before_idle / KB,
            "rss_after_mb": rss_after_idle / KB,
            "kb_per_connection": idle_kb,
            "settled_s": settled_s,
            **sockets_report,
        },
        budget_kb=(stream_budget + socket_budget) / KB,
        memory_top=memory_top,
    )


def _wait_settled(base: str, timeout_s: float = 300.0) -> float:
    """Seconds until a storage read (GET of the idle topic) answers within 200 ms three times
    in a row: the streams just opened have made their first reads (the emulator serves one
    request at a time, so 1,000 streams' first reads queue for a while)."""
    t0 = time.monotonic()
    fast = 0
    while time.monotonic() - t0 < timeout_s and fast < 3:
        s = time.monotonic()
        try:
            _call(base, "GET", f"/v0/topics/{IDLE_TOPIC}")
            fast = fast + 1 if time.monotonic() - s < 0.2 else 0
        except OSError:
            fast = 0
        time.sleep(0.5)
    return round(time.monotonic() - t0, 1)


def _retry(fn: Any, attempts: int = 5) -> Any:
    for i in range(attempts):
        try:
            return fn()
        except OSError:
            if i == attempts - 1:
                raise
            time.sleep(2.0)
    return None


def _wait_connections(base: str, n: int, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    seen = 0.0
    while time.monotonic() < deadline:
        try:
            got = _call(base, "GET", "/v0/metrics")
        except OSError:  # busy with the streams' first reads: ask again
            continue
        seen = got["gauges"]["topics_sse_connections"]
        if seen >= n:
            return
        time.sleep(0.5)
    raise RuntimeError(f"only {seen:.0f} of {n} idle SSE connections were taken")


async def _soak_and_stall(
    base: str, p: Params, pids: dict[str, int], wids: list[str], pipe: Any
) -> dict[str, Any]:
    got = await _soak(base, p, pids, wids)
    load: Load = got["load"]
    stall: dict[str, Any] = {"connections": p.stalled}
    if p.stalled:
        await asyncio.to_thread(_call, base, "POST", "/_bench/trim", b"")  # the same baseline
        await asyncio.sleep(0.5)
        before = _rss_kb(pids["server"])
        if p.trace:
            await asyncio.to_thread(_call, base, "POST", "/_bench/memory", b"")
        pipe.send("stall")
        await asyncio.to_thread(pipe.poll, 120)
        pipe.recv()
        t0 = time.monotonic()
        peak = before
        series = []
        while time.monotonic() - t0 < p.stalled_s:
            await asyncio.sleep(1.0)
            rss = _rss_kb(pids["server"])
            series.append(round(rss / KB, 1))
            peak = max(peak, rss)
        stall.update(
            {
                "seconds": p.stalled_s,
                "rss_before_mb": before / KB,
                "rss_peak_mb": peak / KB,
                "rss_mb_each_second": series,
                "kb_per_connection": (peak - before) / p.stalled,
            }
        )
        # What the stalled connections hold, apart from what the allocator kept from the
        # catch-up's peak: RSS after malloc_trim(0), the connections still open and stalled.
        await asyncio.to_thread(_call, base, "POST", "/_bench/trim", b"")
        await asyncio.sleep(0.5)
        held = _rss_kb(pids["server"])
        stall["rss_after_trim_mb"] = held / KB
        stall["held_kb_per_connection"] = (held - before) / p.stalled
        if p.trace:  # where the memory the stalled connections hold went, while they do
            stall["memory_top"] = await asyncio.to_thread(
                _call, base, "GET", "/_bench/memory?top=30&since_mark=1"
            )
        print(
            f"stalled SSE: {p.stalled} connections, server RSS {before / KB:.1f} -> peak "
            f"{peak / KB:.1f} MB, {stall['kb_per_connection']:.1f} KB each at the peak; "
            f"{stall['held_kb_per_connection']:.1f} KB each held (RSS after malloc_trim "
            f"{held / KB:.1f} MB)"
        )
    load.stop = True
    for t in got["tasks"]:
        t.cancel()
    ended = await asyncio.gather(*got["tasks"], return_exceptions=True)
    # a client that died of an exception stopped loading the server: say so, never hide it
    got["client_failures"] = [
        repr(e) for e in ended if isinstance(e, BaseException) and not _cancelled(e)
    ]
    if got["client_failures"]:
        print(f"load clients that failed: {got['client_failures']}")
    got["stall"] = stall
    return got


def _cancelled(e: BaseException) -> bool:
    return isinstance(e, asyncio.CancelledError)


def _report(
    p: Params,
    argv: list[str] | None,
    machine: dict[str, Any],
    out_path: Path,
    *,
    rows: list[dict[str, Any]],
    p99_pooled: dict[str, float | None],
    samples: list[dict[str, Any]],
    stall: dict[str, Any],
    calls: dict[str, Any],
    idle: dict[str, Any],
    budget_kb: float,
    memory_top: Any,
    client_failures: list[str],
) -> dict[str, Any]:
    full = [r for r in rows if r["minute"] <= max(1, math.ceil(p.minutes))]
    total_appends = sum(r["appends"] + r["ds_appends"] for r in full)
    print(
        f"\nminute  appends  p50 ms  p99 ms  errors  server ms/append  emulator ms/append  "
        f"server RSS MB  emulator RSS MB ({p.backend})"
    )
    for r in full:
        print(
            f"{r['minute']:>6}  {r['appends']:>7}  {r['append_p50_ms'] or 0:>6}  "
            f"{r['append_p99_ms'] or 0:>6}  {r['errors']:>6}  "
            f"{r.get('server_cpu_ms_per_append', 0):>16}  "
            f"{r.get('emulator_cpu_ms_per_append', 0):>18}"
            f"  {r.get('server_rss_mb', 0):>13}  {r.get('emulator_rss_mb', 0):>15}"
        )
    five = min(5 * 60.0, p.minutes * 60 / 2)
    rss_5 = _at(samples, five)["rss_kb"]["server"]
    rss_end = samples[-1]["rss_kb"]["server"]
    growth_sampled = (rss_end - rss_5) / rss_5
    # Growth is measured floor to floor: the lowest sample of the minute ending at `five` and
    # of the last minute. One sample can land on a transient peak (a segment's encode, a
    # catch-up: +10-15 MB for a few seconds until the next malloc_trim) that is not growth.
    floor_5 = _floor(samples, five - 60, five)
    floor_end = _floor(samples, samples[-1]["t_s"] - 60, samples[-1]["t_s"])
    growth = (floor_end - floor_5) / floor_5
    second = next((r for r in full if r["minute"] == 2), None)
    last = full[-1] if full else None
    p99_ratio = (
        last["append_p99_ms"] / second["append_p99_ms"]
        if second and last and second["append_p99_ms"] and last["append_p99_ms"]
        else None
    )
    # The frame cache fills to its budget over minutes at this load (it is bounded, not a
    # leak): RSS growth from when it is full tells a leak from a budget being filled.
    full_at = next(
        (
            x["t_s"]
            for x in samples
            if x.get("gauges", {}).get("headwater_memory_frame_cache_bytes", 0)
            >= 0.95 * x.get("gauges", {}).get("headwater_memory_frame_cache_budget_bytes", 1 << 60)
        ),
        None,
    )
    rss_full = _floor(samples, max(five, full_at) - 60, max(five, full_at)) if full_at else None
    growth_full = (floor_end - rss_full) / rss_full if rss_full else None
    emu_ratio = (
        last["emulator_cpu_ms_per_append"] / second["emulator_cpu_ms_per_append"]
        if second
        and last
        and second.get("emulator_cpu_ms_per_append")
        and last.get("emulator_cpu_ms_per_append")
        else None
    )
    ops = max(total_appends, 1)
    server_cpu = samples[-1]["cpu_s"]["server"] - samples[0]["cpu_s"]["server"]
    cost = cost_per_op(calls, ops)
    verdict = {
        "rss_growth_after_minute_5": growth,
        "rss_floor_mb": {"minute_5": floor_5 / KB, "last_minute": floor_end / KB},
        "rss_growth_met": growth <= GROWTH_TARGET,
        "rss_growth_sampled": growth_sampled,  # one sample at each end (peaks included)
        "frame_cache_full_at_s": full_at,
        "rss_growth_after_frame_cache_full": growth_full,
        "idle_kb_per_connection": idle["kb_per_connection"],
        "idle_met": idle["kb_per_connection"] <= IDLE_TARGET_KB,
        "stalled_kb_per_connection": stall.get("kb_per_connection"),
        "stalled_target_kb": budget_kb + 64,
        "stalled_held_kb_per_connection": stall.get("held_kb_per_connection"),
        "stalled_met": (
            stall["kb_per_connection"] <= budget_kb + 64 if "kb_per_connection" in stall else None
        ),
        "p99_last_to_second_minute": p99_ratio,
        "p99_met": p99_ratio is not None and p99_ratio <= P99_RATIO_TARGET,
        "p99_pooled": p99_pooled,
        # the emulator's own slowing over the run (its CPU per append, last/second minute)
        "emulator_cpu_last_to_second_minute": emu_ratio,
    }
    print(
        f"\nRSS floor {floor_5 / KB:.1f} MB in minute {five / 60:g} -> {floor_end / KB:.1f} MB"
        f" in the last ({growth:+.1%}; target <= +{GROWTH_TARGET:.0%}; one sample each: "
        f"{rss_5 / KB:.1f} -> {rss_end / KB:.1f} MB, {growth_sampled:+.1%}); idle SSE "
        f"{idle['kb_per_connection']:.1f} KB each (<= {IDLE_TARGET_KB}); stalled "
        f"{stall.get('kb_per_connection', float('nan')):.1f} KB each (<= {budget_kb + 64:g}); "
        f"append p99 last/second minute {p99_ratio if p99_ratio is None else round(p99_ratio, 2)}"
        f" (<= {P99_RATIO_TARGET})"
    )
    heap_rows = [
        (label, _floor_sample(samples, lo, hi))
        for label, lo, hi in (
            (f"minute {five / 60:g}", five - 60, five),
            ("last minute", samples[-1]["t_s"] - 60, samples[-1]["t_s"]),
        )
    ]
    for label, smp in heap_rows:
        if smp is not None and (h := smp.get("heap")):
            g, pm = h.get("glibc", {}), h.get("pymalloc", {})
            print(
                f"where the RSS is, {label} floor ({smp['rss_kb']['server'] / KB:.1f} MB): "
                f"glibc heap {g.get('heap_bytes', 0) / MB:.1f} MB (in use "
                f"{g.get('in_use_bytes', 0) / MB:.1f}, free {g.get('free_bytes', 0) / MB:.1f}), "
                f"glibc mmapped {g.get('mmapped_bytes', 0) / MB:.1f} MB, pymalloc arenas "
                f"{pm.get('arena_bytes', 0) / MB:.1f} MB (blocks in use "
                f"{pm.get('used_bytes', 0) / MB:.1f}, free {pm.get('free_bytes', 0) / MB:.1f}), "
                f"threads {h.get('threads')}"
            )
    if full_at is not None and growth_full is not None:
        print(
            f"the frame cache reached its budget at {full_at / 60:.1f} min; RSS from then (or "
            f"minute 5) to the end {growth_full:+.1%}"
        )
    if p99_pooled["ratio"] is not None:
        print(
            f"append p99 pooled: minutes 2-4 {p99_pooled['minutes_2_4_ms']} ms, last three "
            f"{p99_pooled['last_3_minutes_ms']} ms ({p99_pooled['ratio']:.2f}x)"
            + (
                f"; minutes 6-8 {p99_pooled['minutes_6_8_ms']} ms "
                f"({p99_pooled['steady_ratio']:.2f}x)"
                if p99_pooled["steady_ratio"] is not None
                else ""
            )
        )
    if emu_ratio is not None:
        print(f"emulator CPU per append, last/second minute: {emu_ratio:.2f}")
    print(
        f"server CPU {server_cpu * 1000 / ops:.2f} ms per append; AWS per append: "
        + ", ".join(f"{api} {v['calls']:.2f}" for api, v in per_op_calls(calls, ops).items())
        + f"; ${cost['usd_total'] * 1e6:.2f} per million appends at list prices "
        f"(DynamoDB ${cost['usd_dynamodb'] * 1e6:.2f}, S3 ${cost['usd_s3'] * 1e6:.2f}, "
        f"Lambda ${cost['usd_lambda'] * 1e6:.2f})"
    )
    if memory_top:
        print(f"\ntraced Python memory at the end: {memory_top['traced_kb'] / KB:.1f} MB; top:")
        for t in memory_top["top"][:15]:
            print(f"  {t['kb']:>9.1f} KB {t['count']:>7}  {' <- '.join(t['where'][-3:])}")
    result = {
        **result_header("soak", argv, machine),
        "params": asdict(p),
        "prices": PRICES,
        "verdict": verdict,
        "idle": idle,
        "stalled": stall,
        "per_minute": full,
        "samples": samples,
        "appends": total_appends,
        "server_cpu_ms_per_append": server_cpu * 1000 / ops,
        "aws_calls_per_append": per_op_calls(calls, ops),
        "cost_per_append": cost,
        "memory_top": memory_top,
        "client_failures": client_failures,
    }
    write_results(out_path, result)
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short smoke run (2 min, fewer sockets)")
    ap.add_argument("--minutes", type=float, default=None, help="soak length (30)")
    ap.add_argument("--idle-sse", type=int, default=None, help="idle SSE connections (1000)")
    ap.add_argument("--stalled", type=int, default=None, help="never-reading SSE clients (200)")
    ap.add_argument("--stalled-s", type=float, default=20.0, help="seconds stalled (20)")
    ap.add_argument("--sample-s", type=float, default=None, help="sampling interval (10 s)")
    ap.add_argument("--trace", type=int, default=0, help="tracemalloc frames (0: off)")
    ap.add_argument(
        "--backend",
        choices=("moto", "ddblocal"),
        default="moto",
        help="DynamoDB on moto (as make run) or DynamoDB Local, which does not slow down as "
        "its tables grow (S3 stays on moto)",
    )
    ap.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="K=V",
        help="a setting for the server (e.g. HEADWATER_FRAME_CACHE_BYTES=8388608); repeatable",
    )
    ap.add_argument("--out", default=None, help="results JSON (default bench/results/...)")
    args = ap.parse_args(argv)
    env = tuple(tuple(kv.split("=", 1)) for kv in args.env)
    if any(len(kv) != 2 or not kv[0] for kv in env):
        ap.error("--env takes K=V")
    q = args.quick
    p = Params(
        minutes=args.minutes or (2.0 if q else 30.0),
        idle_sse=(100 if q else 1000) if args.idle_sse is None else args.idle_sse,
        stalled=(20 if q else 200) if args.stalled is None else args.stalled,
        stalled_s=args.stalled_s if not q else min(args.stalled_s, 8.0),
        sample_s=args.sample_s or (5.0 if q else 10.0),
        trace=args.trace,
        backend=args.backend,
        env=env,  # type: ignore[arg-type]
    )
    return run(p, Path(args.out or RESULTS / "latest-soak.json"), argv)


if __name__ == "__main__":
    main()
