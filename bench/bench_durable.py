"""Benchmark durable: the upstream Durable Streams workloads, Headwater vs @durable-streams/server.

    python -m bench.bench_durable [--targets ref-file,ref-mem,py-floor,headwater]
                                  [--only latency,...]
                                  [--quick] [--out PATH] [size/count flags, see --help]

One run starts every target and runs every workload against each, one server at a time, a
fresh server (fresh tables / data dir / memory) per (workload, target), interleaved by
workload so a change in machine load hits all targets alike:

- ref-file: the reference server `@durable-streams/server` with a data dir
  (FileBackedStreamStore: LMDB metadata + append-only logs): the durable peer.
- ref-mem: the same server without a data dir (in-memory StreamStore).
- py-floor: bench/ds_bare_server.py, the workloads' requests answered from memory by a bare
  ASGI app under the uvicorn stack Headwater runs on: the Python HTTP floor (no framework,
  middleware, auth, engine or storage). Not a goal; it shows how much of Headwater's time
  and CPU is the HTTP exchange a Python server cannot avoid.
- headwater: bench/server.py (the real app, AWS calls counted) on a moto emulator, as the
  other benches run it.

Both reference modes are started by bench/ds_reference_server.mjs with the package's default
options (gzip responses on, 30 s long-poll timeout). The load generator runs in this process:
httpx.AsyncClient, one per concurrent request (see `Clients`), `Accept-Encoding: gzip,
deflate` as Node's fetch asks. httpx costs ~1 ms CPU per request, so at 75 concurrent
100-byte appends the client can saturate a core before a fast server does: the `cli cores`
column shows it (near 1.0: the figure is a floor for that target, and its ratio too).

Workloads, after packages/benchmarks/src/index.ts and packages/client-conformance-tests/
src/benchmark-scenarios.ts of github.com/durable-streams/durable-streams:
- latency: append -> long-poll round trip with 100-byte messages on an
  application/octet-stream stream. A reader's `GET ?offset=<tail>&live=long-poll` is sent and
  given --settle-ms to park at the server, then the writer POSTs 100 bytes; the sample is
  from the POST being started until both the POST's response and the reader's 200 (with the
  100 bytes) are in, as upstream times it. Upstream takes one measured round per fresh
  stream (after one warm-up round); here one stream, --latency-warmup warm-up rounds, then
  --latency-iters measured rounds (default 50, the conformance `latency-roundtrip` count).
  Reports p50/p95/p99 ms.
- small: 1,000 x 100-byte appends to one stream in waves of 75 concurrent POSTs
  (`Promise.all` of 75, then the next 75). msg/s = messages / wall time. Upstream's loop runs
  ceil(1000/75) full waves (1,050 appends) but divides by 1,000; here the last wave is the
  remainder, so exactly 1,000 are sent and counted. Median of 3 runs (upstream: 3).
- large: 50 x 1 MiB appends in waves of 15 (upstream: 4 full waves, 60 appends, counted as
  50; here exactly 50). MB/s (MiB) and msg/s; median of 2 runs (upstream: 2).
- catchup: a stream of 10,000 JSON messages (100 bytes each, appended one per POST at
  concurrency 75, untimed) read from offset -1 to the end: GET ?offset=<next> until
  `Stream-Up-To-Date: true`, every message parsed and counted (the conformance
  `throughput-read` scenario reads 10,000 JSON messages with `live: false`). One warm-up
  pass, then MB/s (decoded body bytes) and msg/s as the median of 5 passes (upstream: 5).

Targets: Headwater at least the file-backed reference on every workload (throughput >=, p50
latency <=), and at least the in-memory reference on small-message throughput. Ratios are
Headwater / reference of each workload's primary metric (for latency lower is better).

For Headwater the AWS calls per operation (one append; one round trip; one catch-up GET) are
counted in the server (headwater.storage.callcount via bench/server.py's /_bench routes) over
the timed window only. A target that fails (e.g. no /v1 routes yet: 404) is reported as
failed with the reason; the others still run. Results: bench/results/latest-durable.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.harness import (
    RemoteCallCounter,
    cpu_calibration_ms,
    format_table,
    machine_cpu_seconds,
    machine_info,
    median,
    per_op_calls,
    percentile,
    process_cpu_seconds,
    result_header,
    write_results,
)

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
REF_LAUNCHER = REPO / "bench" / "ds_reference_server.mjs"
READY = "DS_REFERENCE_SERVER_READY"
STREAM_PREFIX = "/v1/stream/"
OCTET = "application/octet-stream"
JSON_CT = "application/json"
MIB = 1024 * 1024

TARGETS = ("ref-file", "ref-mem", "py-floor", "headwater")
WORKLOADS = ("latency", "small", "large", "catchup")
# workload -> (primary metric, unit, higher is better)
PRIMARY: dict[str, tuple[str, str, bool]] = {
    "latency": ("p50_ms", "ms", False),
    "small": ("msg_per_s", "msg/s", True),
    "large": ("mb_per_s", "MB/s", True),
    "catchup": ("mb_per_s", "MB/s", True),
}
# Headwater must match these references on these workloads (the target).
GOALS: dict[str, tuple[str, ...]] = {
    "latency": ("ref-file",),
    "small": ("ref-file", "ref-mem"),
    "large": ("ref-file",),
    "catchup": ("ref-file",),
}


@dataclass
class Params:
    latency_iters: int = 50
    latency_warmup: int = 5
    latency_bytes: int = 100
    settle_ms: float = 20.0
    small_count: int = 1000
    small_bytes: int = 100
    small_conc: int = 75
    small_runs: int = 3
    large_count: int = 50
    large_bytes: int = MIB
    large_conc: int = 15
    large_runs: int = 2
    read_messages: int = 10_000
    read_bytes: int = 100
    read_fill_conc: int = 75
    read_runs: int = 5
    read_warmup: int = 1
    timeout_s: float = 120.0
    targets: tuple[str, ...] = TARGETS
    only: tuple[str, ...] = WORKLOADS


class TargetUnavailable(Exception):
    """The target cannot run any workload (server did not start, no /v1 routes...)."""


class WorkloadFailed(Exception):
    """One workload failed against one target."""


# --- targets --------------------------------------------------------------------------------
@dataclass
class Session:
    """One fresh server of a target, for one workload."""

    base_url: str
    pids: dict[str, int]
    counter: RemoteCallCounter | None = None


class RefTarget:
    """@durable-streams/server via bench/ds_reference_server.mjs, file-backed or in memory."""

    def __init__(self, name: str, mode: str) -> None:
        self.name, self.mode = name, mode
        self.node = shutil.which("node")

    def open(self) -> None:
        if self.node is None:
            raise TargetUnavailable("node not found on PATH")
        if not (REPO / "node_modules" / "@durable-streams" / "server").is_dir():
            raise TargetUnavailable("node_modules/@durable-streams/server missing (npm ci)")

    @contextlib.contextmanager
    def session(self) -> Iterator[Session]:
        from headwater.dev.emulator import die_with_parent, stop_process

        with tempfile.TemporaryDirectory(prefix=f"ds-{self.name}-") as tmp:
            log_path = Path(tmp) / "server.log"
            with open(log_path, "wb") as log:
                proc = subprocess.Popen(
                    self.command(tmp),
                    cwd=REPO,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    preexec_fn=die_with_parent,
                )
            try:
                url = _wait_ready(proc, log_path, 30.0)
                yield Session(url, {"server": proc.pid})
            finally:
                stop_process(proc, grace_s=10)

    def command(self, tmp: str) -> list[str]:
        """The server's command line (`tmp`: a directory of its own for this session)."""
        assert self.node is not None
        args = [self.node, str(REF_LAUNCHER), "0", self.mode]
        if self.mode == "file":
            args.append(os.path.join(tmp, "data"))
        return args

    def close(self) -> None:
        pass


