"""Benchmark v0: append throughput at batch 1/100/1000, diff throughput, and group commit.

    python -m bench.bench_v0 [--quick] [--runs N] [--backend moto|ddblocal] [--client raw|httpx]

Processes: the emulator (moto, as `make run` uses; or DynamoDB Local for DynamoDB with moto
for S3), the app served by uvicorn from bench/server.py (AWS calls counted there), a second
app process with its frame cache off for cold reads, and the load generator in 1-2 spawned
client processes, so no two of them share a GIL. Each workload gets fresh tables and fresh
server processes. The default load generator is a minimal asyncio HTTP/1.1 keep-alive
client: httpx.AsyncClient costs ~2 ms CPU per request, which on 2 cores starves the server.

Workloads (1 KB records: JSON `{"p": "<1016 base64 chars>"}`, random, so frames compress
only ~25%: a worst case for storage cost):
- append-bN: 4 concurrent clients, each appending batches of N to its own topic.
- append-b100x16: 16 concurrent clients appending batches of 100 to ONE topic.
- append-1x32: 32 concurrent clients appending one record each to ONE topic (group commit).
- diff / diff-cold: one reader reads a 100k-record topic (written in batches of 100) end to
  end with limit=1000, through the server that wrote it (frame cache on) and through a fresh
  server with its frame cache off (every read from DynamoDB, as on a cold Lambda).
Results go to bench/results/latest-v0[-ddblocal].json.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import random
import resource
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

from bench.harness import (
    PRICES,
    RemoteCallCounter,
    RunResult,
    Target,
    Workload,
    barrier_main,
    machine_info,
    report,
    result_header,
    run_processes,
    run_workload,
    write_results,
)

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
RECORD_BYTES = 1024
DIFF_LIMIT = 1000
LOAD_BATCH = 100


# --- records ------------------------------------------------------------------------------
def make_body(batch: int, seed: int) -> bytes:
    """An append body of `batch` 1 KB records (each record's data is 1024 bytes of JSON)."""
    rng = random.Random(seed)
    pad = RECORD_BYTES - len('{"p":""}')
    pool = [base64.b64encode(rng.randbytes(pad))[:pad].decode() for _ in range(min(batch, 64))]
    records = [{"data": {"p": pool[i % len(pool)]}} for i in range(batch)]
    return json.dumps({"records": records}, separators=(",", ":")).encode()


def _num(body: bytes, name: bytes) -> float | None:
    """A numeric field of the response envelope. Envelope fields follow `records`, so the
    last occurrence is the envelope's own even if record data contains the same text."""
    i = body.rfind(b'"' + name + b'":')
    if i < 0:
        return None
    j = k = i + len(name) + 3
    while k < len(body) and body[k] in b"0123456789.-eE":
        k += 1
    return float(body[j:k])


# --- load generator (runs in spawned client processes) ------------------------------------
async def read_body(r: asyncio.StreamReader, head: bytes) -> bytes:
    """The body after response `head`: Content-Length or chunked (none for 204 and 304)."""
    if head[9:12] in (b"204", b"304"):
        return b""
    length = -1
    chunked = False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"transfer-encoding" and b"chunked" in value.lower():
            chunked = True
    if chunked:
        parts = []
        while True:
            size = int((await r.readuntil(b"\r\n")).split(b";")[0], 16)
            data = await r.readexactly(size + 2)
            if size == 0:
                return b"".join(parts)
            parts.append(data[:-2])
    if length < 0:
        raise RuntimeError("response without Content-Length")
    return await r.readexactly(length)


async def sse_stream(base_url: str, request: bytes) -> AsyncIterator[tuple[list[bytes], int]]:
    """Send one prebuilt HTTP/1.1 request for an SSE stream on a fresh connection; yield
    (complete frames, arrival monotonic ns) as chunks arrive, until the stream ends."""
    hostport = base_url.split("://", 1)[1].rstrip("/")
    host, _, port = hostport.partition(":")
    r, w = await asyncio.open_connection(host, int(port or 80), limit=1 << 22)
    try:
        w.write(request)
        await w.drain()
        head = await r.readuntil(b"\r\n\r\n")
        if head[9:12] != b"200":
            rest = await asyncio.wait_for(r.read(2000), 5)
            line = request.split(b"\r\n", 1)[0].decode()
            raise RuntimeError(f"{line}: {head[:12]!r} {rest[:300]!r}")
        chunked = b"transfer-encoding: chunked" in head.lower()
        buf = b""
        while True:
            if chunked:
                size = int((await r.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    return
                data = (await r.readexactly(size + 2))[:-2]
            else:
                data = await r.read(1 << 16)
                if not data:
                    return
            now = time.monotonic_ns()
            buf += data
            *frames, buf = buf.split(b"\n\n")
            if frames:
                yield frames, now
    finally:
        w.close()
        with contextlib.suppress(Exception):
            await w.wait_closed()


class RawHttp:
    """A minimal HTTP/1.1 keep-alive client on one asyncio connection: a prebuilt request
    per call, Content-Length or chunked responses. ~20x less CPU per request than httpx,
    which matters when the load generator shares 2 cores with the server and emulator."""

    def __init__(self, base_url: str, headers: str = "", limit: int = 1 << 20) -> None:
        """`headers`: extra header lines sent with every request ("Name: value\\r\\n"...)."""
        hostport = base_url.split("://", 1)[1].rstrip("/")
        self.host, _, port = hostport.partition(":")
        self.port = int(port or 80)
        self.hostport = hostport
        self.headers = headers
        self.limit = limit
        self._r: asyncio.StreamReader | None = None
        self._w: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        return await self.request("POST", path, body)

    async def request(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        stamp: list[int] | None = None,
        heads: list[bytes] | None = None,
    ) -> tuple[int, bytes]:
        """One request with a JSON body; `stamp` receives monotonic_ns taken just before
        the request is written, `heads` the response's head (status line and headers)."""
        if self._w is None:
            self._r, self._w = await asyncio.open_connection(self.host, self.port, limit=self.limit)
        assert self._r is not None
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self.hostport}\r\n{self.headers}"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        if stamp is not None:
            stamp.append(time.monotonic_ns())
        self._w.writelines([head, body])
        await self._w.drain()
        raw = await self._r.readuntil(b"\r\n\r\n")
        if heads is not None:
            heads.append(raw)
        return int(raw[9:12]), await read_body(self._r, raw)

    async def close(self) -> None:
        if self._w is not None:
            self._w.close()
            with contextlib.suppress(Exception):
                await self._w.wait_closed()


class HttpxPoster:
    def __init__(self, client: Any) -> None:
        self.client = client

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        r = await self.client.post(path, content=body)
        return r.status_code, r.content


def client_process(spec: dict[str, Any], ready: Any, go: Any, out: Any) -> None:
    barrier_main(_client_main, spec, ready, go, out)


async def _client_main(spec: dict[str, Any], ready: Any, go: Any) -> dict[str, Any]:
    n = spec["tasks"]
    httpx_client = None
    posters: list[Any]
    if spec.get("client", "raw") == "httpx":
        import httpx

        limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
        # httpx asks for gzip by default; the spec says clients default compression off.
        headers = {"content-type": "application/json", "accept-encoding": "identity"}
        httpx_client = httpx.AsyncClient(
            base_url=spec["base_url"], limits=limits, timeout=120.0, headers=headers
        )
        posters = [HttpxPoster(httpx_client)] * n
    else:
        posters = [RawHttp(spec["base_url"]) for _ in range(n)]
    lat: list[float] = []
    server_ms = 0.0
    errors: list[str] = []
    try:
        if spec["kind"] == "append":
            bodies = [make_body(spec["batch"], spec["seed"] + t) for t in range(n)]
            paths = [f"/v0/topics/{spec['topics'][t]}" for t in range(n)]
            # Warm-up (creates the topics, opens the connections): not timed, not counted.
            warm = await asyncio.gather(*(posters[t].post(paths[t], bodies[t]) for t in range(n)))
            for status, content in warm:
                if status >= 300:
                    raise RuntimeError(f"warm-up append failed: {status} {content[:300]!r}")
        ready.wait()
        go.wait()
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        deadline = t0 + spec.get("duration", 1e9)
        max_ops = spec.get("max_ops")
        counts = {"ops": 0, "records": 0}

        async def append_task(t: int) -> None:
            nonlocal server_ms
            while time.perf_counter() < deadline and (max_ops is None or counts["ops"] < max_ops):
                counts["ops"] += 1
                s = time.perf_counter()
                status, content = await posters[t].post(paths[t], bodies[t])
                lat.append((time.perf_counter() - s) * 1000)
                if status >= 300:
                    errors.append(f"{status} {content[:200]!r}")
                    continue
                counts["records"] += spec["batch"]
                server_ms += _num(content, b"server_total_ms") or 0.0

        async def diff_task() -> None:
            nonlocal server_ms
            cur, upto = spec["from_seq"], spec["upto_seq"]
            path = f"/v0/topics/{spec['topic']}/diff"
            first = True
            while cur < upto:
                body = json.dumps({"from_seq": cur, "limit": spec["limit"]}).encode()
                s = time.perf_counter()
                status, content = await posters[0].post(path, body)
                lat.append((time.perf_counter() - s) * 1000)
                counts["ops"] += 1
                if status >= 300:
                    errors.append(f"{status} {content[:200]!r}")
                    break
                nxt = int(_num(content, b"next_from_seq") or cur)
                if first:  # one full parse to check the shape; the rest use the envelope
                    recs = json.loads(content)["records"]
                    if not recs or recs[0]["$seq"] != cur + 1:
                        errors.append(f"diff from {cur} did not begin at {cur + 1}")
                    first = False
                if nxt <= cur:
                    errors.append(f"diff made no progress at {cur}")
                    break
                counts["records"] += nxt - cur
                server_ms += _num(content, b"server_total_ms") or 0.0
                cur = nxt

        if spec["kind"] == "append":
            await asyncio.gather(*(append_task(t) for t in range(n)))
        else:
            await diff_task()
        elapsed = time.perf_counter() - t0
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
    finally:
        if httpx_client is not None:
            await httpx_client.aclose()
        else:
            for p in posters:
                await p.close()
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    return {
        "ops": counts["ops"],
        "records": counts["records"],
        "elapsed_s": elapsed,
        "latencies_ms": lat,
        "server_ms_total": server_ms,
        "errors": errors,
        "cpu_s": cpu,
    }


def run_clients(specs: list[dict[str, Any]], begin: Any) -> RunResult:
    """Start one process per spec, wait for their warm-up, call begin(), release them."""
    parts = run_processes(client_process, specs, begin)
    errors = [e for p in parts for e in p["errors"]]
    if errors:
        print(f"  !! {len(errors)} failed requests, first: {errors[0]}", file=sys.stderr)
    return RunResult(
        ops=sum(p["ops"] for p in parts),
        records=sum(p["records"] for p in parts),
        elapsed_s=max(p["elapsed_s"] for p in parts),
        latencies_ms=[x for p in parts for x in p["latencies_ms"]],
        server_ms_total=sum(p["server_ms_total"] for p in parts),
        errors=len(errors),
        cpu_s={"clients": sum(p["cpu_s"] for p in parts)},
    )


# --- server processes ---------------------------------------------------------------------
class BenchServer:
    def __init__(self, name: str, env: dict[str, str]) -> None:
        from headwater.dev.emulator import free_port

        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, **env, "TOPICS_HOST": "127.0.0.1", "TOPICS_PORT": str(self.port)}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60) -> BenchServer:
        from headwater.dev.emulator import die_with_parent

        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.server"],
            cwd=REPO,
            env=self.env,
            preexec_fn=die_with_parent,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}")
            try:
                with urllib.request.urlopen(f"{self.url}/v0/health", timeout=2):
                    return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"{self.name} did not start on {self.url}")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self) -> None:
        from headwater.dev.emulator import stop_process

        stop_process(self.proc, grace_s=15)
        self.proc = None


