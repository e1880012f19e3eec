"""Benchmark live: delivery over SSE watch sessions (spec §7): latency, fan-out, idle cost.

    python -m bench.bench_live [--quick] [--runs N] [--out PATH] [--poll-ms MS] ...

Processes: the emulator (moto, as `make run` uses), the app served by uvicorn from
bench/server.py (AWS calls counted there; one or two processes), watcher clients in spawned
processes (asyncio on raw sockets: POST /v0/watch, then GET /v0/watch/:wid with
`Accept: text/event-stream`, chunked transfer decoded and `event: record` frames parsed by
hand, so 1,000 streams cost little CPU), and the publisher in this process (the raw
HTTP/1.1 client of bench_v0). Every measurement gets fresh tables and fresh servers.

Each published record is `{"data": {"run": <tag>, "i": <index>, "t": <ns>}}` where `t` is
`time.monotonic_ns()` just before the POST is written; a watcher stamps each record frame
with `time.monotonic_ns()` when its last byte is read. CLOCK_MONOTONIC is one clock for the
whole machine, so latency = arrival - t across processes, no clock sync needed.

Measurements:
- live-1proc: one watch session and one publisher on ONE server process, single-record
  appends at --rate per second for --duration s. Target p50 <= 5 ms, p99 <= 25 ms.
- live-2proc: the same, appending on server A and watching on server B (same emulator):
  B learns of appends only by polling the heads table (HEADWATER_POLL_INTERVAL_MS; the
  stream polls at 25 ms after news, backing off to the interval).
- fanout: --subscribers concurrent watch sessions of one topic on one server process,
  --fanout-records single-record appends at --fanout-rate per second; every (subscriber,
  record) pair is checked (missing, duplicates, out of order) and timed. Target p99 <= 250 ms.
- idle-K: K idle watch sessions on one server; counters zeroed, --idle-seconds of silence,
  counters read: AWS calls per idle connection-minute and $ per idle connection-hour, both
  for storage (DynamoDB/S3 at harness.PRICES) and for Lambda if each stream is held by a
  StreamFunction invocation (template.yaml: 1024 MB; StreamTimeoutSeconds 300 => reconnects).

AWS calls per operation (one published record) include everything the servers did in the
timed window: the append, the watchers' diffs, head polls and session-cursor saves. Results
go to bench/results/latest-live.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import queue
import resource
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.bench_v0 import RESULTS, Emulators, RawHttp, fresh_servers
from bench.harness import (
    LAMBDA_MEMORY_GB,
    PRICES,
    RemoteCallCounter,
    RunResult,
    Workload,
    cost_per_op,
    format_table,
    machine_info,
    median,
    process_cpu_seconds,
    report,
    result_header,
    run_workload,
    write_results,
)

ENV_POLL_MS = "HEADWATER_POLL_INTERVAL_MS"
LATENCY_TARGET = {"p50_ms": 5.0, "p99_ms": 25.0}
FANOUT_TARGET = {"p99_ms": 250.0}
STREAM_TIMEOUT_S = 300  # template.yaml StreamTimeoutSeconds: a stream is re-opened this often
SETUP_TIMEOUT_S = 600.0  # opening every watch session of one run
OPEN_PARALLEL = 16  # watch sessions being opened at once per watcher process


@dataclass
class Params:
    runs: int = 3
    rate: float = 50.0  # appends/s for live-1proc and live-2proc
    duration: float = 10.0  # seconds of appends per latency run
    subscribers: int = 1000
    fanout_records: int = 10
    fanout_rate: float = 1.0
    fanout_procs: int = 1
    idle_sessions: tuple[int, ...] = (10, 100)
    idle_seconds: float = 20.0
    poll_ms: int | None = None  # None: the server default (Settings)
    fanout_poll_ms: int | None = 5000  # 1,000 streams each polling at 200 ms swamp moto
    grace_s: float = 120.0  # how long watchers may lag the last append (then: missing)
    only: frozenset[str] = frozenset()
    extra: dict[str, Any] = field(default_factory=dict)


# --- watcher client (runs in spawned processes) ---------------------------------------------
class SseWatch:
    """One watch session: POST /v0/watch, then the SSE stream on its own connection."""

    def __init__(self, host: str, port: int, tag: str, expect: int) -> None:
        self.host, self.port, self.tag, self.expect = host, port, tag, expect
        self.lat_ms: dict[int, float] = {}
        self.dups = 0
        self.out_of_order = 0
        self.foreign = 0
        self.errors: list[str] = []
        self.eof = False
        self.last_i = -1
        self.open_ms = 0.0
        self.caught_up = asyncio.Event()
        self.complete = asyncio.Event()
        self._w: asyncio.StreamWriter | None = None
        self._task: asyncio.Task[None] | None = None

    async def open(self, topic: str) -> None:
        t0 = time.perf_counter()
        body = json.dumps({"topics": {topic: {"tail": True}}, "include_meta": False}).encode()
        # A connection of its own: a keep-alive connection reused after this stream's
        # caught-up could sit idle past uvicorn's keep-alive timeout under load.
        poster = RawHttp(f"http://{self.host}:{self.port}")
        try:
            status, content = await poster.post("/v0/watch", body)
        finally:
            await poster.close()
        if status != 200:
            raise RuntimeError(f"POST /v0/watch: {status} {content[:300]!r}")
        url = json.loads(content)["stream_url"]
        r, w = await asyncio.open_connection(self.host, self.port, limit=1 << 22)
        self._w = w
        w.write(
            f"GET {url} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            "Accept: text/event-stream\r\n\r\n".encode()
        )
        head = await r.readuntil(b"\r\n\r\n")
        if head[9:12] != b"200":
            body = await asyncio.wait_for(r.read(2000), 5)
            raise RuntimeError(f"GET {url}: {head[:12]!r} {body[:300]!r}")
        chunked = b"transfer-encoding: chunked" in head.lower()
        self._task = asyncio.create_task(self._consume(r, chunked))
        waiter = asyncio.create_task(self.caught_up.wait())
        done, _ = await asyncio.wait(
            {waiter, self._task}, timeout=120, return_when="FIRST_COMPLETED"
        )
        if waiter not in done:
            waiter.cancel()
            raise RuntimeError(f"stream {url} never sent caught-up: {self.errors or 'timeout'}")
        self.open_ms = (time.perf_counter() - t0) * 1000

    async def _consume(self, r: asyncio.StreamReader, chunked: bool) -> None:
        buf = b""
        try:
            while True:
                if chunked:
                    size = int((await r.readuntil(b"\r\n")).split(b";")[0], 16)
                    if size == 0:
                        break
                    data = (await r.readexactly(size + 2))[:-2]
                else:
                    data = await r.read(1 << 16)
                    if not data:
                        break
                now = time.monotonic_ns()
                buf += data
                while (k := buf.find(b"\n\n")) >= 0:
                    self._frame(buf[:k], now)
                    buf = buf[k + 2 :]
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            self.errors.append(f"stream broke: {exc!r}")
        self.eof = True
        self.complete.set()

    def _frame(self, frame: bytes, now_ns: int) -> None:
        event = data = b""
        for line in frame.split(b"\n"):
            name, _, value = line.partition(b":")
            value = value[1:] if value.startswith(b" ") else value
            if name == b"event":
                event = value
            elif name == b"data":
                data = value
        if event == b"record":
            for rec in json.loads(data)["records"]:
                d = rec.get("data")
                if not isinstance(d, dict) or d.get("run") != self.tag:
                    self.foreign += 1
                    continue
                i = d["i"]
                if i in self.lat_ms:
                    self.dups += 1
                    continue
                if i < self.last_i:
                    self.out_of_order += 1
                self.last_i = i
                self.lat_ms[i] = (now_ns - d["t"]) / 1e6
            if self.expect and len(self.lat_ms) >= self.expect:
                self.complete.set()
        elif event == b"caught-up":
            self.caught_up.set()
        elif event in (b"error", b"tombstone", b"topic-deleted"):
            self.errors.append(f"{event.decode()}: {data[:200].decode(errors='replace')}")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._w is not None:
            self._w.close()
            with contextlib.suppress(Exception):
                await self._w.wait_closed()


def watcher_process(spec: dict[str, Any], ready: Any, stop: Any, out: Any) -> None:
    try:
        asyncio.run(_watcher_main(spec, ready, stop, out))
    except BaseException as exc:  # the parent must not wait for a dead process
        out.put({"error": repr(exc)})
        ready.put({"error": repr(exc)})
        raise


async def _watcher_main(spec: dict[str, Any], ready: Any, stop: Any, out: Any) -> None:
    hostport = spec["base_url"].split("://", 1)[1]
    host, _, port = hostport.partition(":")
    n, expect = spec["sessions"], spec["expect"]
    watches = [SseWatch(host, int(port), spec["tag"], expect) for _ in range(n)]
    todo: asyncio.Queue[SseWatch] = asyncio.Queue()
    for w in watches:
        todo.put_nowait(w)

    async def opener() -> None:
        while not todo.empty():
            await todo.get_nowait().open(spec["topic"])

    await asyncio.gather(*(opener() for _ in range(min(n, OPEN_PARALLEL))))
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    ready.put({"ready": n, "open_ms": [w.open_ms for w in watches]})
    try:
        while not stop.is_set():
            if expect and all(w.complete.is_set() for w in watches):
                break
            await asyncio.sleep(0.05)
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
        streams = [
            {
                "received": len(w.lat_ms),
                "missing": max(expect - len(w.lat_ms), 0),
                "dups": w.dups,
                "out_of_order": w.out_of_order,
                "foreign": w.foreign,
                "eof": w.eof,
                "errors": w.errors[:3],
            }
            for w in watches
        ]
        out.put(
            {
                "streams": streams,
                "latencies_ms": [[i, x] for w in watches for i, x in w.lat_ms.items()],
                "cpu_s": (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime),
            }
        )
    finally:
        await asyncio.gather(*(w.close() for w in watches))


class Watchers:
    """Spawned watcher processes holding `sessions` watch sessions of `topic` between them."""

    def __init__(
        self, base_url: str, topic: str, tag: str, sessions: int, expect: int, procs: int = 1
    ) -> None:
        ctx = mp.get_context("spawn")
        self.ready = ctx.Queue()
        self.out = ctx.Queue()
        self.stop = ctx.Event()
        per = [sessions // procs + (1 if i < sessions % procs else 0) for i in range(procs)]
        specs = [
            {"base_url": base_url, "topic": topic, "tag": tag, "sessions": k, "expect": expect}
            for k in per
            if k > 0
        ]
        self.procs = [
            ctx.Process(target=watcher_process, args=(s, self.ready, self.stop, self.out))
            for s in specs
        ]

    def _get(self, q: Any, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                msg: dict[str, Any] = q.get(timeout=0.5)
                break
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise TimeoutError("watcher process did not answer") from None
                dead = [p.exitcode for p in self.procs if p.exitcode not in (None, 0)]
                if dead:
                    raise RuntimeError(f"watcher process died: exit codes {dead}") from None
        if "error" in msg:
            raise RuntimeError(f"watcher process failed: {msg['error']}")
        return msg

    def start(self) -> list[float]:
        """Start the processes; block until every stream is open and caught up."""
        for p in self.procs:
            p.start()
        return [x for _ in self.procs for x in self._get(self.ready, SETUP_TIMEOUT_S)["open_ms"]]

    def collect(self, grace_s: float) -> dict[str, Any]:
        """Wait up to `grace_s` for every stream to have every record, then stop them all."""
        parts = []
        deadline = time.monotonic() + grace_s
        for _ in self.procs:
            try:
                parts.append(self._get(self.out, max(deadline - time.monotonic(), 0.1)))
            except TimeoutError:
                self.stop.set()
                parts.append(self._get(self.out, 60))
        self.stop.set()
        streams = [s for p in parts for s in p["streams"]]
        return {
            "streams": streams,
            "latencies_ms": [x for p in parts for x in p["latencies_ms"]],
            "cpu_s": sum(p["cpu_s"] for p in parts),
        }

    def close(self) -> None:
        self.stop.set()
        for p in self.procs:
            if p.pid is None:
                continue
            p.join(timeout=30)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)


# --- publisher ------------------------------------------------------------------------------
async def _publish(base_url: str, topic: str, tag: str, n: int, rate: float) -> dict[str, Any]:
    """`n` single-record appends, paced at `rate`/s (sent late, never early, if behind)."""
    http = RawHttp(base_url)
    path = f"/v0/topics/{topic}"
    lat: list[float] = []
    sent_ns: list[int] = []
    errors: list[str] = []
    t0 = time.perf_counter()
    try:
        for i in range(n):
            delay = t0 + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            t = time.monotonic_ns()
            sent_ns.append(t)
            body = b'{"records":[{"data":{"run":"%s","i":%d,"t":%d}}]}' % (tag.encode(), i, t)
            status, content = await http.post(path, body)
            lat.append((time.monotonic_ns() - t) / 1e6)
            if status >= 300:
                errors.append(f"{status} {content[:200]!r}")
    finally:
        await http.close()
    return {
        "append_ms": lat,
        "sent_ns": sent_ns,
        "errors": errors,
        "elapsed_s": time.perf_counter() - t0,
    }


def _append_one(base_url: str, topic: str) -> None:
    """Create `topic` with one record (not part of any measurement)."""
    req = urllib.request.Request(
        f"{base_url}/v0/topics/{topic}",
        data=b'{"records":[{"data":{"warm":true}}]}',
        headers={"content-type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        if r.status >= 300:
            raise RuntimeError(f"creating {topic}: {r.status}")


# --- measurements ---------------------------------------------------------------------------
def _delivery_runner(
    publish_url: str,
    watch_url: str,
    sessions: int,
    records: int,
    rate: float,
    procs: int,
    grace_s: float,
    facts: list[dict[str, Any]],
) -> Callable[[int, Callable[[], None]], RunResult]:
    def run_once(i: int, begin: Callable[[], None]) -> RunResult:
        tag = uuid.uuid4().hex[:8]
        topic = f"live-{tag}"
        _append_one(publish_url, topic)
        w = Watchers(watch_url, topic, tag, sessions, records, procs)
        try:
            open_ms = w.start()
            begin()
            pub = asyncio.run(_publish(publish_url, topic, tag, records, rate))
            got = w.collect(grace_s)
        finally:
            w.close()
        streams = got["streams"]
        lat = [x for _, x in got["latencies_ms"]]
        # The part after the publisher had its 200 (negative: the frame beat the response).
        acked = pub["append_ms"]
        after_ack = [x - acked[i] for i, x in got["latencies_ms"] if i < len(acked)]
        # The run lasts from the first append sent to the last record frame read.
        sent = pub["sent_ns"]
        last = max((sent[i] + x * 1e6 for i, x in got["latencies_ms"]), default=sent[-1])
        elapsed = max((last - sent[0]) / 1e9, pub["elapsed_s"])
        facts.append(
            {
                "subscribers": len(streams),
                "published": records - len(pub["errors"]),
                "append_errors": len(pub["errors"]),
                "append_p50_ms": _pct(pub["append_ms"], 50),
                "append_p99_ms": _pct(pub["append_ms"], 99),
                "publish_rate_per_s": records / pub["elapsed_s"] if pub["elapsed_s"] else 0.0,
                "delivered": len(lat),
                "expected": records * len(streams),
                "missing": sum(s["missing"] for s in streams),
                "duplicates": sum(s["dups"] for s in streams),
                "out_of_order": sum(s["out_of_order"] for s in streams),
                "subscribers_complete": sum(1 for s in streams if s["missing"] == 0),
                "streams_ended": sum(1 for s in streams if s["eof"]),
                "stream_errors": sum(len(s["errors"]) for s in streams),
                "first_stream_errors": [e for s in streams for e in s["errors"]][:3],
                "open_p50_ms": _pct(open_ms, 50),
                "open_p99_ms": _pct(open_ms, 99),
                "max_ms": max(lat) if lat else None,
                "delivery_window_s": round(elapsed, 3),
                "after_ack_p50_ms": _pct(after_ack, 50),
                "after_ack_p99_ms": _pct(after_ack, 99),
            }
        )
        f = facts[-1]
        if f["missing"] or f["duplicates"] or f["out_of_order"] or f["stream_errors"]:
            print(
                f"  !! run {i + 1}: missing {f['missing']}, duplicates {f['duplicates']}, "
                f"out of order {f['out_of_order']}, stream errors {f['stream_errors']} "
                f"{f['first_stream_errors']}",
                file=sys.stderr,
            )
        return RunResult(
            ops=records - len(pub["errors"]),
            records=len(lat),
            elapsed_s=elapsed,
            latencies_ms=lat,
            errors=len(pub["errors"]) + f["missing"] + f["duplicates"] + f["stream_errors"],
            cpu_s={"clients": got["cpu_s"]},
        )

    return run_once


def _pct(values: Sequence[float], q: float) -> float | None:
    from bench.harness import percentile

    return round(percentile(values, q), 3) if values else None


def _facts_summary(facts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k in ("missing", "duplicates", "out_of_order", "stream_errors", "append_errors"):
        out[k] = sum(f[k] for f in facts)
    out["delivered"] = sum(f["delivered"] for f in facts)
    out["expected"] = sum(f["expected"] for f in facts)
    out["all_subscribers_got_every_record"] = all(
        f["subscribers_complete"] == f["subscribers"] and f["duplicates"] == 0 for f in facts
    )
    for k in (
        "append_p50_ms",
        "append_p99_ms",
        "after_ack_p50_ms",
        "after_ack_p99_ms",
        "publish_rate_per_s",
        "open_p50_ms",
    ):
        vals = [f[k] for f in facts if f[k] is not None]
        out[k] = median(vals) if vals else None
    out["per_run"] = list(facts)
    return out


def _latency_target(summary: dict[str, Any], limits: Mapping[str, float]) -> dict[str, Any]:
    met = {k: bool(summary[k] <= v) for k, v in limits.items()}
    label = ", ".join(f"{k.split('_')[0]} <= {v:g} ms" for k, v in limits.items())
    return {
        "metric": "p99_ms",
        "maximum": dict(limits),
        "label": label,
        "met_by_metric": met,
        # an undelivered record is a miss whatever the latency of the rest
        "met": all(met.values()) and summary["delivery"]["all_subscribers_got_every_record"],
    }


@contextlib.contextmanager
def _env(extra: Mapping[str, str]) -> Iterator[None]:
    """os.environ with `extra` set, for BenchServer (which copies os.environ) to inherit."""
    old = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _poll_env(poll_ms: int | None) -> tuple[dict[str, str], int]:
    """The server environment for a head-poll interval (None: the server's default), and
    the interval the servers will use."""
    from headwater.settings import Settings

    env = {ENV_POLL_MS: str(poll_ms)} if poll_ms is not None else {}
    with _env(env):
        return env, Settings.from_env().poll_interval_ms


def measure_delivery(emu: Emulators, p: Params, kind: str) -> dict[str, Any]:
    """live-1proc, live-2proc or fanout."""
    if kind == "fanout":
        sessions, records, rate = p.subscribers, p.fanout_records, p.fanout_rate
        desc = (
            f"{sessions} watch sessions of one topic on one server process; "
            f"{records} single-record appends at {rate:g}/s; latency over every "
            "(subscriber, record) pair"
        )
        procs = p.fanout_procs
    else:
        sessions, records, rate, procs = 1, max(int(p.rate * p.duration), 1), p.rate, 1
        where = (
            "one server process"
            if kind == "live-1proc"
            else "append on server A, watch on server B (head polling)"
        )
        desc = (
            f"one watch session, single-record appends at {rate:g}/s for {p.duration:g} s, {where}"
        )
    wl = Workload(
        name=kind,
        description=desc,
        op="POST /v0/topics/:topic (1 record) delivered to every watch stream",
        records_per_op=sessions,  # deliveries per append
        record_bytes=len(b'{"run":"01234567","i":1000,"t":1234567890123456789}'),
        clients=sessions + 1,
        client_processes=procs,
        duration_s=records / rate,
        params={"subscribers": sessions, "records": records, "rate_per_s": rate},
    )
    print(f"\n== {wl.name}: {wl.description}")
    names = ["server", "server-b"] if kind == "live-2proc" else ["server"]
    facts: list[dict[str, Any]] = []
    env, poll_ms = _poll_env(p.fanout_poll_ms if kind == "fanout" else p.poll_ms)
    print(f"   ({ENV_POLL_MS}={poll_ms})")
    with _env(env), fresh_servers(emu, names) as srv:
        a = srv["server"]
        b = srv.get("server-b", a)
        summary = run_workload(
            wl,
            _delivery_runner(a.url, b.url, sessions, records, rate, procs, p.grace_s, facts),
            repeats=p.runs,
            counter=RemoteCallCounter([s.url for s in srv.values()]),
            cpu_pids={**{k: s.pid for k, s in srv.items()}, **emu.pids()},
        )
    summary["latency_measures"] = "append sent -> record frame read by the watcher (ms)"
    summary["poll_interval_ms"] = poll_ms
    summary["delivery"] = _facts_summary(facts)
    summary["target"] = _latency_target(
        summary, FANOUT_TARGET if kind == "fanout" else LATENCY_TARGET
    )
    d = summary["delivery"]
    print(
        f"  {kind}: p50 {summary['p50_ms']:.1f} ms, p99 {summary['p99_ms']:.1f} ms "
        f"({'met' if summary['target']['met'] else 'MISSED'}: {summary['target']['label']}); "
        f"delivered {d['delivered']}/{d['expected']}, missing {d['missing']}, "
        f"duplicates {d['duplicates']}"
    )
    return summary


def measure_idle(emu: Emulators, p: Params, k: int) -> dict[str, Any]:
    wl = Workload(
        name=f"idle-{k}",
        description=f"{k} idle watch sessions on one server process for {p.idle_seconds:g} s",
        op="one idle watch connection",
        records_per_op=0,
        record_bytes=0,
        clients=k,
        duration_s=p.idle_seconds,
        params={"sessions": k, "seconds": p.idle_seconds},
    )
    print(f"\n== {wl.name}: {wl.description}")
    env, poll_ms = _poll_env(p.poll_ms)
    with _env(env), fresh_servers(emu, ["server"]) as srv:
        server = srv["server"]
        counter = RemoteCallCounter([server.url])
        pids = {"server": server.pid, **emu.pids()}

        runs: list[RunResult] = []

        def run_once(i: int, begin: Callable[[], None]) -> RunResult:
            tag = uuid.uuid4().hex[:8]
            topic = f"idle-{tag}"
            _append_one(server.url, topic)
            w = Watchers(server.url, topic, tag, k, 0)
            try:
                open_ms = w.start()
                time.sleep(1.0)  # past the first polls' back-off (25 ms doubling to the interval)
                begin()
                counter.reset()
                cpu0 = {n: process_cpu_seconds(pid) for n, pid in pids.items()}
                t0 = time.perf_counter()
                time.sleep(p.idle_seconds)
                calls = counter.snapshot()
                elapsed = time.perf_counter() - t0
                cpu = {n: process_cpu_seconds(pid) - cpu0[n] for n, pid in pids.items()}
                got = w.collect(0.0)
            finally:
                w.close()
            broken = sum(1 for s in got["streams"] if s["eof"] or s["errors"])
            runs.append(
                RunResult(
                    ops=k,
                    records=0,
                    elapsed_s=elapsed,
                    latencies_ms=open_ms,
                    errors=broken,
                    calls=calls,
                    cpu_s=cpu,
                )
            )
            return runs[-1]

        summary = run_workload(wl, run_once, repeats=p.runs, counter=None)
    summary["poll_interval_ms"] = poll_ms
    # An idle stream polls the heads once per interval once its back-off is done; fewer
    # measured polls than this mean the emulator could not keep up (each poll waits for
    # the previous one), not that the server polls less.
    summary["nominal_head_polls_per_connection_minute"] = 60_000 / poll_ms
    return _idle_summary(summary, runs, k)


def _idle_summary(summary: dict[str, Any], runs: Sequence[RunResult], k: int) -> dict[str, Any]:
    """Replace the per-operation figures (meaningless here) with per-connection-time ones."""
    for key in (
        "ops_per_s",
        "records_per_s",
        "aws_calls_per_op",
        "cost_per_op",
        "usd_per_million_events",
        "idle_ceiling",
        "cpu_ms_per_op",
        "lambda_ms_per_op_estimate",
        "server_ms_per_op",
        "records_per_op",
    ):
        summary.pop(key, None)
    apis = sorted({a for r in runs for a in r.calls.get("calls", {})})
    per_min: dict[str, dict[str, float]] = {}
    for api in apis:
        fields = sorted({f for r in runs for f in r.calls["calls"].get(api, {})})
        per_min[api] = {
            f: median(
                [r.calls["calls"].get(api, {}).get(f, 0.0) / (k * r.elapsed_s / 60) for r in runs]
            )
            for f in fields
        }
    hour: dict[str, float] = {}
    for key in ("usd_dynamodb", "usd_s3", "usd_storage"):
        hour[key] = median([cost_per_op(r.calls, 1)[key] / (k * r.elapsed_s / 3600) for r in runs])
    # A StreamFunction invocation holds one stream (one request per execution environment):
    # billed for its whole duration at the function's memory, re-invoked every StreamTimeout.
    hour["usd_lambda_stream_function"] = (
        3600 * LAMBDA_MEMORY_GB * PRICES["lambda_gb_second"]
        + 3600 / STREAM_TIMEOUT_S * PRICES["lambda_request_per_million"] / 1e6
    )
    hour["usd_total"] = hour["usd_storage"] + hour["usd_lambda_stream_function"]
    summary["latency_measures"] = "session open: POST /v0/watch + GET until caught-up (ms)"
    summary["sessions"] = k
    summary["aws_calls_per_idle_connection_minute"] = per_min
    summary["aws_calls_per_idle_connection_minute_total"] = sum(
        f.get("calls", 0.0) for f in per_min.values()
    )
    summary["usd_per_idle_connection_hour"] = hour
    summary["usd_per_idle_connection_minute"] = {k2: v / 60 for k2, v in hour.items()}
    summary["not_in_window"] = (
        "an open stream also re-saves its session (1 UpdateItem) every min(session_ttl/3, 60 s) "
        "= 60 s by default; an idle window shorter than that may not see it (~1 WRU per "
        "connection-minute, $0.0000375 per connection-hour)"
    )
    summary["server_cpu_cores_per_connection"] = median(
        [r.cpu_s.get("server", 0.0) / r.elapsed_s / k for r in runs]
    )
    summary["emulator_cpu_cores"] = median([r.cpu_s.get("moto", 0.0) / r.elapsed_s for r in runs])
    c = summary["aws_calls_per_idle_connection_minute_total"]
    print(
        f"  {summary['workload']['name']}: {c:.1f} AWS calls per idle connection-minute; "
        f"$ per idle connection-hour: storage {hour['usd_storage']:.6f}, with a Lambda "
        f"stream {hour['usd_total']:.4f}"
    )
    return summary


# --- the benchmark --------------------------------------------------------------------------
def live_report(summaries: Sequence[Mapping[str, Any]]) -> str:
    rows = []
    for s in summaries:
        if "delivery" not in s:
            continue
        d, t = s["delivery"], s["target"]
        calls = sum(f.get("calls", 0.0) for f in s["aws_calls_per_op"].values())
        rows.append(
            [
                s["workload"]["name"],
                s["workload"]["params"]["subscribers"],
                f"{s['p50_ms']:.1f}",
                f"{s['p99_ms']:.1f}",
                f"{'ok  ' if t['met'] else 'MISS'} {t['label']}",
                f"{d['delivered']}/{d['expected']}",
                f"{d['missing']}/{d['duplicates']}/{d['out_of_order']}",
                f"{d['append_p50_ms'] or 0:.1f}",
                f"{d['after_ack_p50_ms'] or 0:.1f}/{d['after_ack_p99_ms'] or 0:.1f}",
                f"{calls:.2f}",
                f"{s['cpu_cores'].get('server', 0.0):.2f}",
                s["poll_interval_ms"],
            ]
        )
    out = [
        "Live delivery (latency: append sent -> record frame read; after 200: the part after "
        "the publisher's response; poll: HEADWATER_POLL_INTERVAL_MS):",
        format_table(
            [
                "measurement",
                "subs",
                "p50 ms",
                "p99 ms",
                "target",
                "delivered",
                "miss/dup/ooo",
                "append p50",
                "after 200 p50/p99",
                "AWS calls/rec",
                "srv cores",
                "poll ms",
            ],
            rows,
        ),
    ]
    rows = []
    for s in summaries:
        if "sessions" not in s:
            continue
        per = s["aws_calls_per_idle_connection_minute"]
        h = s["usd_per_idle_connection_hour"]
        by_api = ", ".join(
            f"{api.split('.', 1)[1]} {f.get('calls', 0.0):.1f}" for api, f in sorted(per.items())
        )
        rows.append(
            [
                s["workload"]["name"],
                f"{s['aws_calls_per_idle_connection_minute_total']:.1f}",
                f"{s['nominal_head_polls_per_connection_minute']:.0f}",
                by_api or "-",
                f"{h['usd_storage'] / 60:.2e}",
                f"{h['usd_storage']:.2e}",
                f"{h['usd_total']:.4f}",
                f"{100 * s['server_cpu_cores_per_connection']:.3f}",
                f"{s['p50_ms']:.0f}/{s['p99_ms']:.0f}",
            ]
        )
    if rows:
        out += [
            "",
            "Idle watch connections (AWS calls and $ per idle connection; storage = DynamoDB + "
            "S3; +Lambda = a 1 GB StreamFunction invocation holding the stream):",
            format_table(
                [
                    "measurement",
                    "calls/conn-min",
                    "nominal polls",
                    "by API",
                    "$/conn-min storage",
                    "$/conn-hour storage",
                    "$/conn-hour +Lambda",
                    "srv % core/conn",
                    "open p50/p99 ms",
                ],
                rows,
            ),
        ]
    return "\n".join(out)


MEASUREMENTS = ("live-1proc", "live-2proc", "fanout", "idle")


def run(p: Params, backend: str, out_path: Path, argv: list[str] | None) -> dict[str, Any]:
    poll_ms = _poll_env(p.poll_ms)[1]
    fanout_poll_ms = _poll_env(p.fanout_poll_ms)[1]
    machine = machine_info()
    print(
        f"bench live | backend {backend} | {machine['cpu_model']} x{machine['cores']} | Python "
        f"{machine['python']} | runs={p.runs} rate={p.rate:g}/s duration={p.duration:g}s "
        f"subscribers={p.subscribers} fanout_records={p.fanout_records} "
        f"idle={','.join(map(str, p.idle_sessions))}x{p.idle_seconds:g}s "
        f"poll={poll_ms}ms (fan-out {fanout_poll_ms}ms) | "
        f"load {machine.get('loadavg_1m')}"
    )
    summaries: list[dict[str, Any]] = []
    emu = Emulators(backend)
    t0 = time.perf_counter()
    try:
        for kind in ("live-1proc", "live-2proc", "fanout"):
            if not p.only or kind in p.only:
                summaries.append(measure_delivery(emu, p, kind))
                print(f"   ({time.perf_counter() - t0:.0f} s so far)")
        if not p.only or "idle" in p.only:
            for k in p.idle_sessions:
                summaries.append(measure_idle(emu, p, k))
                print(f"   ({time.perf_counter() - t0:.0f} s so far)")
    finally:
        emu.stop()
    delivery = [s for s in summaries if "delivery" in s]
    if delivery:
        print("\n" + report(delivery, machine))
    print("\n" + live_report(summaries))
    result = {
        **result_header("live", argv, machine),
        "settings": {
            "backend": backend,
            "runs": p.runs,
            "rate_per_s": p.rate,
            "duration_s": p.duration,
            "subscribers": p.subscribers,
            "fanout_records": p.fanout_records,
            "fanout_rate_per_s": p.fanout_rate,
            "fanout_client_processes": p.fanout_procs,
            "idle_sessions": list(p.idle_sessions),
            "idle_seconds": p.idle_seconds,
            "poll_interval_ms": poll_ms,
            "fanout_poll_interval_ms": fanout_poll_ms,
            "grace_s": p.grace_s,
        },
        "targets": {"live": LATENCY_TARGET, "fanout": FANOUT_TARGET},
        "prices": PRICES,
        "workloads": summaries,
    }
    write_results(out_path, result)
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short smoke run (1 run, short windows)")
    ap.add_argument("--runs", type=int, default=None, help="runs per measurement (default 3)")
    ap.add_argument("--out", default=None, help="results JSON (default bench/results/...)")
    ap.add_argument("--poll-ms", type=int, default=None, help="HEADWATER_POLL_INTERVAL_MS")
    ap.add_argument(
        "--fanout-poll-ms",
        type=int,
        default=None,
        help="HEADWATER_POLL_INTERVAL_MS for the fan-out server (default 5000; 0: server default)",
    )
    ap.add_argument("--rate", type=float, default=None, help="appends/s in the latency runs")
    ap.add_argument("--duration", type=float, default=None, help="seconds per latency run")
    ap.add_argument("--subscribers", type=int, default=None, help="fan-out watch sessions")
    ap.add_argument("--fanout-records", type=int, default=None, help="records per fan-out run")
    ap.add_argument("--fanout-rate", type=float, default=None, help="fan-out appends/s")
    ap.add_argument("--fanout-procs", type=int, default=None, help="fan-out client processes")
    ap.add_argument("--idle-sessions", default=None, help="comma-separated K, e.g. 10,100")
    ap.add_argument("--idle-seconds", type=float, default=None, help="idle window per run")
    ap.add_argument("--grace", type=float, default=None, help="max wait for late deliveries")
    ap.add_argument("--only", default="", help=f"comma-separated subset of {MEASUREMENTS}")
    ap.add_argument("--backend", choices=("moto", "ddblocal"), default="moto")
    args = ap.parse_args(argv)
    q = args.quick
    only = frozenset(x for x in args.only.split(",") if x)
    if only - set(MEASUREMENTS):
        ap.error(f"--only: unknown {sorted(only - set(MEASUREMENTS))}")
    p = Params(
        runs=args.runs or (1 if q else 3),
        rate=args.rate or 50.0,
        duration=args.duration or (2.0 if q else 10.0),
        subscribers=args.subscribers or (100 if q else 1000),
        fanout_records=args.fanout_records or (5 if q else 10),
        fanout_rate=args.fanout_rate or 1.0,
        fanout_procs=args.fanout_procs or 1,
        idle_sessions=tuple(int(x) for x in (args.idle_sessions or "10,100").split(",") if x),
        idle_seconds=args.idle_seconds or (2.0 if q else 20.0),
        poll_ms=args.poll_ms,
        fanout_poll_ms=(5000 if args.fanout_poll_ms is None else (args.fanout_poll_ms or None)),
        grace_s=args.grace or 120.0,
        only=only,
    )
    suffix = "" if args.backend == "moto" else f"-{args.backend}"
    out_path = Path(args.out or RESULTS / f"latest-live{suffix}.json")
    return run(p, args.backend, out_path, argv)


if __name__ == "__main__":
    main()