def _wait_ready(proc: subprocess.Popen[bytes], log_path: Path, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in log_path.read_text(errors="replace").splitlines():
            if line.startswith(READY):
                return line.split()[1]
        if proc.poll() is not None:
            raise TargetUnavailable(
                f"reference server exited {proc.returncode}: {log_path.read_text()[-500:]}"
            )
        time.sleep(0.05)
    raise TargetUnavailable(f"reference server not ready in {timeout_s:g} s")


class PyFloorTarget(RefTarget):
    """bench/ds_bare_server.py: the Python HTTP floor (a bare ASGI app under uvicorn),
    launched and awaited like the reference (it prints the same ready line)."""

    def __init__(self) -> None:
        super().__init__("py-floor", "memory")

    def open(self) -> None:
        pass

    def command(self, tmp: str) -> list[str]:
        return [sys.executable, "-m", "bench.ds_bare_server"]


class HeadwaterTarget:
    """bench/server.py on moto, fresh tables and a fresh server process per session."""

    name = "headwater"

    def __init__(self, backend: str = "moto") -> None:
        self.backend = backend
        self.emu: Any = None
        self.env: dict[str, str] = {}  # settings for the next sessions' servers

    def open(self) -> None:
        from bench.bench_v0 import Emulators

        try:
            self.emu = Emulators(self.backend)
        except Exception as exc:
            raise TargetUnavailable(f"emulator did not start: {exc!r}") from exc

    @contextlib.contextmanager
    def session(self) -> Iterator[Session]:
        from bench.bench_v0 import fresh_servers

        try:
            cm = fresh_servers(self.emu, ["server"], self.env)
            srv = cm.__enter__()
        except Exception as exc:
            raise TargetUnavailable(f"Headwater server did not start: {exc!r}") from exc
        try:
            server = srv["server"]
            yield Session(
                server.url,
                {"server": server.pid, **self.emu.pids()},
                RemoteCallCounter([server.url]),
            )
        finally:
            cm.__exit__(None, None, None)

    def close(self) -> None:
        if self.emu is not None:
            self.emu.stop()
            self.emu = None


def storage_floor(
    emu: Any, rounds: int, warmup: int, msg_bytes: int, settle_ms: float
) -> dict[str, Any]:
    """The storage calls one append -> long-poll round trip needs, made from this process
    against the same emulator the Headwater server uses, through the same storage adapter
    (so the requests have the server's exact shape: its update and condition expressions, its
    items): the reader's strongly consistent head read (a GetItem: a stream's head is its
    item) and the append's two writes (the counter step, an UpdateItem conditional on the
    stream's ext, then the frame's PutItem at its reserved seq: docs/storage.md "The
    sequencer"), paced as in the round trip: the head read, `settle_ms` of nothing, then the
    append. No HTTP server, no engine.
    Wall time per round (p50/p95/p99) and this process's CPU per round.

    The pacing matters: on this machine the same write takes ~1.5-2 ms longer
    after 20 ms of idle than back to back (the emulator and the CPU wake up), so the append
    is also timed back to back (`hot_p50_ms`) to show it."""
    import dataclasses

    import boto3

    from headwater.engine.ports import AppendCommit, Head
    from headwater.engine.records import NewRecord, compress_frame, encode_records
    from headwater.settings import Settings
    from headwater.storage.blobs import S3BlobStore
    from headwater.storage.bootstrap import ensure_resources
    from headwater.storage.clients import AwsClients, client_config
    from headwater.storage.heads import DynamoHeadStore
    from headwater.storage.log_tail import DynamoLogTailStore

    env = emu.env()
    settings = Settings(resource_prefix=f"floor-{uuid.uuid4().hex[:8]}")
    session = boto3.Session(
        aws_access_key_id=env.get("AWS_ACCESS_KEY_ID", "testing"),
        aws_secret_access_key=env.get("AWS_SECRET_ACCESS_KEY", "testing"),
        region_name=settings.region,
    )
    config = client_config(settings)

    def client(service: str) -> Any:
        url = env.get(f"AWS_ENDPOINT_URL_{service.upper()}") or env.get("AWS_ENDPOINT_URL")
        return session.client(service, endpoint_url=url, config=config)

    clients = AwsClients(dynamodb=client("dynamodb"), s3=client("s3"))
    ensure_resources(settings, clients)
    heads = DynamoHeadStore(clients.dynamodb, settings)
    tail = DynamoLogTailStore(clients.dynamodb, settings, S3BlobStore(clients.s3, ""))
    topic = "~ds/floor"
    ext = json.dumps({"ct": OCTET, "cr": 1})
    rec = NewRecord(data="*" * msg_bytes, size=msg_bytes)
    blob = compress_frame(encode_records([rec]))
    now = int(time.time() * 1000)

    def commit(expected: Head | None, new_head: Head | None, seq: int) -> AppendCommit:
        return AppendCommit(
            topic=topic,
            expected=expected,
            new_head=new_head,
            first_seq=seq,
            last_seq=seq,
            ts=now,
            blob=blob,
            spill_key=None,
            payload_bytes=msg_bytes,
            tag_entries=[],
            tag_pending=False,
            idem=[],
            single=expected is not None,
            appended_bytes=seq * msg_bytes,
        )

    def append(head: Head) -> None:
        """A plain append as the server makes it: the counter step (UpdateItem, conditional
        on the stream's ext), then the frame's PutItem at the reserved seq."""
        rsv = heads.reserve(head, 1, msg_bytes, now, ext=head.ext)
        tail.commit_append(commit(head, None, rsv.first_seq))

    first = Head(topic, 1, created_ms=now, ext=ext, partitions=settings.log_partitions)
    created = dataclasses.replace(
        first, head_seq=1, count=1, bytes=msg_bytes, appended=1, appended_bytes=msg_bytes
    )
    tail.commit_append(commit(None, created, 1))
    append_ms: list[float] = []
    hot_ms: list[float] = []
    read_ms: list[float] = []
    cpu = 0.0
    for i in range(warmup + rounds):
        c0, t0 = time.process_time(), time.perf_counter()
        head = heads.get(topic)  # the reader's head read (strongly consistent)
        t1 = time.perf_counter()
        assert head is not None
        c1 = time.process_time()
        time.sleep(settle_ms / 1000)  # the reader parks; the writer sends after settle_ms
        c2, t2 = time.process_time(), time.perf_counter()
        append(head)  # the append
        t3 = time.perf_counter()
        if i >= warmup:
            read_ms.append((t1 - t0) * 1000)
            append_ms.append((t3 - t2) * 1000)
            cpu += (c1 - c0) + (time.process_time() - c2)
    for i in range(warmup + rounds):  # the append alone, back to back
        head = heads.get(topic)
        assert head is not None
        t0 = time.perf_counter()
        append(head)
        if i >= warmup:
            hot_ms.append((time.perf_counter() - t0) * 1000)
    # The timed round trip (from the POST's start) holds the append's call only: the reader
    # read the head when its long-poll arrived, before the POST.
    return {
        "calls": "the append's UpdateItem (reserve) and PutItem (frame), the server's requests",
        "rounds": rounds,
        "settle_ms": settle_ms,
        "hot_p50_ms": percentile(hot_ms, 50),
        "p50_ms": percentile(append_ms, 50),
        "p95_ms": percentile(append_ms, 95),
        "p99_ms": percentile(append_ms, 99),
        "read_p50_ms": percentile(read_ms, 50),
        "cpu_ms_per_op": cpu * 1000 / rounds,
        "cpu_note": "this process's CPU for both calls (the head GetItem and the append)",
    }


def make_target(name: str) -> RefTarget | HeadwaterTarget:
    if name == "py-floor":
        return PyFloorTarget()
    if name == "ref-file":
        return RefTarget(name, "file")
    if name == "ref-mem":
        return RefTarget(name, "memory")
    if name == "headwater":
        return HeadwaterTarget()
    raise ValueError(name)


# --- protocol helpers -----------------------------------------------------------------------
def _fail(r: httpx.Response, what: str) -> WorkloadFailed:
    hint = " (no Durable Streams /v1 routes?)" if r.status_code in (404, 405, 501) else ""
    body = " ".join(r.content[:300].decode(errors="replace").split())[:160]
    return WorkloadFailed(f"{what} -> {r.status_code}{hint}: {body!r}")


def _path(kind: str) -> str:
    return f"{STREAM_PREFIX}bench-{kind}-{uuid.uuid4().hex[:10]}"


async def create_stream(c: httpx.AsyncClient, path: str, content_type: str) -> str:
    """PUT the stream; returns its tail offset."""
    r = await c.put(path, headers={"content-type": content_type})
    if r.status_code not in (200, 201):
        raise _fail(r, f"PUT {path}")
    off = r.headers.get("stream-next-offset")
    if off is None:
        h = await c.head(path)
        if h.status_code != 200 or "stream-next-offset" not in h.headers:
            raise _fail(h, f"HEAD {path} (no Stream-Next-Offset)")
        off = h.headers["stream-next-offset"]
    return str(off)


async def append(c: httpx.AsyncClient, path: str, body: bytes, content_type: str) -> float:
    """POST one message; returns the request's latency in ms."""
    t = time.perf_counter()
    r = await c.post(path, content=body, headers={"content-type": content_type})
    ms = (time.perf_counter() - t) * 1000
    if r.status_code not in (200, 204):
        raise _fail(r, f"POST {path}")
    if "stream-next-offset" not in r.headers:
        raise WorkloadFailed(f"POST {path} -> {r.status_code} without Stream-Next-Offset")
    return ms


async def delete_stream(c: httpx.AsyncClient, path: str) -> None:
    with contextlib.suppress(httpx.HTTPError):
        await c.delete(path)


def json_message(i: int, size: int) -> bytes:
    """A JSON object of exactly `size` bytes (at least the bare object's length)."""
    bare = b'{"n":%d,"data":""}' % i
    return b'{"n":%d,"data":"%s"}' % (i, b"x" * max(size - len(bare), 0))


# --- measurement windows --------------------------------------------------------------------
class Window:
    """The timed part of a run: AWS call counters and CPU of the target's processes (and of
    this load generator) between begin() and end()."""

    def __init__(self, session: Session) -> None:
        self.s = session
        self.cpu0: dict[str, float] = {}

    def begin(self) -> None:
        if self.s.counter is not None:
            self.s.counter.reset()
        self.cpu0 = {n: process_cpu_seconds(p) for n, p in self.s.pids.items()}
        self.cpu0["client"] = time.process_time()
        self.machine0, self.wall0 = machine_cpu_seconds(), time.perf_counter()

    def end(self) -> dict[str, Any]:
        cpu = {n: process_cpu_seconds(p) - self.cpu0[n] for n, p in self.s.pids.items()}
        cpu["client"] = time.process_time() - self.cpu0["client"]
        calls = self.s.counter.snapshot() if self.s.counter is not None else None
        wall = time.perf_counter() - self.wall0
        # the cores something other than the target and this load generator kept busy
        other = machine_cpu_seconds() - self.machine0 - sum(cpu.values())
        return {"cpu_s": cpu, "calls": calls, "wall_s": wall, "other_cpu_s": max(0.0, other)}


def _window_facts(w: dict[str, Any], ops: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "cpu_ms_per_op": {n: 1000 * v / max(ops, 1) for n, v in w["cpu_s"].items()},
        "other_cores": round(w["other_cpu_s"] / w["wall_s"], 3) if w.get("wall_s") else None,
    }
    if w["calls"] is not None:
        per = per_op_calls(w["calls"], ops)
        out["aws_calls_per_op"] = per
        out["aws_calls_per_op_total"] = sum(f.get("calls", 0.0) for f in per.values())
        # each storage call's wall time as the server saw it (botocore's retries included)
        out["server_call_ms"] = {
            api: {"calls": len(v), "p50_ms": percentile(v, 50), "p95_ms": percentile(v, 95)}
            for api, v in w["calls"].get("wall_ms", {}).items()
            if v
        }
    return out


def _merge_windows(ws: Sequence[dict[str, Any]]) -> dict[str, Any]:
    cpu: dict[str, float] = {}
    for w in ws:
        for n, v in w["cpu_s"].items():
            cpu[n] = cpu.get(n, 0.0) + v
    wall = sum(w.get("wall_s", 0.0) for w in ws)
    other = sum(w.get("other_cpu_s", 0.0) for w in ws)
    calls = None
    if ws and ws[0]["calls"] is not None:
        from bench.harness import merge_snapshots

        calls = merge_snapshots([w["calls"] for w in ws])
    return {"cpu_s": cpu, "calls": calls, "wall_s": wall, "other_cpu_s": other}


# --- workloads ------------------------------------------------------------------------------
class Clients:
    """The load generator's HTTP clients: `main` for setup and sequential requests, and one
    client per concurrent request ("lanes", each a single keep-alive connection). One
    httpx.AsyncClient shared by 75 concurrent requests spends most of its CPU in its
    connection pool's bookkeeping (httpcore scans every waiting request on every change),
    which on a 2-core box made the load generator, not the server, the bottleneck."""

    def __init__(self, base_url: str, lanes: int, timeout_s: float) -> None:
        self.base_url, self.timeout_s = base_url, timeout_s
        # One TLS context for all (plain HTTP never uses it, but httpx builds and loads one
        # per client otherwise: ~50 ms each, seconds for 75 lanes).
        self.ssl = ssl.create_default_context()
        self.main = self._client(8)
        self.lanes = [self._client(1) for _ in range(max(lanes, 1))]

    def _client(self, conns: int) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.base_url,
            limits=httpx.Limits(max_connections=conns, max_keepalive_connections=conns),
            timeout=httpx.Timeout(self.timeout_s, connect=30.0),
            verify=self.ssl,
            # as Node's fetch (the upstream benchmark's client) asks; the reference gzips
            # responses of 1 KB and more when asked
            headers={"accept-encoding": "gzip, deflate"},
        )

    def lane(self, i: int) -> httpx.AsyncClient:
        return self.lanes[i % len(self.lanes)]

    async def aclose(self) -> None:
        for c in [self.main, *self.lanes]:
            await c.aclose()