# --- the benchmark ------------------------------------------------------------------------
class Emulators:
    """moto (S3, and DynamoDB unless --backend ddblocal) plus optional DynamoDB Local."""

    def __init__(self, backend: str) -> None:
        from headwater.dev.emulator import MotoServer

        self.backend = backend
        self.moto = MotoServer().start()
        self.ddblocal: Any = None
        if backend == "ddblocal":
            from headwater.dev.ddblocal import DynamoDBLocal

            try:
                self.ddblocal = DynamoDBLocal().start()
            except BaseException:
                self.moto.stop()
                raise

    def env(self) -> dict[str, str]:
        env = self.moto.env()
        if self.ddblocal is not None:
            env.update(self.ddblocal.env())
        return env

    def pids(self) -> dict[str, int]:
        out = {"moto": self.moto._proc.pid}  # type: ignore[union-attr]
        if self.ddblocal is not None:
            out["ddblocal"] = self.ddblocal._proc.pid
        return out

    def stop(self) -> None:
        if self.ddblocal is not None:
            self.ddblocal.stop()
        self.moto.stop()


@contextlib.contextmanager
def fresh_servers(
    emu: Emulators, names: list[str], extra_env: Mapping[str, str] | None = None
) -> Iterator[dict[str, BenchServer]]:
    """Server processes on a fresh resource prefix (new tables): moto's TransactWriteItems
    deep-copies every table it touches, stream history included, so a table's past slows
    every later append; fresh tables keep workloads independent of each other. `extra_env`
    goes to every server (settings under test)."""
    prefix = f"bench-{uuid.uuid4().hex[:6]}"
    env = {**emu.env(), "HEADWATER_RESOURCE_PREFIX": prefix, **(extra_env or {})}
    servers: dict[str, BenchServer] = {}
    try:
        for name in names:
            extra = {"HEADWATER_FRAME_CACHE_BYTES": "0"} if name == "cold-reader" else {}
            servers[name] = BenchServer(name, {**env, **extra}).start()
        yield servers
    finally:
        for srv in servers.values():
            srv.stop()


