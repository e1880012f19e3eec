"""Benchmark tiering: reads of sealed history (S3 segments), a long log, 1 MB records, and
the cost of ingest + one delivery per million events.

    python -m bench.bench_tiering [--quick] [--runs N] [--only a,b] [--out PATH]

Same machinery as bench_v0 (imported, not copied): moto as the emulator, the app served by
uvicorn from bench/server.py with AWS calls counted there, load in spawned client processes,
and bench/harness.py for medians, percentiles, calls and cost. Server roles:
- loader: appends; sealing off (HEADWATER_TIERING_INLINE=0, HEADWATER_TIERING_INTERVAL_MS=0)
  unless the workload says otherwise, so its tail stays in DynamoDB;
- sealer: a second process whose in-process sweep timer (250 ms) seals everything
  (HEADWATER_SEAL_AGE_MS=0, HEADWATER_SEAL_RECORDS=4096) and trims at once
  (HEADWATER_SEAL_GRACE_MS=0); its counted calls are the cost of sealing;
- reader: a fresh process per run (nothing cached from writing or an earlier run) with an
  8 MiB frame cache (HEADWATER_FRAME_CACHE_BYTES, READER_CACHE_BYTES): far smaller than
  every log read here, so each block is fetched from S3 once per pass; the cache holds the
  sealed reader's 1 MiB read-ahead (decoded blocks go into the same cache) and nothing else.

Workloads:
- diff-tail / seal / diff-sealed: N 1 KB records (bench_v0's random records, batches of
  100) read end to end (limit 1000) from the DynamoDB tail; then sealed by the sealer
  (counted); then read end to end again from the S3 segments.
- seal-b1: the same seal + trim of a log written one record per append (one frame per
  record; the trim deletes nothing: the frames' TTL does, for free, and the table below
  counts their storage until then).
- long-log / long-log-2r: >= 1,000,000 small JSON events (~150 B: a counter, a user, a kind
  and 64 random base64 chars) appended in batches of 1000 by 4 clients in 2 processes to
  one topic (group commit) through a loader that seals while it loads; read end to end,
  limit 1000, by one reader, and by two reader processes each with its own reader server
  on disjoint halves.
- append-1mb / read-1mb: 1 MB records, one per append, 2 clients each on its own topic
  (frames > 300 KB go to S3 first: one PutObject + one transaction per record), then one
  topic read back end to end through a fresh reader.
- append-b1 / append-b100: bench_v0's append workloads (shorter), for the cost table.
The cost table: $ per million 1 KB events = append + one delivery from the tail (diff-tail,
a cold reader) + sealing (seal or seal-b1: segment PUT, frame reads, seal commit, trim).
Results go to bench/results/latest-tiering.json.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import random
import resource
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.bench_v0 import (
    DIFF_LIMIT,
    RECORD_BYTES,
    BenchServer,
    Emulators,
    RawHttp,
    _append_runner,
    _gsi,
    append_workload,
    make_body,
    run_clients,
)
from bench.harness import (
    PRICES,
    RemoteCallCounter,
    RunResult,
    Target,
    Workload,
    barrier_main,
    format_table,
    machine_info,
    report,
    result_header,
    run_processes,
    run_workload,
    write_results,
)

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
READER_CACHE_BYTES = 8 << 20
SEALER_INTERVAL_MS = 250
EVENT_BYTES = 150
BIG_LIMIT = 5000  # long-log-l5k: ~175 B per rendered record stays under the 1 MiB response cap
MB_RECORD_BYTES = 1_000_000
SEAL_ENV = {
    "HEADWATER_SEAL_RECORDS": "4096",
    "HEADWATER_SEAL_AGE_MS": "0",
    "HEADWATER_SEAL_GRACE_MS": "0",
    "HEADWATER_TIERING_INTERVAL_MS": str(SEALER_INTERVAL_MS),
    "HEADWATER_TIERING_INLINE": "1",
}
NO_SEAL_ENV = {"HEADWATER_TIERING_INLINE": "0", "HEADWATER_TIERING_INTERVAL_MS": "0"}
READER_ENV = {**NO_SEAL_ENV, "HEADWATER_FRAME_CACHE_BYTES": str(READER_CACHE_BYTES)}
WRITE_APIS = (
    "DynamoDB.TransactWriteItems",
    "DynamoDB.BatchWriteItem",
    "DynamoDB.UpdateItem",
    "DynamoDB.PutItem",
    "DynamoDB.DeleteItem",
    "S3.PutObject",
    "S3.DeleteObjects",
    "S3.DeleteObject",
)


# --- records and the loader client ---------------------------------------------------------
def event_body(batch: int, seed: int) -> bytes:
    """A batch of ~150 B JSON events: mostly repetitive fields plus 64 random base64 chars
    (compresses roughly 2x, like typical event payloads)."""
    rng = random.Random(seed)
    kinds = ("page_view", "click", "add_to_cart", "purchase", "login")
    records = []
    for i in range(batch):
        data = {
            "i": seed * 1_000_003 + i,
            "user": f"user-{rng.randrange(100_000):05d}",
            "kind": kinds[rng.randrange(len(kinds))],
            "page": f"/p/{rng.randrange(1_000_000)}",
            "ok": True,
            "p": base64.b64encode(rng.randbytes(48)).decode(),
        }
        records.append({"data": data})
    return json.dumps({"records": records}, separators=(",", ":")).encode()


def big_body(seed: int, size: int = MB_RECORD_BYTES) -> bytes:
    """One record whose data is `size` bytes of JSON ({"p": "<random base64>"})."""
    rng = random.Random(seed)
    pad = size - len('{"p":""}')
    p = base64.b64encode(rng.randbytes(pad))[:pad].decode()
    return json.dumps({"records": [{"data": {"p": p}}]}, separators=(",", ":")).encode()


def _body(kind: str, batch: int, seed: int) -> bytes:
    if kind == "event":
        return event_body(batch, seed)
    if kind == "mb":
        return big_body(seed)
    return make_body(batch, seed)


def load_process(spec: dict[str, Any], ready: Any, go: Any, out: Any) -> None:
    barrier_main(_load_main, spec, ready, go, out)


async def _load_main(spec: dict[str, Any], ready: Any, go: Any) -> dict[str, Any]:
    """`tasks` connections append `batch`-record bodies of `body` kind to `topics[t]` until
    `max_ops` appends (this process) or `duration` seconds. Bodies vary by seed (up to 8)."""
    n = spec["tasks"]
    posters = [RawHttp(spec["base_url"]) for _ in range(n)]
    bodies = [_body(spec["body"], spec["batch"], spec["seed"] + k) for k in range(spec["bodies"])]
    paths = [f"/v0/topics/{spec['topics'][t]}" for t in range(n)]
    lat: list[float] = []
    errors: list[str] = []
    counts = {"ops": 0, "records": 0}
    try:
        ready.wait()
        go.wait()
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        deadline = t0 + spec.get("duration", 1e9)
        max_ops = spec.get("max_ops")

        async def task(t: int) -> None:
            k = t
            while time.perf_counter() < deadline and (max_ops is None or counts["ops"] < max_ops):
                counts["ops"] += 1
                k += 1
                s = time.perf_counter()
                status, content = await posters[t].post(paths[t], bodies[k % len(bodies)])
                lat.append((time.perf_counter() - s) * 1000)
                if status >= 300:
                    errors.append(f"{status} {content[:200]!r}")
                    continue
                counts["records"] += spec["batch"]

        await asyncio.gather(*(task(t) for t in range(n)))
        elapsed = time.perf_counter() - t0
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
    finally:
        for p in posters:
            await p.close()
    return {
        "ops": counts["ops"],
        "records": counts["records"],
        "elapsed_s": elapsed,
        "latencies_ms": lat,
        "server_ms_total": 0.0,
        "errors": errors,
        "cpu_s": (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime),
    }


def run_loaders(specs: list[dict[str, Any]], begin: Any) -> RunResult:
    parts = run_processes(load_process, specs, begin, "loader")
    errors = [e for p in parts for e in p["errors"]]
    if errors:
        print(f"  !! {len(errors)} failed appends, first: {errors[0]}", file=sys.stderr)
    return RunResult(
        ops=sum(p["ops"] for p in parts),
        records=sum(p["records"] for p in parts),
        elapsed_s=max(p["elapsed_s"] for p in parts),
        latencies_ms=[x for p in parts for x in p["latencies_ms"]],
        errors=len(errors),
        cpu_s={"clients": sum(p["cpu_s"] for p in parts)},
    )


def load_topic(
    url: str, topic: str, records: int, batch: int, body: str, procs: int = 1, tasks: int = 1
) -> RunResult:
    """Append `records` (a multiple of batch x procs x tasks) to one topic, untimed."""
    ops = records // batch
    specs = [
        {
            "tasks": tasks,
            "batch": batch,
            "body": body,
            "bodies": 8 if batch > 1 else 64,
            "seed": 1000 * p,
            "topics": [topic] * tasks,
            "base_url": url,
            "max_ops": ops // procs + (1 if p < ops % procs else 0),
        }
        for p in range(procs)
    ]
    t0 = time.perf_counter()
    r = run_loaders(specs, lambda: None)
    print(
        f"   loaded {r.records:,} records into {topic} in {time.perf_counter() - t0:.1f} s "
        f"({r.records_per_s:,.0f} rec/s, batch {batch}, {procs}x{tasks} clients)"
    )
    return r


# --- servers and topic state ----------------------------------------------------------------
class Cluster:
    """The emulator and the server processes of one resource prefix (fresh tables)."""

    def __init__(self, emu: Emulators) -> None:
        self.emu = emu
        self.prefix = f"bench-{uuid.uuid4().hex[:6]}"
        self.servers: list[BenchServer] = []

    def start(self, name: str, env: dict[str, str]) -> BenchServer:
        base = {**self.emu.env(), "HEADWATER_RESOURCE_PREFIX": self.prefix}
        srv = BenchServer(name, {**base, **env}).start()
        self.servers.append(srv)
        return srv

    def stop(self, srv: BenchServer) -> None:
        srv.stop()
        with contextlib.suppress(ValueError):
            self.servers.remove(srv)

    def close(self) -> None:
        for srv in list(self.servers):
            self.stop(srv)


@contextlib.contextmanager
def cluster(emu: Emulators) -> Iterator[Cluster]:
    c = Cluster(emu)
    try:
        yield c
    finally:
        c.close()


def topic_state(url: str, topic: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/v0/topics/{topic}", timeout=30) as r:
        return json.loads(r.read())


def calls_snapshot(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/_bench/calls", timeout=10) as r:
        return json.loads(r.read())


def _writes(snap: dict[str, Any]) -> tuple[float, ...]:
    calls = snap.get("calls", {})
    return tuple(calls.get(api, {}).get("calls", 0.0) for api in WRITE_APIS)


def wait_sealed(sealer_url: str, topic: str, timeout_s: float, quiet_s: float = 1.5) -> float:
    """Wait until the topic's sealed_through reaches head_seq and the sealer has written
    nothing for `quiet_s` (the trim of the last segment done). Seconds until sealed."""
    t0 = time.perf_counter()
    deadline = t0 + timeout_s
    sealed_at = None
    last, still_since = _writes(calls_snapshot(sealer_url)), time.perf_counter()
    while time.perf_counter() < deadline:
        time.sleep(0.2)
        if sealed_at is None:
            st = topic_state(sealer_url, topic)
            if st["sealed_through"] >= st["head_seq"]:
                sealed_at = time.perf_counter() - t0
        w = _writes(calls_snapshot(sealer_url))
        if w != last:
            last, still_since = w, time.perf_counter()
        elif sealed_at is not None and time.perf_counter() - still_since >= quiet_s:
            return sealed_at
    st = topic_state(sealer_url, topic)
    raise RuntimeError(
        f"{topic} not sealed in {timeout_s:.0f} s: sealed_through {st['sealed_through']} "
        f"of head_seq {st['head_seq']}"
    )


class LateCounter:
    """A RemoteCallCounter over servers started inside a run (fresh reader per run)."""

    def __init__(self) -> None:
        self.urls: list[str] = []

    def reset(self) -> None:
        RemoteCallCounter(self.urls).reset()

    def snapshot(self) -> dict[str, Any]:
        return RemoteCallCounter(self.urls).snapshot()


# --- workloads --------------------------------------------------------------------------------
def read_workload(
    name: str,
    description: str,
    records: int,
    record_bytes: int,
    clients: int = 1,
    limit: int = DIFF_LIMIT,
    **params: Any,
) -> Workload:
    target = (
        Target("records_per_s", 100_000, ">= 100,000 rec/s")
        if records >= 1_000_000 or params.get("long")
        else None
    )
    return Workload(
        name=name,
        description=description,
        op=f"POST /v0/topics/:topic/diff (limit {limit})",
        records_per_op=limit,
        record_bytes=record_bytes,
        clients=clients,
        client_processes=clients,
        target=target,
        params={"topic_records": records, "reader_frame_cache_bytes": READER_CACHE_BYTES} | params,
    )


def measure_read(
    c: Cluster,
    wl: Workload,
    topic: str,
    total: int,
    runs: int,
    readers: int = 1,
    env: dict[str, str] | None = None,
    limit: int = DIFF_LIMIT,
) -> dict[str, Any]:
    """Read [0, total] end to end, split over `readers` reader servers + client processes
    (disjoint ranges), each run through freshly started reader servers."""
    print(f"\n== {wl.name}: {wl.description}")
    counter = LateCounter()
    pids: dict[str, int] = dict(c.emu.pids())
    running: list[BenchServer] = []  # stopped at the next run: run_workload samples their CPU

    def run_once(i: int, begin: Any) -> RunResult:
        while running:
            c.stop(running.pop())
        servers = [c.start(f"reader-{k}", env or READER_ENV) for k in range(readers)]
        running.extend(servers)
        counter.urls = [s.url for s in servers]
        for k in [k for k in pids if k.startswith("server")]:
            del pids[k]
        for k, s in enumerate(servers):
            pids["server" if readers == 1 else f"server{k}"] = s.pid
        step = -(-total // readers // limit) * limit
        specs = [
            {
                "kind": "diff",
                "tasks": 1,
                "topic": topic,
                "from_seq": k * step,
                "upto_seq": min(total, (k + 1) * step),
                "limit": limit,
                "base_url": s.url,
                "client": "raw",
            }
            for k, s in enumerate(servers)
        ]
        return run_clients(specs, begin)

    try:
        summary = run_workload(wl, run_once, repeats=runs, counter=counter, cpu_pids=pids)
    finally:
        while running:
            c.stop(running.pop())
    if readers > 1:  # one row of server CPU for the report: the sum over the readers
        ms = summary["cpu_ms_per_op"]
        ms["server"] = sum(v for k, v in ms.items() if k.startswith("server"))
        cores = summary["cpu_cores"]
        cores["server"] = sum(v for k, v in cores.items() if k.startswith("server"))
    return summary


def _tables() -> Any:
    from headwater.storage.schema import TABLES

    return TABLES


def seal_workload(name: str, records: int, batch: int) -> Workload:
    return Workload(
        name=name,
        description=f"seal + trim {records:,} x 1 KB records written in batches of {batch} "
        f"(sealer: HEADWATER_SEAL_AGE_MS=0, SEAL_RECORDS=4096, GRACE_MS=0, "
        f"{SEALER_INTERVAL_MS} ms sweep); one op = one segment",
        op="seal one segment (frames read, S3 PUT, seal commit, trim)",
        records_per_op=0,
        record_bytes=RECORD_BYTES,
        clients=1,
        params={"records": records, "written_in_batches_of": batch},
    )


def measure_seal(c: Cluster, wl: Workload, loader: BenchServer, topic: str, records: int) -> Any:
    """One run: start a sealer, count everything it does until the topic is sealed and
    trimmed. Ops = segments written (S3 PutObject calls)."""
    print(f"\n== {wl.name}: {wl.description}")
    counter = LateCounter()
    pids: dict[str, int] = dict(c.emu.pids())
    holder: dict[str, Any] = {}

    def run_once(i: int, begin: Any) -> RunResult:
        sealer = c.start("sealer", SEAL_ENV)
        holder["sealer"] = sealer
        counter.urls = [sealer.url]
        pids["server"] = sealer.pid
        begin()
        t0 = time.perf_counter()
        sealed_s = wait_sealed(sealer.url, topic, timeout_s=900)
        elapsed = time.perf_counter() - t0
        snap = calls_snapshot(sealer.url)
        segments = int(snap["calls"].get("S3.PutObject", {}).get("calls", 0))
        holder["snap"] = snap
        holder["sealed_s"] = sealed_s
        st = topic_state(sealer.url, topic)
        holder["state"] = st
        return RunResult(
            ops=max(segments, 1),
            records=records,
            elapsed_s=elapsed,
            latencies_ms=[1000 * sealed_s / max(segments, 1)],
        )

    summary = run_workload(wl, run_once, repeats=1, counter=counter, cpu_pids=pids)
    summary["sealed_after_s"] = holder["sealed_s"]
    summary["segments"] = summary["per_run"][0]["ops"]
    summary["topic_state"] = {
        k: holder["state"].get(k) for k in ("head_seq", "sealed_through", "earliest_seq")
    }
    return summary, holder["sealer"]


# --- the benchmark ----------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short smoke run (1 run, small logs)")
    ap.add_argument("--runs", type=int, default=None, help="runs per read workload (default 3)")
    ap.add_argument("--records", type=int, default=None, help="1 KB records for diff-sealed")
    ap.add_argument("--long-records", type=int, default=None, help="events in the long log")
    ap.add_argument("--b1-records", type=int, default=None, help="records for seal-b1")
    ap.add_argument("--duration", type=float, default=None, help="seconds per append run")
    ap.add_argument("--only", default="", help="comma-separated workload names to run")
    ap.add_argument("--out", default=None, help="results JSON (default bench/results/...)")
    args = ap.parse_args(argv)
    runs = args.runs or (1 if args.quick else 3)
    n_1k = args.records or (5_000 if args.quick else 100_000)
    n_long = args.long_records or (20_000 if args.quick else 1_000_000)
    n_b1 = args.b1_records or (200 if args.quick else 1_000)
    duration = args.duration or (2.0 if args.quick else 5.0)
    only = {x for x in args.only.split(",") if x}
    out_path = Path(args.out or RESULTS / "latest-tiering.json")

    def want(*names: str) -> bool:
        return not only or bool(only & set(names))

    machine = machine_info()
    print(
        f"bench tiering | moto | {machine['cpu_model']} x{machine['cores']} | Python "
        f"{machine['python']} | runs={runs} 1k-records={n_1k} long-records={n_long} "
        f"b1-records={n_b1} duration={duration:g}s | load {machine.get('loadavg_1m')}"
    )
    summaries: list[dict[str, Any]] = []
    extra: dict[str, Any] = {}
    emu = Emulators("moto")
    try:
        if want("diff-tail", "seal", "diff-sealed"):
            summaries += _sealed_1k(emu, n_1k, runs, only)
        if want("seal-b1"):
            with cluster(emu) as c:
                loader = c.start("loader", NO_SEAL_ENV)
                topic = f"b1-{uuid.uuid4().hex[:6]}"
                print(f"\n== loading {n_b1:,} x 1 KB records into {topic}, one per append")
                load_topic(loader.url, topic, n_b1, 1, "1k")
                s, _ = measure_seal(c, seal_workload("seal-b1", n_b1, 1), loader, topic, n_b1)
                summaries.append(s)
        if want("long-log", "long-log-2r", "long-log-l5k"):
            summaries += _long_log(emu, n_long, runs, only, extra)
        if want("append-1mb", "read-1mb"):
            summaries += _mb(emu, duration, runs, only)
        for name, batch in (("append-b1", 1), ("append-b100", 100)):
            if not want(name):
                continue
            wl = append_workload(name, batch, 4, 1, duration, False, None)
            print(f"\n== {wl.name}: {wl.description}")
            with cluster(emu) as c:
                srv = c.start("server", NO_SEAL_ENV)
                summaries.append(
                    run_workload(
                        wl,
                        _append_runner(wl, srv.url, "raw"),
                        repeats=runs,
                        counter=RemoteCallCounter([srv.url]),
                        cpu_pids={"server": srv.pid, **emu.pids()},
                        gsi_count=_gsi(srv, _tables()),
                    )
                )
    finally:
        emu.stop()
    text = report(summaries, machine)
    print("\n" + text)
    delivery = delivery_costs(summaries)
    if delivery["rows"]:
        print("\n" + delivery["text"])
    result = {
        **result_header("tiering", argv, machine),
        "settings": {
            "runs": runs,
            "records_1k": n_1k,
            "long_records": n_long,
            "long_record_bytes": EVENT_BYTES,
            "b1_records": n_b1,
            "duration_s": duration,
            "reader_frame_cache_bytes": READER_CACHE_BYTES,
            "sealer_env": SEAL_ENV,
            "max_limit": DIFF_LIMIT,
        },
        "prices": PRICES,
        "workloads": summaries,
        "delivery_cost": {k: v for k, v in delivery.items() if k != "text"},
        **extra,
    }
    write_results(out_path, result)
    return result


def _sealed_1k(emu: Emulators, n: int, runs: int, only: set[str]) -> list[dict[str, Any]]:
    out = []
    n = max(DIFF_LIMIT, n // 100 * 100)
    with cluster(emu) as c:
        loader = c.start("loader", NO_SEAL_ENV)
        topic = f"tier-{uuid.uuid4().hex[:6]}"
        print(f"\n== loading {n:,} x 1 KB records into {topic} (batches of 100, one client)")
        load_topic(loader.url, topic, n, 100, "1k")
        if not only or "diff-tail" in only:
            wl = read_workload(
                "diff-tail",
                f"one reader reads {n:,} x 1 KB records end to end from the DynamoDB tail "
                f"(written in batches of 100), limit {DIFF_LIMIT}, fresh reader server per run "
                f"(frame cache {READER_CACHE_BYTES >> 20} MiB)",
                n,
                RECORD_BYTES,
            )
            out.append(measure_read(c, wl, topic, n, runs))
        seal, sealer = measure_seal(c, seal_workload("seal", n, 100), loader, topic, n)
        if not only or "seal" in only:
            out.append(seal)
        c.stop(sealer)
        if not only or "diff-sealed" in only:
            wl = read_workload(
                "diff-sealed",
                f"one reader reads {n:,} x 1 KB records end to end from S3 segments "
                f"({seal['segments']} segments, 64 KiB blocks, DynamoDB tail trimmed), limit "
                f"{DIFF_LIMIT}, fresh reader server per run (frame cache "
                f"{READER_CACHE_BYTES >> 20} MiB)",
                n,
                RECORD_BYTES,
            )
            out.append(measure_read(c, wl, topic, n, runs))
    return out


def _long_log(
    emu: Emulators, n: int, runs: int, only: set[str], extra: dict[str, Any]
) -> list[dict[str, Any]]:
    out = []
    n = max(8000, n // 4000 * 4000)
    with cluster(emu) as c:
        loader = c.start("loader", SEAL_ENV)
        topic = f"long-{uuid.uuid4().hex[:6]}"
        print(
            f"\n== loading {n:,} x ~{EVENT_BYTES} B events into {topic} (batches of 1000, "
            f"2 processes x 2 clients, loader seals while loading)"
        )
        t0 = time.perf_counter()
        load = load_topic(loader.url, topic, n, 1000, "event", procs=2, tasks=2)
        loaded_s = time.perf_counter() - t0
        sealed_s = wait_sealed(loader.url, topic, timeout_s=900)
        st = topic_state(loader.url, topic)
        extra["long_log_load"] = {
            "records": load.records,
            "load_s": round(loaded_s, 1),
            "load_records_per_s": round(load.records_per_s),
            "sealed_after_load_s": round(sealed_s, 1),
            "state": {k: st.get(k) for k in ("head_seq", "sealed_through", "earliest_seq")},
            "record_bytes": EVENT_BYTES,
        }
        print(f"   sealed through {st['sealed_through']:,} {sealed_s:.1f} s after the load")
        total = st["head_seq"]
        c.stop(loader)
        for name, readers, limit in (
            ("long-log", 1, DIFF_LIMIT),
            ("long-log-2r", 2, DIFF_LIMIT),
            ("long-log-l5k", 1, BIG_LIMIT),
        ):
            if only and name not in only:
                continue
            how = (
                "one reader"
                if readers == 1
                else "two readers on disjoint halves, each through its own reader server"
            )
            env = READER_ENV
            if limit != DIFF_LIMIT:
                how += f" (TOPICS_MAX_LIMIT={limit}: NOT the default)"
                env = {**READER_ENV, "TOPICS_MAX_LIMIT": str(limit)}
            wl = read_workload(
                name,
                f"{how} read {total:,} ~{EVENT_BYTES} B JSON events end to end from S3 segments, "
                f"limit {limit}, fresh reader server(s) per run (frame cache "
                f"{READER_CACHE_BYTES >> 20} MiB)",
                total,
                EVENT_BYTES,
                clients=readers,
                limit=limit,
                long=True,
            )
            out.append(
                measure_read(c, wl, topic, total, runs, readers=readers, env=env, limit=limit)
            )
    return out


def _mb(emu: Emulators, duration: float, runs: int, only: set[str]) -> list[dict[str, Any]]:
    out = []
    wl = Workload(
        name="append-1mb",
        description=f"2 clients append one {MB_RECORD_BYTES:,} B record per request, each to "
        f"its own topic, for {duration:g} s (spill path: S3 PUT, then the transaction)",
        op="POST /v0/topics/:topic (1 record of 1 MB)",
        records_per_op=1,
        record_bytes=MB_RECORD_BYTES,
        clients=2,
        duration_s=duration,
    )
    written: list[str] = []
    with cluster(emu) as c:
        srv = c.start("server", NO_SEAL_ENV)

        def run_once(i: int, begin: Any) -> RunResult:
            tag = uuid.uuid4().hex[:6]
            topics = [f"mb-{tag}-{t}" for t in range(2)]
            written[:] = topics
            spec = {
                "tasks": 2,
                "batch": 1,
                "body": "mb",
                "bodies": 4,
                "seed": 5,
                "topics": topics,
                "base_url": srv.url,
                "duration": duration,
            }
            return run_loaders([spec], begin)

        print(f"\n== {wl.name}: {wl.description}")
        s = run_workload(
            wl,
            run_once,
            repeats=runs,
            counter=RemoteCallCounter([srv.url]),
            cpu_pids={"server": srv.pid, **emu.pids()},
            gsi_count=_gsi(srv, _tables()),
        )
        if not only or "append-1mb" in only:
            out.append(s)
        if not only or "read-1mb" in only:
            topic = written[0]
            total = topic_state(srv.url, topic)["head_seq"]
            rwl = read_workload(
                "read-1mb",
                f"one reader reads {total} x 1 MB records end to end from the tail (spilled "
                f"frames in S3), limit {DIFF_LIMIT} (a response holds at most 1 MiB: one "
                f"record), fresh reader server per run (default 128 MiB frame cache)",
                total,
                MB_RECORD_BYTES,
                reader_frame_cache_bytes=128 << 20,
            )
            out.append(measure_read(c, rwl, topic, total, runs, env=NO_SEAL_ENV))
    return out


# Frames of a sealed log stay in DynamoDB until their TTL deletes them (docs/storage.md "One
# write per append"): the tail TTL, plus up to ~2 days DynamoDB takes to act on an expired
# item (its documentation: "typically within a few days"; an assumption). Stored bytes per
# event: a 1 KB record's frame item (record + attributes + DynamoDB's 100 B per item) at
# batch 1; the ~250 B pointer item of a spilled 100-record frame at batch 100 (its S3 object
# is deleted at the trim).
TAIL_STORAGE_DAYS = 7 + 2
TAIL_ITEM_BYTES_PER_EVENT = {1: 1024 + 150 + 100, 100: 250 / 100}


def tail_storage_usd_per_million(batch: int, prices: dict[str, Any] = PRICES) -> float:
    gb = TAIL_ITEM_BYTES_PER_EVENT[batch] * 1e6 / 1e9
    return gb * prices["dynamodb_storage_gb_month"] * TAIL_STORAGE_DAYS / 30.4


def delivery_costs(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """$ per million 1 KB events: ingest + one delivery from the tail + sealing (the trim is
    the frames' TTL: their storage until then is counted)."""
    by = {s["workload"]["name"]: s for s in summaries}
    rows: list[dict[str, Any]] = []
    read = by.get("diff-tail")
    for name, seal_name, batch, goal in (
        ("append-b1", "seal-b1", 1, 1.30),
        ("append-b100", "seal", 100, 0.04),
    ):
        if name not in by or read is None:
            continue
        a = by[name]["usd_per_million_events"]
        d = read["usd_per_million_events"]
        seal = by.get(seal_name) or by.get("seal")
        sc = seal["cost_per_op"] if seal else None
        # per event: seal cost per segment x segments / records
        if seal is not None and sc is not None:
            per_event = {
                k: sc[k] * seal["segments"] / seal["workload"]["params"]["records"] * 1e6
                for k in ("usd_dynamodb", "usd_s3")
            }
        else:
            per_event = {"usd_dynamodb": 0.0, "usd_s3": 0.0}
        storage = {
            "append": a["usd_storage"],
            "deliver": d["usd_storage"],
            "seal": per_event["usd_dynamodb"] + per_event["usd_s3"],
            "tail_storage": tail_storage_usd_per_million(batch),
        }
        total = sum(storage.values())
        lam = a["usd_lambda"] + d["usd_lambda"]
        rows.append(
            {
                "batch": batch,
                "append_workload": name,
                "seal_workload": seal["workload"]["name"] if seal else None,
                "usd_per_million": {
                    **storage,
                    "storage_total": total,
                    "lambda": lam,
                    "with_lambda": total + lam,
                },
                "target": goal,
                "met": total <= goal,
            }
        )
    table = format_table(
        [
            "$/M 1 KB events",
            "append",
            "deliver",
            "seal+trim",
            "tail kept",
            "DDB+S3",
            "target",
            "+Lambda",
            "SQS",
            "EventBridge",
        ],
        [
            [
                f"batch {r['batch']}",
                f"{r['usd_per_million']['append']:.4f}",
                f"{r['usd_per_million']['deliver']:.4f}",
                f"{r['usd_per_million']['seal']:.4f}",
                f"{r['usd_per_million']['tail_storage']:.4f}",
                f"{r['usd_per_million']['storage_total']:.4f}",
                f"{'ok  ' if r['met'] else 'MISS'} <= {r['target']:.2f}",
                f"{r['usd_per_million']['with_lambda']:.4f}",
                "1.20",
                "1.00",
            ]
            for r in rows
        ],
    )
    return {
        "rows": rows,
        "text": "Ingest + one delivery (diff-tail, cold reader) + sealing, per million 1 KB "
        "events (SQS send+receive+delete $1.20/M, EventBridge $1.00/M):\n" + table,
    }


if __name__ == "__main__":
    main()