async def w_latency(cl: Clients, s: Session, p: Params) -> dict[str, Any]:
    c = cl.main
    path = _path("latency")
    tail = await create_stream(c, path, OCTET)
    msg = bytes([42]) * p.latency_bytes
    lat: list[float] = []
    append_ms: list[float] = []
    win = Window(s)
    window: dict[str, Any] = {}
    for i in range(p.latency_warmup + p.latency_iters):
        if i == p.latency_warmup:
            win.begin()
        reader = asyncio.create_task(
            cl.lane(0).get(path, params={"offset": tail, "live": "long-poll"}, timeout=p.timeout_s)
        )
        await asyncio.sleep(p.settle_ms / 1000)
        if reader.done():
            r = reader.result()
            raise WorkloadFailed(
                f"long-poll at the tail returned before any append ({r.status_code}, "
                f"{len(r.content)} bytes): the server did not wait"
            )
        t0 = time.perf_counter()
        append_ms.append(await append(c, path, msg, OCTET))
        r = await reader
        ms = (time.perf_counter() - t0) * 1000
        if r.status_code != 200:
            raise _fail(r, f"GET {path}?offset={tail}&live=long-poll after an append")
        if r.content != msg:
            raise WorkloadFailed(
                f"long-poll returned {len(r.content)} bytes, expected the {len(msg)} appended"
            )
        tail = r.headers.get("stream-next-offset") or ""
        if not tail:
            raise WorkloadFailed("long-poll response without Stream-Next-Offset")
        if i >= p.latency_warmup:
            lat.append(ms)
    window = win.end()
    await delete_stream(c, path)
    ops = len(lat)
    return {
        "ops": ops,
        "p50_ms": percentile(lat, 50),
        "p95_ms": percentile(lat, 95),
        "p99_ms": percentile(lat, 99),
        "mean_ms": sum(lat) / ops,
        "append_p50_ms": percentile(append_ms[p.latency_warmup :], 50),
        # a server still warming up (or a machine whose load changed) shows as halves apart
        "p50_first_half_ms": percentile(lat[: ops // 2], 50),
        "p50_second_half_ms": percentile(lat[ops // 2 :], 50),
        "latencies_ms": [round(x, 3) for x in lat],
        **_window_facts(window, ops),
    }


async def _waves(
    cl: Clients, path: str, body: bytes, ct: str, count: int, conc: int
) -> list[float]:
    """`count` appends in waves of `conc` concurrent POSTs (upstream's Promise.all loop)."""
    lat: list[float] = []
    sent = 0
    while sent < count:
        k = min(conc, count - sent)
        lat += await asyncio.gather(*(append(cl.lane(j), path, body, ct) for j in range(k)))
        sent += k
    return lat


async def w_throughput(
    cl: Clients, s: Session, kind: str, count: int, size: int, conc: int, runs: int
) -> dict[str, Any]:
    msg = bytes([42]) * size
    per_run: list[dict[str, Any]] = []
    windows: list[dict[str, Any]] = []
    lat_all: list[float] = []
    timed_s = 0.0
    for _ in range(runs):
        path = _path(kind)
        await create_stream(cl.main, path, OCTET)
        win = Window(s)
        win.begin()
        t0 = time.perf_counter()
        lat = await _waves(cl, path, msg, OCTET, count, conc)
        elapsed = time.perf_counter() - t0
        timed_s += elapsed
        windows.append(win.end())
        await delete_stream(cl.main, path)
        lat_all += lat
        per_run.append(
            {
                "messages": count,
                "elapsed_s": round(elapsed, 4),
                "msg_per_s": count / elapsed,
                "mb_per_s": count * size / MIB / elapsed,
                "append_p50_ms": percentile(lat, 50),
                "append_p99_ms": percentile(lat, 99),
            }
        )
    ops = count * runs
    merged = _merge_windows(windows)
    return {
        "ops": ops,
        "msg_per_s": median([r["msg_per_s"] for r in per_run]),
        "mb_per_s": median([r["mb_per_s"] for r in per_run]),
        "p50_ms": percentile(lat_all, 50),
        "p95_ms": percentile(lat_all, 95),
        "p99_ms": percentile(lat_all, 99),
        "per_run": per_run,
        # cores this load generator kept busy: near 1.0 means the client was the bottleneck
        "client_cpu_cores": merged["cpu_s"]["client"] / timed_s,
        **_window_facts(merged, ops),
    }


async def _read_all(c: httpx.AsyncClient, path: str, timeout_s: float) -> tuple[int, int, int]:
    """Catch-up read from the start until Stream-Up-To-Date: (requests, bytes, messages)."""
    offset, requests, nbytes, nmsgs = "-1", 0, 0, 0
    while True:
        r = await c.get(path, params={"offset": offset}, timeout=timeout_s)
        requests += 1
        if r.status_code != 200:
            raise _fail(r, f"GET {path}?offset={offset}")
        body = r.content
        nbytes += len(body)
        items = json.loads(body) if body else []
        if not isinstance(items, list):
            raise WorkloadFailed(f"JSON stream read returned {type(items).__name__}, not a list")
        nmsgs += len(items)
        nxt = r.headers.get("stream-next-offset")
        if not nxt:
            raise WorkloadFailed(f"GET {path}?offset={offset} without Stream-Next-Offset")
        if r.headers.get("stream-up-to-date", "").lower() == "true":
            return requests, nbytes, nmsgs
        if nxt == offset and not items:
            raise WorkloadFailed(f"catch-up read made no progress at offset {offset}")
        offset = nxt
        if requests > 1_000_000:
            raise WorkloadFailed("catch-up read did not finish")


async def w_catchup(cl: Clients, s: Session, p: Params) -> dict[str, Any]:
    c = cl.main
    path = _path("catchup")
    await create_stream(c, path, JSON_CT)
    todo = iter(json_message(i, p.read_bytes) for i in range(p.read_messages))

    async def filler(lane: httpx.AsyncClient) -> None:
        for m in todo:  # the workers share one iterator: every message is appended once
            await append(lane, path, m, JSON_CT)

    t0 = time.perf_counter()
    await asyncio.gather(*(filler(cl.lane(j)) for j in range(p.read_fill_conc)))
    fill_s = time.perf_counter() - t0
    for _ in range(p.read_warmup):
        await _read_all(c, path, p.timeout_s)
    per_run: list[dict[str, Any]] = []
    windows: list[dict[str, Any]] = []
    lat: list[float] = []
    for _ in range(p.read_runs):
        win = Window(s)
        win.begin()
        t = time.perf_counter()
        requests, nbytes, nmsgs = await _read_all(c, path, p.timeout_s)
        elapsed = time.perf_counter() - t
        windows.append(win.end())
        if nmsgs != p.read_messages:
            raise WorkloadFailed(f"catch-up read got {nmsgs} messages, {p.read_messages} appended")
        lat.append(elapsed * 1000)
        per_run.append(
            {
                "requests": requests,
                "bytes": nbytes,
                "messages": nmsgs,
                "elapsed_s": round(elapsed, 4),
                "msg_per_s": nmsgs / elapsed,
                "mb_per_s": nbytes / MIB / elapsed,
            }
        )
    await delete_stream(c, path)
    ops = sum(r["requests"] for r in per_run)
    return {
        "ops": ops,
        "op": "one catch-up GET",
        "requests_per_pass": median([r["requests"] for r in per_run]),
        "msg_per_s": median([r["msg_per_s"] for r in per_run]),
        "mb_per_s": median([r["mb_per_s"] for r in per_run]),
        # per pass (the whole catch-up read), not per request
        "p50_ms": percentile(lat, 50),
        "p95_ms": percentile(lat, 95),
        "p99_ms": percentile(lat, 99),
        "fill_s": round(fill_s, 3),
        "per_run": per_run,
        **_window_facts(_merge_windows(windows), ops),
    }


async def _probe(c: httpx.AsyncClient) -> None:
    """Can this target create, append to and delete a stream at all?"""
    path = _path("probe")
    try:
        await create_stream(c, path, OCTET)
        await append(c, path, b"probe", OCTET)
    except WorkloadFailed as exc:
        raise TargetUnavailable(str(exc)) from exc
    await delete_stream(c, path)


async def run_one(workload: str, s: Session, p: Params) -> dict[str, Any]:
    lanes = {
        "latency": 1,
        "small": p.small_conc,
        "large": p.large_conc,
        "catchup": min(p.read_fill_conc, p.read_messages),
    }[workload]
    cl = Clients(s.base_url, lanes, p.timeout_s)
    try:
        await _probe(cl.main)
        if workload == "latency":
            return await w_latency(cl, s, p)
        if workload == "small":
            return await w_throughput(
                cl, s, "small", p.small_count, p.small_bytes, p.small_conc, p.small_runs
            )
        if workload == "large":
            return await w_throughput(
                cl, s, "large", p.large_count, p.large_bytes, p.large_conc, p.large_runs
            )
        return await w_catchup(cl, s, p)
    finally:
        await cl.aclose()


def describe(workload: str, p: Params) -> str:
    if workload == "latency":
        return (
            f"append -> long-poll round trip, {p.latency_bytes} B messages, "
            f"{p.latency_iters} rounds after {p.latency_warmup} warm-up"
        )
    if workload == "small":
        return (
            f"{p.small_count:,} x {p.small_bytes} B appends, waves of {p.small_conc}, "
            f"median of {p.small_runs} runs"
        )
    if workload == "large":
        return (
            f"{p.large_count:,} x {p.large_bytes / MIB:g} MiB appends, waves of {p.large_conc}, "
            f"median of {p.large_runs} runs"
        )
    return (
        f"catch-up read of {p.read_messages:,} x {p.read_bytes} B JSON messages from offset "
        f"-1, median of {p.read_runs} passes"
    )


# --- report ---------------------------------------------------------------------------------
def _num(v: Any, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def ratios(workloads: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Headwater / reference for each workload's primary metric, and the goals."""
    out: dict[str, Any] = {}
    for wl, by_target in workloads.items():
        metric, unit, higher = PRIMARY[wl]
        hw = by_target.get("headwater")
        row: dict[str, Any] = {"metric": metric, "unit": unit, "higher_is_better": higher}
        for ref in ("ref-file", "ref-mem"):
            r = by_target.get(ref)
            ok = hw is not None and hw.get("ok") and r is not None and r.get("ok")
            ratio = hw[metric] / r[metric] if ok and r[metric] else None  # type: ignore[index]
            row[f"headwater/{ref}"] = ratio
            if ref in GOALS[wl]:
                met = None if ratio is None else ratio >= 1.0 if higher else ratio <= 1.0
                row.setdefault("goals", {})[ref] = met
        # our CPU per operation against the reference's (the headline: at or below)
        for ref in ("ref-file", "ref-mem"):
            r = by_target.get(ref)
            hw_cpu = (hw or {}).get("cpu_ms_per_op", {}).get("server")
            ref_cpu = (r or {}).get("cpu_ms_per_op", {}).get("server")
            row[f"cpu headwater/{ref}"] = hw_cpu / ref_cpu if hw_cpu and ref_cpu else None
        floor = (hw or {}).get("storage_floor")
        if floor is not None and hw is not None:
            over = hw["p50_ms"] - floor["p50_ms"]
            row["p50 over storage floor ms"] = over
            row.setdefault("goals", {})["floor + 3 ms"] = over <= 3.0
            py = by_target.get("py-floor")
            if py is not None and py.get("ok"):
                # what neither the storage calls nor Python's HTTP exchange account for
                row["p50 over storage + HTTP floors ms"] = over - py["p50_ms"]
        out[wl] = row
    return out


def render(result: Mapping[str, Any]) -> str:
    wls: Mapping[str, Mapping[str, Any]] = result["workloads"]
    lines = [
        "Durable Streams workloads (msg/s and MB/s: median of runs; p50/p95/p99: latency ms of "
        "the round trip (latency), of each append (small, large), of a whole pass (catchup)):"
    ]
    rows = []
    failures = []
    for wl, by_target in wls.items():
        for t, r in by_target.items():
            if not r.get("ok"):
                rows.append([wl, t, "FAILED", *[""] * 8])
                failures.append(f"{wl} @ {t}: {r.get('error')}")
                continue
            cpu = r.get("cpu_ms_per_op", {})
            rows.append(
                [
                    wl,
                    t,
                    _num(r.get("msg_per_s"), ",.0f"),
                    _num(r.get("mb_per_s"), ",.2f"),
                    _num(r.get("p50_ms"), ".2f"),
                    _num(r.get("p95_ms"), ".2f"),
                    _num(r.get("p99_ms"), ".2f"),
                    _num(r.get("aws_calls_per_op_total"), ".2f"),
                    _num(cpu.get("server"), ".3f"),
                    _num(cpu.get("client"), ".3f"),
                    _num(r.get("client_cpu_cores"), ".2f"),
                ]
            )
    lines.append(
        format_table(
            [
                "workload",
                "target",
                "msg/s",
                "MB/s",
                "p50 ms",
                "p95 ms",
                "p99 ms",
                "AWS calls/op",
                "srv CPU ms/op",
                "cli CPU ms/op",
                "cli cores",
            ],
            rows,
        )
    )
    if failures:
        lines += ["", "Failed:"] + [f"  {f}" for f in failures]
    lines += ["", "Headwater / reference (primary metric; latency: lower is better):"]
    rows = []
    for wl, row in result["ratios"].items():
        goals = row.get("goals", {})
        rows.append(
            [
                wl,
                f"{row['metric']} ({'higher' if row['higher_is_better'] else 'lower'} better)",
                _num(row["headwater/ref-file"], ".2f"),
                _num(row["headwater/ref-mem"], ".2f"),
                ", ".join(
                    f"{'n/a ' if m is None else ('ok  ' if m else 'MISS')} vs {ref}"
                    for ref, m in goals.items()
                ),
            ]
        )
    lines.append(format_table(["workload", "metric", "HW/ref-file", "HW/ref-mem", "goal"], rows))
    lines += ["", "Server CPU per operation, Headwater / reference (target: at or below, <= 1):"]
    rows = []
    for wl, row in result["ratios"].items():
        by_target = wls[wl]
        cpu = {
            t: by_target.get(t, {}).get("cpu_ms_per_op", {}).get("server")
            for t in ("ref-file", "ref-mem", "py-floor", "headwater")
        }
        rows.append(
            [
                wl,
                _num(cpu["ref-file"], ".3f"),
                _num(cpu["ref-mem"], ".3f"),
                _num(cpu["py-floor"], ".3f"),
                _num(cpu["headwater"], ".3f"),
                _num(row.get("cpu headwater/ref-file"), ".2f"),
                _num(row.get("cpu headwater/ref-mem"), ".2f"),
            ]
        )
    lines.append(
        format_table(
            [
                "workload",
                "ref-file ms",
                "ref-mem ms",
                "py-floor ms",
                "Headwater ms",
                "HW/ref-file",
                "HW/ref-mem",
            ],
            rows,
        )
    )
    floor = wls.get("latency", {}).get("headwater", {}).get("storage_floor")
    if floor is not None:
        hw = wls["latency"]["headwater"]
        over = hw["p50_ms"] - floor["p50_ms"]
        lines += [
            "",
            f"Storage floor of one round trip ({floor['calls']}, made from the bench process "
            f"through the storage adapter against the same emulator, "
            f"{floor.get('settle_ms', 0):g} ms after the reader's head GetItem as in the round "
            f"trip): p50 {floor['p50_ms']:.2f} ms (back to back: "
            f"{floor.get('hot_p50_ms', float('nan')):.2f} ms; the head GetItem, before the "
            f"timed window: {floor['read_p50_ms']:.2f} ms; both calls "
            f"{floor['cpu_ms_per_op']:.3f} ms CPU). "
            f"Headwater's round trip p50 {hw['p50_ms']:.2f} ms is {over:.2f} ms above it "
            f"(target <= 3 ms: {'met' if over <= 3.0 else 'MISSED'}).",
        ]
        calls = hw.get("server_call_ms", {})
        own_calls = [calls[a] for a in ("DynamoDB.UpdateItem", "DynamoDB.PutItem") if a in calls]
        if len(own_calls) == 2:
            both = sum(c["p50_ms"] for c in own_calls)
            lines.append(
                f"The same calls inside the Headwater server (botocore's before- to after-call, "
                f"on its I/O thread): UpdateItem p50 {own_calls[0]['p50_ms']:.2f} ms, PutItem "
                f"p50 {own_calls[1]['p50_ms']:.2f} ms over {own_calls[1]['calls']} appends, "
                f"{both - floor['p50_ms']:+.2f} ms against the floor's."
            )
        py = wls["latency"].get("py-floor", {})
        if py.get("ok"):
            own = result["ratios"]["latency"]["p50 over storage + HTTP floors ms"]
            lines.append(
                f"Python HTTP floor of the same round trip (py-floor: a bare ASGI app under "
                f"the same uvicorn, same client): p50 {py['p50_ms']:.2f} ms. Headwater's own "
                f"time above both floors: {own:.2f} ms."
            )
    aws = [
        [
            wl,
            api,
            f"{f.get('calls', 0.0):.3f}",
            f"{f.get('wru', 0.0):.2f}",
            f"{f.get('rru', 0.0):.2f}",
        ]
        for wl, by_target in wls.items()
        for api, f in sorted(by_target.get("headwater", {}).get("aws_calls_per_op", {}).items())
    ]
    if aws:
        lines += [
            "",
            "Headwater AWS calls per operation (latency: one round trip; small/large: one "
            "append; catchup: one GET):",
            format_table(["workload", "API", "calls/op", "WRU/op", "RRU/op"], aws),
        ]
    cond = result.get("conditions")
    if cond:
        a, b = cond["start"], cond["end"]
        lines += [
            "",
            f"Conditions: load {a['loadavg_1m']} -> {b['loadavg_1m']}; Python calibration "
            f"{a['cpu_calibration_ms']} -> {b['cpu_calibration_ms']} ms (published runs "
            f"{PUBLISHED_CALIBRATION_MS} ms); a fresh server and fresh tables per workload.",
        ]
        lines += [f"  !! {w}" for w in cond.get("warnings", [])] or [
            "  steady: figures comparable with the published ones"
        ]
    return "\n".join(lines)


# --- the benchmark --------------------------------------------------------------------------
def run(
    p: Params, out_path: Path, argv: Sequence[str] | None, log: Callable[[str], None] = print
) -> dict[str, Any]:
    machine = machine_info()
    start = conditions()
    log(
        f"bench durable | targets {','.join(p.targets)} | workloads {','.join(p.only)} | "
        f"{machine['cpu_model']} x{machine['cores']} | load {start['loadavg_1m']} | "
        f"python calibration {start['cpu_calibration_ms']} ms (published runs: "
        f"{PUBLISHED_CALIBRATION_MS} ms)"
    )
    targets: dict[str, Any] = {}
    dead: dict[str, str] = {}
    for name in p.targets:
        t = make_target(name)
        try:
            t.open()
        except TargetUnavailable as exc:
            dead[name] = str(exc)
            log(f"  !! {name} unavailable: {exc}")
        targets[name] = t
    workloads: dict[str, dict[str, Any]] = {}
    t_start = time.perf_counter()
    try:
        for wl in p.only:
            log(f"\n== {wl}: {describe(wl, p)}")
            workloads[wl] = {}
            for name, t in targets.items():
                if name in dead:
                    workloads[wl][name] = {"ok": False, "error": dead[name]}
                    continue
                t0 = time.perf_counter()
                try:
                    with t.session() as s:
                        r = asyncio.run(run_one(wl, s, p))
                    r = {"ok": True, **r}
                except TargetUnavailable as exc:
                    dead[name] = str(exc)
                    r = {"ok": False, "error": str(exc)}
                except Exception as exc:  # one failed target must not stop the others
                    r = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
                r["wall_s"] = round(time.perf_counter() - t0, 2)
                if wl == "latency" and name == "headwater" and r["ok"]:
                    r["storage_floor"] = storage_floor(
                        t.emu, p.latency_iters, p.latency_warmup, p.latency_bytes, p.settle_ms
                    )
                    f = r["storage_floor"]
                    log(
                        f"  {'floor':9s} p50_ms {f['p50_ms']:.2f} ms: {f['calls']} alone, "
                        f"{f['settle_ms']:g} ms after the head GetItem ({f['read_p50_ms']:.2f} "
                        f"ms); back to back {f['hot_p50_ms']:.2f} ms; {f['cpu_ms_per_op']:.3f} "
                        "ms CPU for both"
                    )
                workloads[wl][name] = r
                if r["ok"]:
                    metric, unit, _ = PRIMARY[wl]
                    extra = (
                        f" ({r['aws_calls_per_op_total']:.2f} AWS calls/op)"
                        if "aws_calls_per_op_total" in r
                        else ""
                    )
                    log(
                        f"  {name:9s} {metric} {r[metric]:,.2f} {unit}; p50/p95/p99 "
                        f"{r['p50_ms']:.2f}/{r['p95_ms']:.2f}/{r['p99_ms']:.2f} ms{extra} "
                        f"[{r['wall_s']:.1f} s]"
                    )
                else:
                    log(f"  {name:9s} FAILED: {r['error']}")
    finally:
        for t in targets.values():
            with contextlib.suppress(Exception):
                t.close()
    result: dict[str, Any] = {
        **result_header("durable", argv, machine),
        "settings": {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(p).items()},
        "reference": {"package": "@durable-streams/server", "version": _ref_version()},
        "primary_metrics": {
            k: {"metric": m, "unit": u, "higher_is_better": h} for k, (m, u, h) in PRIMARY.items()
        },
        "goals": {k: list(v) for k, v in GOALS.items()},
        "workloads": workloads,
        "wall_s": round(time.perf_counter() - t_start, 1),
    }
    result["ratios"] = ratios(workloads)
    result["conditions"] = {"start": start, "end": conditions()}
    result["conditions"]["warnings"] = condition_warnings(result)
    log("\n" + render(result))
    write_results(out_path, result)
    return result


PUBLISHED_CALIBRATION_MS = 20.0  # cpu_calibration_ms of the runs docs/benchmarks.md quotes
OTHER_CORES_WARN = 0.15  # other work on the machine during a timed window, in cores


def conditions() -> dict[str, Any]:
    """What a run's figures depend on besides the code (docs/benchmarks.md "What the
    Durable Streams figures depend on"): the machine's load, and how fast it runs Python."""
    load = None
    with contextlib.suppress(OSError):
        load = round(os.getloadavg()[0], 2)
    return {"loadavg_1m": load, "cpu_calibration_ms": cpu_calibration_ms()}


def condition_warnings(result: Mapping[str, Any]) -> list[str]:
    """Why this run's figures may not compare with the published ones."""
    out: list[str] = []
    start, end = result["conditions"]["start"], result["conditions"]["end"]
    cal = max(start["cpu_calibration_ms"], end["cpu_calibration_ms"])
    if cal > 1.25 * PUBLISHED_CALIBRATION_MS:
        out.append(
            f"this machine ran the calibration loop in {cal} ms against "
            f"{PUBLISHED_CALIBRATION_MS} ms for the published runs: a slower or shared core; "
            "ratios to the reference move with it (the reference's time is less Python)"
        )
    if abs(end["cpu_calibration_ms"] - start["cpu_calibration_ms"]) > 0.15 * cal:
        out.append(
            f"the calibration moved from {start['cpu_calibration_ms']} to "
            f"{end['cpu_calibration_ms']} ms during the run: the machine's load changed"
        )
    for wl, by_target in result["workloads"].items():
        for t, r in by_target.items():
            other = r.get("other_cores") if r.get("ok") else None
            if other is not None and other > OTHER_CORES_WARN:
                out.append(
                    f"{wl} @ {t}: other processes kept {other:.2f} cores busy in the timed window"
                )
            a, b = r.get("p50_first_half_ms"), r.get("p50_second_half_ms")
            if a and b and max(a, b) > 1.2 * min(a, b):
                out.append(
                    f"{wl} @ {t}: p50 {a:.2f} ms in the first half of the rounds, {b:.2f} ms "
                    "in the second: not steady (warm-up, or the load changed)"
                )
    return out


def _ref_version() -> str | None:
    try:
        pkg = REPO / "node_modules" / "@durable-streams" / "server" / "package.json"
        return str(json.loads(pkg.read_text())["version"])
    except (OSError, ValueError, KeyError):
        return None


def _csv(
    value: str, allowed: Sequence[str], flag: str, ap: argparse.ArgumentParser
) -> tuple[str, ...]:
    items = tuple(x.strip() for x in value.split(",") if x.strip())
    bad = [x for x in items if x not in allowed]
    if bad or not items:
        ap.error(f"{flag}: choose from {','.join(allowed)} (got {value!r})")
    return tuple(x for x in allowed if x in items)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    d = Params()
    ap.add_argument(
        "--targets",
        default=",".join(TARGETS),
        help=f"comma-separated subset of {','.join(TARGETS)}",
    )
    ap.add_argument(
        "--only",
        default=",".join(WORKLOADS),
        help=f"comma-separated subset of {','.join(WORKLOADS)}",
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help="short run: 20 latency rounds, 1 small and 1 large run, 20 x 1 MiB, "
        "2 passes over 2,000 catch-up messages",
    )
    ap.add_argument("--out", default=None, help="results JSON (default bench/results/...)")
    ap.add_argument(
        "--latency-iters", type=int, default=None, help=f"measured rounds ({d.latency_iters})"
    )
    ap.add_argument(
        "--latency-warmup", type=int, default=None, help=f"warm-up rounds ({d.latency_warmup})"
    )
    ap.add_argument(
        "--settle-ms",
        type=float,
        default=d.settle_ms,
        help="wait after sending the long-poll before appending",
    )
    ap.add_argument(
        "--small-count", type=int, default=None, help=f"small appends ({d.small_count})"
    )
    ap.add_argument("--small-conc", type=int, default=d.small_conc, help="small wave size")
    ap.add_argument("--small-runs", type=int, default=None, help=f"({d.small_runs})")
    ap.add_argument(
        "--large-count", type=int, default=None, help=f"1 MiB appends ({d.large_count})"
    )
    ap.add_argument("--large-bytes", type=int, default=d.large_bytes, help="large message size")
    ap.add_argument("--large-conc", type=int, default=d.large_conc, help="large wave size")
    ap.add_argument("--large-runs", type=int, default=None, help=f"({d.large_runs})")
    ap.add_argument(
        "--read-messages",
        type=int,
        default=None,
        help=f"messages in the catch-up stream ({d.read_messages})",
    )
    ap.add_argument(
        "--read-runs", type=int, default=None, help=f"timed catch-up passes ({d.read_runs})"
    )
    ap.add_argument("--runs", type=int, default=None, help="runs/passes for small, large, catchup")
    args = ap.parse_args(argv)
    q = args.quick

    p = Params(
        latency_iters=args.latency_iters or (20 if q else d.latency_iters),
        latency_warmup=d.latency_warmup if args.latency_warmup is None else args.latency_warmup,
        settle_ms=args.settle_ms,
        small_count=args.small_count or d.small_count,
        small_conc=args.small_conc,
        small_runs=args.small_runs or args.runs or (1 if q else d.small_runs),
        large_count=args.large_count or (20 if q else d.large_count),
        large_bytes=args.large_bytes,
        large_conc=args.large_conc,
        large_runs=args.large_runs or args.runs or (1 if q else d.large_runs),
        read_messages=args.read_messages or (2000 if q else d.read_messages),
        read_runs=args.read_runs or args.runs or (2 if q else d.read_runs),
        targets=_csv(args.targets, TARGETS, "--targets", ap),
        only=_csv(args.only, WORKLOADS, "--only", ap),
    )
    for name in (
        "latency_iters",
        "small_count",
        "small_conc",
        "small_runs",
        "large_count",
        "large_bytes",
        "large_conc",
        "large_runs",
        "read_messages",
        "read_runs",
    ):
        if getattr(p, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    out_path = Path(args.out or RESULTS / "latest-durable.json")
    return run(p, out_path, argv)


if __name__ == "__main__":
    main()