def append_workload(
    name: str,
    batch: int,
    clients: int,
    procs: int,
    duration: float,
    one_topic: bool,
    target: Target | None,
) -> Workload:
    where = "one shared topic" if one_topic else "one topic per client"
    return Workload(
        name=name,
        description=f"{clients} concurrent clients append batches of {batch} x 1 KB records "
        f"to {where}, for {duration:g} s",
        op=f"POST /v0/topics/:topic ({batch} record{'s' if batch > 1 else ''})",
        records_per_op=batch,
        record_bytes=RECORD_BYTES,
        clients=clients,
        client_processes=procs,
        duration_s=duration,
        target=target,
        params={"batch": batch, "one_topic": one_topic},
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short smoke run (1 run, 3 s each)")
    ap.add_argument("--runs", type=int, default=None, help="runs per workload (default 3)")
    ap.add_argument("--duration", type=float, default=None, help="seconds per append run")
    ap.add_argument("--diff-records", type=int, default=None, help="records in the diff topic")
    ap.add_argument("--only", default="", help="comma-separated workload names to run")
    ap.add_argument(
        "--backend",
        choices=("moto", "ddblocal"),
        default="moto",
        help="DynamoDB emulator: moto (as `make run`) or DynamoDB Local (S3 stays moto)",
    )
    ap.add_argument(
        "--client",
        choices=("raw", "httpx"),
        default="raw",
        help="load generator HTTP client (raw asyncio HTTP/1.1, or httpx.AsyncClient)",
    )
    ap.add_argument("--out", default=None, help="results JSON (default bench/results/...)")
    args = ap.parse_args(argv)
    runs = args.runs or (1 if args.quick else 3)
    duration = args.duration or (3.0 if args.quick else 10.0)
    diff_records = args.diff_records or (20_000 if args.quick else 100_000)
    only = {x for x in args.only.split(",") if x}
    suffix = "" if args.backend == "moto" else f"-{args.backend}"
    out_path = Path(args.out or RESULTS / f"latest-v0{suffix}.json")

    from headwater.storage.schema import TABLES

    machine = machine_info()
    print(
        f"bench v0 | backend {args.backend} | client {args.client} | {machine['cpu_model']} "
        f"x{machine['cores']} | Python {machine['python']} | {machine['os']} | runs={runs} "
        f"duration={duration:g}s diff_records={diff_records} | load {machine.get('loadavg_1m')}"
    )
    summaries: list[dict[str, Any]] = []
    emu = Emulators(args.backend)
    try:
        appends = [
            append_workload("append-b1", 1, 4, 1, duration, False, None),
            append_workload(
                "append-b100",
                100,
                4,
                1,
                duration,
                False,
                Target("records_per_s", 20_000, ">= 20,000 rec/s"),
            ),
            # The same batches from 16 producers on one topic: group commit folds concurrent
            # batches into one S3 object + one transaction, so throughput is not bounded by
            # each client's round trip.
            append_workload(
                "append-b100x16",
                100,
                16,
                2,
                duration,
                True,
                Target("records_per_s", 20_000, ">= 20,000 rec/s"),
            ),
            append_workload("append-b1000", 1000, 4, 1, duration, False, None),
            append_workload(
                "append-1x32",
                1,
                32,
                2,
                duration,
                True,
                Target("ops_per_s", 1_000, ">= 1,000 appends/s"),
            ),
        ]
        for wl in appends:
            if only and wl.name not in only:
                continue
            print(f"\n== {wl.name}: {wl.description}")
            with fresh_servers(emu, ["server"]) as srv:
                summaries.append(
                    run_workload(
                        wl,
                        _append_runner(wl, srv["server"].url, args.client),
                        repeats=runs,
                        counter=RemoteCallCounter([srv["server"].url]),
                        cpu_pids={"server": srv["server"].pid, **emu.pids()},
                        gsi_count=_gsi(srv["server"], TABLES),
                    )
                )
        if not only or only & {"diff", "diff-cold"}:
            with fresh_servers(emu, ["server", "cold-reader"]) as srv:
                summaries.extend(
                    _diff_workloads(srv, emu, diff_records, runs, only, args.client, TABLES)
                )
    finally:
        emu.stop()
    text = report(summaries, machine)
    print("\n" + text)
    _delivery_note(summaries)
    result = {
        **result_header("v0", argv, machine),
        "settings": {
            "backend": args.backend,
            "client": args.client,
            "runs": runs,
            "duration_s": duration,
            "diff_records": diff_records,
        },
        "prices": PRICES,
        "workloads": summaries,
    }
    write_results(out_path, result)
    return result


def _gsi(server: BenchServer, tables: Any) -> dict[str, int]:
    """Indexes a write to each table also pays for. A KEYS_ONLY index whose key attributes
    an update never touches (the heads listing index: only create/delete change it) costs
    nothing on the hot path, so only ALL/INCLUDE projections count."""
    prefix = server.env["HEADWATER_RESOURCE_PREFIX"]
    return {
        f"{prefix}-{t.logical}": sum(1 for ix in t.indexes if ix.projection != "KEYS_ONLY")
        for t in tables
    }


def _diff_workloads(
    srv: dict[str, BenchServer],
    emu: Emulators,
    diff_records: int,
    runs: int,
    only: set[str],
    client: str,
    tables: Any,
) -> list[dict[str, Any]]:
    writer = srv["server"]
    topic = f"diff-{uuid.uuid4().hex[:6]}"
    print(
        f"\n== loading {diff_records:,} records into {topic} (batches of {LOAD_BATCH}, one client)"
    )
    t0 = time.perf_counter()
    load = run_clients(
        [
            {
                "kind": "append",
                "tasks": 1,
                "batch": LOAD_BATCH,
                "seed": 7,
                "topics": [topic],
                "base_url": writer.url,
                "max_ops": diff_records // LOAD_BATCH - 1,
                "client": client,
            }
        ],
        lambda: None,
    )
    total = load.records + LOAD_BATCH  # + the warm-up append
    print(
        f"   loaded {total:,} records in {time.perf_counter() - t0:.1f} s "
        f"({load.records_per_s:,.0f} rec/s)"
    )
    out = []
    for name, server, note in (
        ("diff", writer, "through the server that wrote it (frame cache 128 MB)"),
        ("diff-cold", srv["cold-reader"], "through a second server with its frame cache off"),
    ):
        if only and name not in only:
            continue
        wl = Workload(
            name=name,
            description=f"one reader reads {total:,} records end to end with limit={DIFF_LIMIT}"
            f", {note}",
            op=f"POST /v0/topics/:topic/diff (limit {DIFF_LIMIT})",
            records_per_op=DIFF_LIMIT,
            record_bytes=RECORD_BYTES,
            clients=1,
            target=Target("records_per_s", 50_000, ">= 50,000 rec/s"),
            params={"topic_records": total, "written_in_batches_of": LOAD_BATCH},
        )
        print(f"\n== {wl.name}: {wl.description}")
        spec = {
            "kind": "diff",
            "tasks": 1,
            "topic": topic,
            "from_seq": 0,
            "upto_seq": total,
            "limit": DIFF_LIMIT,
            "base_url": server.url,
            "client": client,
        }
        out.append(
            run_workload(
                wl,
                _diff_runner(spec),
                repeats=runs,
                counter=RemoteCallCounter([s.url for s in srv.values()]),
                cpu_pids={"server": server.pid, **emu.pids()},
                gsi_count=_gsi(server, tables),
            )
        )
    return out


def _append_runner(wl: Workload, base_url: str, client: str) -> Any:
    batch = wl.params["batch"]
    procs = wl.client_processes
    per = [wl.clients // procs + (1 if i < wl.clients % procs else 0) for i in range(procs)]

    def run_once(i: int, begin: Any) -> RunResult:
        tag = uuid.uuid4().hex[:6]
        specs = []
        for p, tasks in enumerate(per):
            if wl.params["one_topic"]:
                topics = [f"{wl.name}-{tag}"] * tasks
            else:
                topics = [f"{wl.name}-{tag}-{p}-{t}" for t in range(tasks)]
            specs.append(
                {
                    "kind": "append",
                    "tasks": tasks,
                    "batch": batch,
                    "seed": 100 * p,
                    "topics": topics,
                    "base_url": base_url,
                    "duration": wl.duration_s,
                    "client": client,
                }
            )
        return run_clients(specs, begin)

    return run_once


def _diff_runner(spec: dict[str, Any]) -> Any:
    def run_once(i: int, begin: Any) -> RunResult:
        return run_clients([spec], begin)

    return run_once


def _delivery_note(summaries: list[dict[str, Any]]) -> None:
    """Issue 5's reference figure: $ per million 1 KB events, ingest + one delivery."""
    by = {s["workload"]["name"]: s for s in summaries}
    read = by.get("diff-cold") or by.get("diff")
    if read is None:
        return
    d = read["usd_per_million_events"]
    for name, limit in (("append-b1", 1.00), ("append-b100", 0.05)):
        if name in by:
            a = by[name]["usd_per_million_events"]
            print(
                f"$/M 1 KB events, {name} ingest + one {read['workload']['name']} delivery: "
                f"DDB+S3 {a['usd_storage'] + d['usd_storage']:.3f}, with Lambda "
                f"{a['usd_total'] + d['usd_total']:.3f} (issue 5 target <= {limit:.2f})"
            )


if __name__ == "__main__":
    main()
