"""Benchmark writers: one topic, N writers, each bound to its own one-request server process.

    python -m bench.bench_writers [--writers 1,2,4,8,16] [--seconds 20] [--runs 1]
                                  [--backend ddblocal|moto|all] [--code PATH] [--bench-root PATH]
                                  [--baseline PATH [--baseline-writers 1,4,8] ...]
                                  [--upkeep] [--quick] [--out PATH]

Issue 41 item 2: standard Lambda runs one request per execution environment, so N producers
writing to one topic are N processes that never share a head or a group commit. This
harness builds that situation locally and measures what the append path costs there.

Processes: the storage emulator(s) (`--backend ddblocal`, the default: DynamoDB Local for
DynamoDB with a moto server for S3; `--backend moto`: one moto server for both, as issue
41's first measurement used; `all`: both, one after the other), N server processes of the
real app (bench/server.py: uvicorn, AWS calls counted by headwater.storage.callcount, read
back over GET /_bench/calls), each on its own port, and one spawned load-generator process
holding N writers. Writer w has one keep-alive connection to server w only and sends its
next append when the last is answered, so every server process serves exactly one request at
a time, as standard Lambda does (closed loop, no think time).

Workload: every writer appends single records, `POST /v0/topics/<t>` with
`{"records": [{"data": {"id": "<run>.<w>.<i>", "p": "<pad>"}}]}` whose data is exactly 1 KB of
JSON (random base64 padding, so frames compress only ~25%, as in bench_v0), to ONE topic
(created first with `PUT /v0/topics/<t>`), for --seconds (20 by default). A failed request
(4xx/5xx, or no answer in 60 s) is counted and not retried: the writer moves on to its next
record. Before the timed window every writer makes one warm-up append (opens its
connection, loads the head into its server), then all run the same closed loop for
--warmup seconds (3; 1 with --quick); warm-ups are verified with the rest but not counted.
Each (code, backend, N, run) gets fresh emulators (DynamoDB Local slowed 3x over 25 runs
when the tables of earlier runs piled up in one JVM), fresh tables and fresh server
processes. The servers' in-process upkeep is OFF by default
(HEADWATER_TIERING_INTERVAL_MS=0, HEADWATER_TIERING_INLINE=0: no sweep, no inline seal, so
nothing but the appends writes; on AWS upkeep is its own scheduled function); `--upkeep`
leaves both at their defaults.

Counted over the timed window, summed over the N servers (bench.harness.merge_snapshots),
per acknowledged record:
- write calls (DynamoDB UpdateItem, PutItem, TransactWriteItems, BatchWriteItem, DeleteItem)
  and read calls (GetItem, BatchGetItem, Query, Scan, TransactGetItems), by API;
- lost races: the write calls DynamoDB refused (callcount's `errors`; a failed condition is a
  400 ConditionalCheckFailed / TransactionCanceled on UpdateItem, PutItem or
  TransactWriteItems). With the sequencer these are reservations refused (UpdateItem) and
  frame puts refused because a reader filled the slot (PutItem); with the old put-frame
  path, frame keys lost to another writer (PutItem);
- WRU: callcount bills the writes DynamoDB accepted; DynamoDB also bills a refused
  conditional write, so `WRU/rec` adds each refused call at the mean WRU of the same API's
  accepted calls (`wru_accepted` in the JSON is callcount's figure alone);
- $ per million records at the list prices in bench.harness.PRICES: DynamoDB (billed WRU +
  RRU), S3 requests, and Lambda as bench.harness models it (one invocation per request, the
  failed ones included, plus GB-seconds at 1 GB for the servers' CPU ms per record + 8 ms per
  AWS call);
- CPU ms per record of the servers (bench.harness.process_cpu_seconds over their pids), the
  emulator(s) and the load generator; and each storage call's wall time as the servers saw it
  (callcount's per-API samples, botocore's retries included): p50/p99 of UpdateItem, PutItem,
  TransactWriteItems, GetItem and Query, the service times the scale model takes.
Client latency is from the request being written to its answer, acknowledged appends only.

History check, after every run: a fresh server with its frame cache off reads the whole topic
back (`POST /v0/topics/<t>/diff`, pages of 1,000 from seq 0) and every acknowledged seq must
hold exactly the record its writer sent, no acknowledged record may be missing, no record
may appear twice, nothing unknown may appear, and seqs must follow real time (an append
acknowledged before another was sent has the smaller seq). Seqs below the head that hold no
record (holes: a slot reserved and filled) and failed appends found committed are reported,
not failed. "history ok" or the problems are printed; a run with problems makes the exit
status 1 (as does any failed request, for bench/run_all.py's count).

Comparing with an older revision: `--code PATH` is the directory holding the layer package
(the servers get PYTHONPATH=PATH; default this repo's layers/headwater), `--bench-root` the
tree whose bench/server.py they run (default this repo; bench/ is unchanged since 672fe77).
`--baseline PATH` runs a second code side by side in the same invocation, interleaved by N,
so both see the same machine load. The append path before the sequencer (issue 41):

    git worktree add /tmp/hw-old 672fe77
    .venv/bin/python -m bench.bench_writers --backend all \\
        --baseline /tmp/hw-old/layers/headwater --baseline-writers 1,4,8
    git worktree remove /tmp/hw-old

(If bench/server.py differs in that tree, add `--baseline-bench-root /tmp/hw-old`.) Results:
bench/results/latest-writers.json. The machine's load averages are printed at the start and
the end; with --runs > 1 the tables show medians (failed requests summed).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import bisect
import contextlib
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.bench_v0 import Emulators, RawHttp
from bench.harness import (
    AWS_CALL_MS,
    LAMBDA_MEMORY_GB,
    PRICES,
    RemoteCallCounter,
    barrier_main,
    cost_per_op,
    format_table,
    machine_cpu_seconds,
    machine_info,
    median,
    per_million_events,
    percentile,
    process_cpu_seconds,
    result_header,
    run_processes,
    write_results,
)

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
DEFAULT_CODE = REPO / "layers" / "headwater"
RECORD_BYTES = 1024
READ_LIMIT = 1000
REQUEST_TIMEOUT_S = 60.0
WRITE_APIS = ("UpdateItem", "PutItem", "TransactWriteItems", "BatchWriteItem", "DeleteItem")
READ_APIS = ("GetItem", "BatchGetItem", "Query", "Scan", "TransactGetItems")
# the calls whose service times the tables show (the scale model's inputs)
TIMED_APIS = ("UpdateItem", "PutItem", "TransactWriteItems", "GetItem", "Query")
UPKEEP_OFF = {"HEADWATER_TIERING_INTERVAL_MS": "0", "HEADWATER_TIERING_INLINE": "0"}
API_FIELDS = (
    "calls_per_record",
    "refused_per_record",
    "wru_per_record",
    "rru_per_record",
    "calls",
    "refused",
    "wall_samples",
    "p50_ms",
    "p90_ms",
    "p99_ms",
    "mean_ms",
)
BACKEND_NAMES = {"ddblocal": "DynamoDB Local (S3: moto)", "moto": "moto (DynamoDB and S3)"}


# --- records ------------------------------------------------------------------------------
def _pad_pool(writer: int) -> list[str]:
    rng = random.Random(1_000_003 * (writer + 1))
    return [base64.b64encode(rng.randbytes(RECORD_BYTES)).decode() for _ in range(16)]


def record_data(tag: str, writer: int, i: int, pool: Sequence[str]) -> dict[str, str]:
    """Record i of writer w in run `tag`: its id and padding, 1,024 bytes of compact JSON."""
    rid = f"{tag}.{writer}.{i}"
    pad = RECORD_BYTES - len(json.dumps({"id": rid, "p": ""}, separators=(",", ":")))
    return {"id": rid, "p": pool[i % len(pool)][:pad]}


def append_body(data: Mapping[str, str]) -> bytes:
    return json.dumps({"records": [{"data": data}]}, separators=(",", ":")).encode()


# --- load generator (a spawned process) ---------------------------------------------------
def writer_process(spec: dict[str, Any], ready: Any, go: Any, out: Any) -> None:
    barrier_main(_writers_main, spec, ready, go, out)


async def _writers_main(spec: dict[str, Any], ready: Any, go: Any) -> dict[str, Any]:
    """One closed-loop writer per server URL. Each op is reported as
    [writer, i, status, seq (-1 unless acknowledged), sent ns, answered ns, warm-up 0/1]."""
    urls: list[str] = spec["urls"]
    path = f"/v0/topics/{spec['topic']}"
    tag = spec["tag"]
    conns = [RawHttp(u) for u in urls]
    pools = [_pad_pool(w) for w in range(len(urls))]
    ops: list[list[int]] = []
    samples: dict[str, str] = {}

    async def one(w: int, i: int, warm: int) -> None:
        body = append_body(record_data(tag, w, i, pools[w]))
        stamp: list[int] = []
        try:
            status, content = await asyncio.wait_for(
                conns[w].request("POST", path, body, stamp), REQUEST_TIMEOUT_S
            )
        except (TimeoutError, OSError, asyncio.IncompleteReadError) as exc:
            # no answer: count it (status 0) and reconnect for the next record
            status, content = 0, repr(exc).encode()
            await conns[w].close()
            conns[w] = RawHttp(urls[w])
        done = time.monotonic_ns()
        seq = -1
        if 200 <= status < 300:
            seq = int(json.loads(content)["first_seq"])
        else:
            samples.setdefault(str(status), content[:300].decode(errors="replace"))
        ops.append([w, i, status, seq, stamp[0] if stamp else done, done, warm])

    try:
        # warm-up, untimed: record 0 of every writer (opens the connections, loads each
        # server's head), then the closed loop for spec["warmup"] seconds
        await asyncio.gather(*(one(w, 0, 1) for w in range(len(urls))))
        warm_until = time.perf_counter() + spec["warmup"]
        next_i = [1] * len(urls)

        async def warm_loop(w: int) -> None:
            while time.perf_counter() < warm_until:
                await one(w, next_i[w], 1)
                next_i[w] += 1

        await asyncio.gather(*(warm_loop(w) for w in range(len(urls))))
        ready.wait()
        go.wait()
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        deadline = t0 + spec["seconds"]

        async def loop(w: int) -> None:
            while time.perf_counter() < deadline:
                await one(w, next_i[w], 0)
                next_i[w] += 1

        await asyncio.gather(*(loop(w) for w in range(len(urls))))
        elapsed = time.perf_counter() - t0
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
    finally:
        for c in conns:
            await c.close()
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    return {"ops": ops, "elapsed_s": elapsed, "cpu_s": cpu, "error_samples": samples}


# --- server processes ---------------------------------------------------------------------
@dataclass
class Code:
    """A revision of the layer package the servers run, and the tree of its bench/server.py."""

    label: str
    path: Path
    bench_root: Path
    writers: list[int]
    git: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "path": str(self.path),
            "bench_root": str(self.bench_root),
            "writers": self.writers,
            "git": self.git,
        }


def _git(cwd: Path, *args: str) -> str:
    r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)
    return r.stdout.strip() if r.returncode == 0 else ""


def code_git(path: Path) -> dict[str, Any]:
    """The commit of the tree holding `path` and whether the package under it is modified."""
    commit = _git(path, "rev-parse", "--short", "HEAD")
    if not commit:
        return {}
    return {"commit": commit, "dirty": bool(_git(path, "status", "--porcelain", "--", "."))}


def make_code(path: str, bench_root: str, label: str, writers: list[int]) -> Code:
    p = Path(path).resolve()
    if not (p / "headwater" / "__init__.py").is_file():
        raise SystemExit(f"--code {p}: no headwater package there")
    root = Path(bench_root).resolve()
    if not (root / "bench" / "server.py").is_file():
        raise SystemExit(f"--bench-root {root}: no bench/server.py there")
    git = code_git(p)
    name = label or (git.get("commit", p.name) + ("-dirty" if git.get("dirty") else ""))
    return Code(name, p, root, writers, git)


def server_env(code: Code, extra: Mapping[str, str]) -> dict[str, str]:
    env = {**os.environ, **extra}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(code.path), *([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])]
    )
    return env


def check_code_imports(code: Code) -> str:
    """The servers must import this code's package, not the installed one: ask a python
    started exactly as they are."""
    r = subprocess.run(
        [sys.executable, "-c", "import headwater; print(headwater.__file__)"],
        cwd=code.bench_root,
        env=server_env(code, {}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    got = Path(r.stdout.strip()).resolve()
    if r.returncode != 0 or not got.is_relative_to(code.path):
        raise SystemExit(f"{code.label}: servers would import {got or r.stderr!r}, not {code.path}")
    return str(got)


class Server:
    """bench/server.py of `code` on its own port; output to a log file."""

    def __init__(self, code: Code, env: Mapping[str, str], log_dir: Path) -> None:
        from headwater.dev.emulator import free_port

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = server_env(
            code, {**env, "TOPICS_HOST": "127.0.0.1", "TOPICS_PORT": str(self.port)}
        )
        self.cwd = code.bench_root
        self.log_path = log_dir / f"server-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def spawn(self) -> Server:
        from headwater.dev.emulator import die_with_parent

        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bench.server"],
                cwd=self.cwd,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent,
            )
        return self

    def wait_healthy(self, timeout_s: float = 120) -> Server:
        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/v0/health", timeout=2):
                    return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.2)
        raise RuntimeError(f"server did not start on {self.url}:\n{self.log_tail()}")

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self) -> None:
        from headwater.dev.emulator import stop_process

        stop_process(self.proc, grace_s=15)
        self.proc = None


@contextlib.contextmanager
def servers(code: Code, env: Mapping[str, str], n: int, log_dir: Path) -> Iterator[list[Server]]:
    """N servers on one resource prefix: the first creates the tables, the rest then start
    together."""
    started: list[Server] = []
    try:
        first = Server(code, env, log_dir)
        started.append(first.spawn())
        first.wait_healthy()
        rest = [Server(code, env, log_dir) for _ in range(n - 1)]
        for s in rest:
            started.append(s.spawn())
        for s in rest:
            s.wait_healthy()
        yield started
    finally:
        for s in started:
            s.stop()


def _http(method: str, url: str, body: Mapping[str, Any] | None = None) -> dict[str, Any]:
    data = json.dumps(body or {}).encode()
    req = urllib.request.Request(
        url, data=data, method=method, headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        out: dict[str, Any] = json.loads(r.read())
        return out


# --- history ------------------------------------------------------------------------------
def read_topic(base_url: str, topic: str) -> tuple[dict[int, Any], dict[str, Any]]:
    """Every record of `topic` by seq (diff pages from seq 0), and the last page's envelope."""
    records: dict[int, Any] = {}
    dupes: list[int] = []
    cur = 0
    last: dict[str, Any] = {}
    for _ in range(1_000_000):
        last = _http(
            "POST", f"{base_url}/v0/topics/{topic}/diff", {"from_seq": cur, "limit": READ_LIMIT}
        )
        for r in last["records"]:
            if r["$seq"] in records:
                dupes.append(r["$seq"])
            records[r["$seq"]] = r.get("data")
        nxt = int(last["next_from_seq"])
        if last.get("tombstone"):
            break
        if nxt <= cur and last.get("caught_up"):
            break
        if nxt <= cur:
            raise RuntimeError(f"diff of {topic} made no progress at {cur}")
        cur = nxt
        if last.get("caught_up") and cur >= int(last["head_seq"]):
            break
    last = {k: v for k, v in last.items() if k != "records"}
    last["repeated_seqs"] = dupes
    return records, last


def verify_history(
    records: Mapping[int, Any], envelope: Mapping[str, Any], ops: Sequence[Sequence[int]], tag: str
) -> dict[str, Any]:
    """Check what was read back against what the writers were told (see the docstring)."""
    problems: list[str] = []
    pools: dict[int, list[str]] = {}

    def expected(w: int, i: int) -> dict[str, str]:
        if w not in pools:
            pools[w] = _pad_pool(w)
        return record_data(tag, w, i, pools[w])

    by_id: dict[str, list[int]] = {}
    foreign = 0
    for seq, data in records.items():
        rid = data.get("id") if isinstance(data, dict) else None
        if not isinstance(rid, str) or not rid.startswith(f"{tag}."):
            foreign += 1
            continue
        by_id.setdefault(rid, []).append(seq)
    acked = [op for op in ops if op[3] >= 0]
    failed = [op for op in ops if op[3] < 0]
    missing = wrong = 0
    for w, i, _status, seq, *_ in acked:
        data = records.get(seq)
        if data is None:
            missing += 1
            if missing <= 3:
                problems.append(f"acknowledged seq {seq} (writer {w} record {i}) is missing")
        elif data != expected(w, i):
            wrong += 1
            if wrong <= 3:
                got = data.get("id") if isinstance(data, dict) else data
                problems.append(f"seq {seq} holds {got!r}, not writer {w} record {i}")
    if missing > 3:
        problems.append(f"... {missing} acknowledged records missing in all")
    if wrong > 3:
        problems.append(f"... {wrong} seqs hold another record in all")
    dup = {rid: seqs for rid, seqs in by_id.items() if len(seqs) > 1}
    if dup:
        rid, seqs = next(iter(dup.items()))
        problems.append(f"{len(dup)} records appear more than once (e.g. {rid} at {sorted(seqs)})")
    if envelope.get("repeated_seqs"):
        problems.append(f"seqs read twice: {envelope['repeated_seqs'][:5]}")
    if foreign:
        problems.append(f"{foreign} records nobody sent")
    if envelope.get("tombstone"):
        problems.append(f"the read met a tombstone: {envelope['tombstone']}")
    acked_ids = {f"{tag}.{w}.{i}" for w, i, *_ in acked}
    committed_failed = sum(1 for w, i, *_ in failed if f"{tag}.{w}.{i}" in by_id)
    # real-time order: an append answered before another was sent has the smaller seq
    by_ack = sorted(acked, key=lambda op: op[5])
    ack_times = [op[5] for op in by_ack]
    prefix_max: list[int] = []
    m = -1
    for op in by_ack:
        m = max(m, op[3])
        prefix_max.append(m)
    order = 0
    for op in acked:
        k = bisect.bisect_left(ack_times, op[4])
        if k > 0 and prefix_max[k - 1] >= op[3]:
            order += 1
    if order:
        problems.append(f"{order} appends got a seq below one acknowledged before they were sent")
    head = int(envelope.get("head_seq", 0))
    top = max(records, default=0)
    if top > head:
        problems.append(f"a record at seq {top} above the head {head}")
    holes = sorted(set(range(1, head + 1)) - set(records))
    return {
        "ok": not problems,
        "problems": problems,
        "acknowledged": len(acked),
        "read_back": len(records),
        "head_seq": head,
        "holes": len(holes),
        "hole_seqs": holes[:20],
        "failed_requests": len(failed),
        "failed_found_committed": committed_failed,
        "unacknowledged_ids_read": len(set(by_id) - acked_ids),
    }


# --- one run ------------------------------------------------------------------------------
def _api_name(api: str) -> tuple[str, str]:
    service, _, name = api.partition(".")
    return service, name


def billed_calls(calls: Mapping[str, Any]) -> dict[str, Any]:
    """The snapshot with each refused DynamoDB write billed as DynamoDB bills it: at the mean
    WRU of that API's accepted calls (1 WRU, or 2 in a transaction, if none was accepted)."""
    out = {**calls, "calls": {api: dict(f) for api, f in calls.get("calls", {}).items()}}
    for api, f in out["calls"].items():
        service, name = _api_name(api)
        if service != "DynamoDB" or name not in WRITE_APIS or not f.get("errors"):
            continue
        accepted = f["calls"] - f["errors"]
        each = (
            f["wru"] / accepted if accepted > 0 else (2.0 if name == "TransactWriteItems" else 1.0)
        )
        f["wru_refused"] = f["errors"] * each
        f["wru"] = f["wru"] + f["wru_refused"]
    return out


def _per(total: float, n: int) -> float:
    return total / n if n > 0 else float("nan")


def summarize_run(
    *,
    ops: Sequence[Sequence[int]],
    elapsed_s: float,
    calls: Mapping[str, Any],
    cpu_s: Mapping[str, float],
    window_s: float,
    gsi_count: Mapping[str, int],
) -> dict[str, Any]:
    timed = [op for op in ops if not op[6]]
    acked = [op for op in timed if op[3] >= 0]
    n = len(acked)
    lat = [(op[5] - op[4]) / 1e6 for op in acked]
    statuses: dict[str, int] = {}
    for op in timed:
        if op[3] < 0:
            statuses[str(op[2])] = statuses.get(str(op[2]), 0) + 1
    billed = billed_calls(calls)
    by_api: dict[str, dict[str, float]] = {}
    writes = reads = refused = wru_billed = wru_accepted = rru = s3 = 0.0
    for api, f in billed["calls"].items():
        service, name = _api_name(api)
        samples = calls.get("wall_ms", {}).get(api, [])
        by_api[api] = {
            "calls_per_record": _per(f["calls"], n),
            "refused_per_record": _per(f["errors"], n),
            "wru_per_record": _per(f["wru"], n),
            "rru_per_record": _per(f["rru"], n),
            "calls": f["calls"],
            "refused": f["errors"],
            "wall_samples": len(samples),
            "p50_ms": percentile(samples, 50),
            "p90_ms": percentile(samples, 90),
            "p99_ms": percentile(samples, 99),
            "mean_ms": sum(samples) / len(samples) if samples else float("nan"),
        }
        if service == "DynamoDB":
            rru += f["rru"]
            wru_billed += f["wru"]
            wru_accepted += f["wru"] - f.get("wru_refused", 0.0)
            if name in WRITE_APIS:
                writes += f["calls"]
                refused += f["errors"]
            elif name in READ_APIS:
                reads += f["calls"]
        elif service == "S3":
            s3 += f["calls"]
    aws_calls = sum(f["calls"] for f in billed["calls"].values())
    server_cpu_ms = 1000 * cpu_s.get("servers", 0.0) / max(n, 1)
    lambda_ms = server_cpu_ms + AWS_CALL_MS * _per(aws_calls, n)
    cost = cost_per_op(billed, max(n, 1), gsi_count=gsi_count, lambda_ms_per_op=lambda_ms)
    # one Lambda invocation per request, the failed ones included
    requests_per_record = _per(len(timed), n)
    cost["usd_lambda"] = (
        requests_per_record * PRICES["lambda_request_per_million"] / 1e6
        + lambda_ms / 1000 * LAMBDA_MEMORY_GB * PRICES["lambda_gb_second"]
    )
    cost["usd_total"] = cost["usd_storage"] + cost["usd_lambda"]
    emu = cpu_s.get("moto", 0.0) + cpu_s.get("ddblocal", 0.0)
    others = sum(v for k, v in cpu_s.items() if k != "machine")
    return {
        "acked": n,
        "warmup_acked": sum(1 for op in ops if op[6] and op[3] >= 0),
        "requests": len(timed),
        "elapsed_s": elapsed_s,
        "records_per_s": n / elapsed_s if elapsed_s > 0 else 0.0,
        "p50_ms": percentile(lat, 50),
        "p99_ms": percentile(lat, 99),
        "max_ms": max(lat, default=float("nan")),
        "failed": statuses,
        "5xx": sum(v for k, v in statuses.items() if k.startswith("5")),
        "4xx": sum(v for k, v in statuses.items() if k.startswith("4")),
        "no_answer": statuses.get("0", 0),
        "per_record": {
            "write_calls": _per(writes, n),
            "wru": _per(wru_billed, n),
            "wru_accepted": _per(wru_accepted, n),
            "read_calls": _per(reads, n),
            "rru": _per(rru, n),
            "lost_races": _per(refused, n),
            "s3_calls": _per(s3, n),
            "aws_calls": _per(aws_calls, n),
            "requests": requests_per_record,
        },
        "by_api": by_api,
        "cost_per_record": cost,
        "usd_per_million_records": per_million_events(cost, 1),
        "lambda_ms_per_record_estimate": lambda_ms,
        "cpu_ms_per_record": {
            "servers": server_cpu_ms,
            "emulator": 1000 * emu / max(n, 1),
            "clients": 1000 * cpu_s.get("clients", 0.0) / max(n, 1),
        },
        "cpu_cores": {
            "servers": cpu_s.get("servers", 0.0) / window_s,
            "emulator": emu / window_s,
            "clients": cpu_s.get("clients", 0.0) / window_s,
            "other": max(0.0, (cpu_s.get("machine", 0.0) - others) / window_s),
        },
    }


@dataclass(frozen=True)
class RunSpec:
    code: Code
    backend: str
    writers: int
    seconds: float
    warmup: float
    upkeep: bool
    run: int


def run_once(spec: RunSpec, emu: Any, log_dir: Path, log: Callable[[str], None]) -> dict[str, Any]:
    from headwater.storage.schema import TABLES

    prefix = f"bw-{uuid.uuid4().hex[:6]}"
    tag = uuid.uuid4().hex[:8]
    topic = f"writers-{tag}"
    env = {**emu.env(), "HEADWATER_RESOURCE_PREFIX": prefix, **({} if spec.upkeep else UPKEEP_OFF)}
    gsi = {
        f"{prefix}-{t.logical}": sum(1 for ix in t.indexes if ix.projection != "KEYS_ONLY")
        for t in TABLES
    }
    load0 = os.getloadavg()[0]
    with servers(spec.code, env, spec.writers, log_dir) as srv:
        _http("PUT", f"{srv[0].url}/v0/topics/{topic}", {})
        counter = RemoteCallCounter([s.url for s in srv])
        pids = {f"server{k}": s.pid for k, s in enumerate(srv)}
        cpu0: dict[str, float] = {}
        started: list[float] = []

        def begin() -> None:
            counter.reset()
            cpu0.update({k: process_cpu_seconds(p) for k, p in {**pids, **emu.pids()}.items()})
            cpu0["machine"] = machine_cpu_seconds()
            started.append(time.perf_counter())

        part = {
            "urls": [s.url for s in srv],
            "topic": topic,
            "tag": tag,
            "seconds": spec.seconds,
            "warmup": spec.warmup,
        }
        (got,) = run_processes(writer_process, [part], begin, what="writer")
        calls = counter.snapshot()
        window_s = time.perf_counter() - started[0]
        cpu_s = {k: process_cpu_seconds(p) - cpu0[k] for k, p in {**pids, **emu.pids()}.items()}
        cpu_s["machine"] = machine_cpu_seconds() - cpu0["machine"]
        cpu_s["servers"] = sum(cpu_s.pop(k) for k in pids)
        cpu_s["clients"] = got["cpu_s"]
        dead = [s for s in srv if s.proc is None or s.proc.poll() is not None]
        if dead:
            raise RuntimeError(f"a server died during the run:\n{dead[0].log_tail()}")
        # the history, through a fresh server that caches nothing
        with servers(spec.code, {**env, "HEADWATER_FRAME_CACHE_BYTES": "0"}, 1, log_dir) as rd:
            reader = RemoteCallCounter([rd[0].url])
            reader.reset()
            records, envelope = read_topic(rd[0].url, topic)
            reader_calls = reader.snapshot()["calls"]
    history = verify_history(records, envelope, got["ops"], tag)
    # what the read itself wrote (a reader fills a slot reserved and never written)
    history["reader_writes"] = {
        api: f["calls"]
        for api, f in reader_calls.items()
        if _api_name(api)[0] == "DynamoDB" and _api_name(api)[1] in WRITE_APIS
    }
    out = summarize_run(
        ops=got["ops"],
        elapsed_s=got["elapsed_s"],
        calls=calls,
        cpu_s=cpu_s,
        window_s=window_s,
        gsi_count=gsi,
    )
    out.update(
        code=spec.code.label,
        backend=spec.backend,
        writers=spec.writers,
        run=spec.run,
        history=history,
        error_samples=got["error_samples"],
        loadavg_1m=[round(load0, 2), round(os.getloadavg()[0], 2)],
        topic=topic,
        resource_prefix=prefix,
    )
    log(
        f"  {spec.code.label} N={spec.writers} run {spec.run + 1}: "
        f"{out['records_per_s']:.1f} rec/s, "
        f"p50 {out['p50_ms']:.1f} ms, p99 {out['p99_ms']:.1f} ms, 5xx {out['5xx']}, "
        f"4xx {out['4xx']}, writes/rec {out['per_record']['write_calls']:.2f}, "
        f"lost/rec {out['per_record']['lost_races']:.3f}, WRU/rec {out['per_record']['wru']:.2f} | "
        f"{history_line(history)} | load {out['loadavg_1m'][0]} -> {out['loadavg_1m'][1]}"
    )
    return out


def history_line(h: Mapping[str, Any]) -> str:
    notes = [f"{h['acknowledged']} acked, {h['read_back']} read back, {h['holes']} holes"]
    if h["failed_found_committed"]:
        notes.append(f"{h['failed_found_committed']} failed appends found committed")
    for api, calls in h.get("reader_writes", {}).items():
        notes.append(f"the reader's {_api_name(api)[1]} x{calls:.0f}")
    if h["ok"]:
        return "history ok (" + "; ".join(notes) + ")"
    return "HISTORY PROBLEMS: " + "; ".join(h["problems"]) + " (" + "; ".join(notes) + ")"


# --- summaries across runs ----------------------------------------------------------------
def _med(runs: Sequence[Mapping[str, Any]], *path: str) -> float:
    """The median over runs of the value at `path` (keys into each run's dict)."""
    values = []
    for r in runs:
        v: Any = r
        for k in path:
            v = v[k]
        values.append(float(v))
    return median(values)


def combine(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Medians of the runs of one (code, backend, N); failed requests summed; the history is
    ok only if every run's was."""
    first = runs[0]
    apis = sorted({api for r in runs for api in r["by_api"]})
    sections = ("per_record", "usd_per_million_records", "cpu_ms_per_record", "cpu_cores")
    return {
        "code": first["code"],
        "backend": first["backend"],
        "writers": first["writers"],
        "runs": len(runs),
        **{
            k: _med(runs, k)
            for k in ("records_per_s", "p50_ms", "p99_ms", "lambda_ms_per_record_estimate")
        },
        "5xx": sum(r["5xx"] for r in runs),
        "4xx": sum(r["4xx"] for r in runs),
        "no_answer": sum(r["no_answer"] for r in runs),
        **{sec: {k: _med(runs, sec, k) for k in first[sec]} for sec in sections},
        "by_api": {
            api: {
                k: median([r["by_api"][api][k] for r in runs if api in r["by_api"]])
                for k in API_FIELDS
            }
            for api in apis
        },
        "history_ok": all(r["history"]["ok"] for r in runs),
        "holes": sum(r["history"]["holes"] for r in runs),
        "failed_found_committed": sum(r["history"]["failed_found_committed"] for r in runs),
        "per_run": runs,
    }


def _f(x: float, digits: int = 2) -> str:
    return "-" if x != x else f"{x:,.{digits}f}"


def tables(rows: Sequence[Mapping[str, Any]]) -> str:
    out = []
    main_rows = []
    for s in rows:
        pr = s["per_record"]
        main_rows.append(
            [
                s["code"],
                s["writers"],
                _f(s["records_per_s"], 1),
                _f(s["p50_ms"], 1),
                _f(s["p99_ms"], 1),
                s["5xx"],
                s["4xx"] + s["no_answer"],
                _f(pr["write_calls"]),
                _f(pr["wru"]),
                _f(pr["read_calls"]),
                _f(pr["lost_races"], 3),
                _f(s["usd_per_million_records"]["usd_total"], 3),
                _f(s["cpu_ms_per_record"]["servers"], 1),
                ("ok" if s["history_ok"] else "PROBLEMS")
                + (f", {s['holes']} holes" if s["holes"] else ""),
            ]
        )
    out.append(
        format_table(
            [
                "code",
                "N",
                "rec/s",
                "p50 ms",
                "p99 ms",
                "5xx",
                "4xx",
                "writes/rec",
                "WRU/rec",
                "reads/rec",
                "lost/rec",
                "$/M rec",
                "srv CPU ms/rec",
                "history",
            ],
            main_rows,
        )
    )
    out.append("")
    out.append(
        "DynamoDB calls per record by API (refused = lost races: conditional writes DynamoDB "
        "refused), and each call's wall time as the servers saw it:"
    )
    api_rows = []
    for s in rows:
        for api, f in sorted(s["by_api"].items()):
            service, name = _api_name(api)
            if service != "DynamoDB":
                continue
            api_rows.append(
                [
                    s["code"],
                    s["writers"],
                    name,
                    _f(f["calls_per_record"], 3),
                    _f(f["refused_per_record"], 3),
                    _f(f["wru_per_record"]),
                    _f(f["p50_ms"]),
                    _f(f["p99_ms"]),
                    f"{f['wall_samples']:,.0f}",
                ]
            )
    out.append(
        format_table(
            [
                "code",
                "N",
                "API",
                "calls/rec",
                "refused/rec",
                "WRU/rec",
                "p50 ms",
                "p99 ms",
                "samples",
            ],
            api_rows,
        )
    )
    out.append("")
    out.append(
        f"$ per million records ({PRICES['region']} list prices as of {PRICES['as_of']}; "
        f"Lambda: 1 invocation per request + (server CPU ms + {AWS_CALL_MS:g} ms per AWS call) "
        f"x {LAMBDA_MEMORY_GB:g} GB), and CPU ms per record:"
    )
    cost_rows = []
    for s in rows:
        m = s["usd_per_million_records"]
        c = s["cpu_ms_per_record"]
        k = s["cpu_cores"]
        cost_rows.append(
            [
                s["code"],
                s["writers"],
                _f(m["usd_dynamodb"], 3),
                _f(m["usd_s3"], 3),
                _f(m["usd_lambda"], 3),
                _f(m["usd_total"], 3),
                _f(s["lambda_ms_per_record_estimate"], 1),
                f"{_f(c['servers'], 1)}/{_f(c['emulator'], 1)}/{_f(c['clients'], 2)}",
                f"{_f(k['servers'])}/{_f(k['emulator'])}/{_f(k['clients'])}/{_f(k['other'])}",
            ]
        )
    out.append(
        format_table(
            [
                "code",
                "N",
                "DDB",
                "S3",
                "Lambda",
                "total",
                "Lambda ms/rec",
                "CPU ms/rec srv/emu/cli",
                "cores srv/emu/cli/oth",
            ],
            cost_rows,
        )
    )
    return "\n".join(out)


def failed_requests(result: Mapping[str, Any]) -> int:
    """Failed requests plus runs whose history had problems (bench/run_all.py's count)."""
    return int(
        sum(s["5xx"] + s["4xx"] + s["no_answer"] for s in result["results"])
        + sum(not s["history_ok"] for s in result["results"])
        + len(result.get("failed_runs", []))
    )


def exit_code(result: Mapping[str, Any]) -> int:
    return 0 if failed_requests(result) == 0 else 1


# --- main ---------------------------------------------------------------------------------
def _ints(text: str) -> list[int]:
    out = sorted({int(x) for x in text.split(",") if x.strip()})
    if not out or out[0] < 1:
        raise argparse.ArgumentTypeError(f"writer counts must be >= 1: {text!r}")
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--writers", type=_ints, default=None, help="N values (default 1,2,4,8,16)")
    ap.add_argument("--seconds", type=float, default=None, help="timed seconds per run (20)")
    ap.add_argument("--runs", type=int, default=None, help="runs per N (default 1)")
    ap.add_argument(
        "--warmup", type=float, default=None, help="untimed closed-loop seconds first (3)"
    )
    ap.add_argument(
        "--backend",
        choices=("ddblocal", "moto", "all"),
        default="ddblocal",
        help="DynamoDB Local + moto S3 (default), one moto for both, or both in turn",
    )
    ap.add_argument("--code", default=str(DEFAULT_CODE), help="dir holding the headwater package")
    ap.add_argument("--bench-root", default=str(REPO), help="tree whose bench/server.py to run")
    ap.add_argument("--label", default="", help="name of --code in tables (default: its commit)")
    ap.add_argument("--baseline", default="", help="a second code dir run side by side")
    ap.add_argument("--baseline-bench-root", default=str(REPO))
    ap.add_argument("--baseline-label", default="")
    ap.add_argument("--baseline-writers", type=_ints, default=None, help="default: --writers")
    ap.add_argument("--upkeep", action="store_true", help="leave the servers' upkeep sweeps on")
    ap.add_argument("--quick", action="store_true", help="smoke run: N = 1,4 for 5 s, 1 run")
    ap.add_argument("--out", default=None, help="results JSON (default bench/results/...)")
    args = ap.parse_args(argv)
    writers = args.writers or ([1, 4] if args.quick else [1, 2, 4, 8, 16])
    seconds = args.seconds or (5.0 if args.quick else 20.0)
    runs = args.runs or 1
    warmup = args.warmup if args.warmup is not None else (1.0 if args.quick else 3.0)
    backends = ["ddblocal", "moto"] if args.backend == "all" else [args.backend]
    out_path = Path(args.out or RESULTS / "latest-writers.json")
    codes = []
    if args.baseline:
        codes.append(
            make_code(
                args.baseline,
                args.baseline_bench_root,
                args.baseline_label,
                args.baseline_writers or writers,
            )
        )
    codes.append(make_code(args.code, args.bench_root, args.label, writers))
    if len({c.label for c in codes}) < len(codes):
        codes[-1].label += "(code)"
    imports = {c.label: check_code_imports(c) for c in codes}

    machine = machine_info()
    load_start = [round(x, 2) for x in os.getloadavg()]
    upkeep = (
        "on (defaults)"
        if args.upkeep
        else "off (HEADWATER_TIERING_INTERVAL_MS=0, HEADWATER_TIERING_INLINE=0)"
    )
    print(
        f"bench writers | {machine['cpu_model']} x{machine['cores']} | Python "
        f"{machine['python']} | {machine['os']} | {seconds:g} s per run after {warmup:g} s "
        f"of warm-up, {runs} run(s) per N, fresh emulators per run | load average "
        f"(1/5/15 min) at start {load_start}"
    )
    print(
        "one topic; N server processes (bench/server.py), one closed-loop writer bound to each "
        f"(one request at a time per process); single {RECORD_BYTES} B JSON records; servers' "
        f"upkeep sweeps {upkeep}"
    )
    for c in codes:
        print(
            f"code {c.label}: {c.path} (bench {c.bench_root}), N = {c.writers}, "
            f"imports {imports[c.label]}"
        )
    all_n = sorted({n for c in codes for n in c.writers})
    results: list[dict[str, Any]] = []
    failed_runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-writers-") as tmp:
        for backend in backends:
            print(f"\n== {BACKEND_NAMES[backend]}")
            by_key: dict[tuple[str, int], list[dict[str, Any]]] = {}
            for run in range(runs):
                for n in all_n:
                    for c in codes:
                        if n not in c.writers:
                            continue
                        spec = RunSpec(c, backend, n, seconds, warmup, args.upkeep, run)
                        try:
                            # fresh emulators every run: DynamoDB Local slows as the tables of
                            # earlier runs pile up (3x over 25 runs here), which would make
                            # the order of runs part of the result
                            emu = Emulators(backend)
                            try:
                                got = run_once(spec, emu, Path(tmp), print)
                            finally:
                                emu.stop()
                        except Exception as exc:  # one broken run must not lose the rest
                            print(f"  !! {c.label} N={n} run {run + 1} failed: {exc!r}")
                            failed_runs.append(
                                {
                                    "code": c.label,
                                    "backend": backend,
                                    "writers": n,
                                    "run": run,
                                    "error": repr(exc)[:2000],
                                }
                            )
                            continue
                        by_key.setdefault((c.label, n), []).append(got)
            rows = [
                combine(by_key[(c.label, n)])
                for n in all_n
                for c in codes
                if (c.label, n) in by_key
            ]
            results.extend(rows)
            print(
                f"\n{BACKEND_NAMES[backend]}: "
                + (
                    "medians of " + str(runs) + " runs; failed requests summed"
                    if runs > 1
                    else "one run per N"
                )
            )
            print(tables(rows))
            for s in rows:
                for r in s["per_run"]:
                    if not r["history"]["ok"] or r["error_samples"]:
                        print(
                            f"  {s['code']} N={s['writers']} run {r['run'] + 1}: "
                            f"{history_line(r['history'])}; failed: {r['failed']} "
                            f"{json.dumps(r['error_samples'])[:400]}"
                        )
    load_end = [round(x, 2) for x in os.getloadavg()]
    print(f"\nload average (1/5/15 min): start {load_start}, end {load_end}")
    ok = all(s["history_ok"] for s in results) and not failed_runs
    print("history ok (every run)" if ok else "HISTORY PROBLEMS (see above)")
    result = {
        **result_header("writers", argv, machine),
        "settings": {
            "backends": backends,
            "writers": writers,
            "seconds": seconds,
            "warmup_s": warmup,
            "runs": runs,
            "record_bytes": RECORD_BYTES,
            "upkeep": upkeep,
            "request_timeout_s": REQUEST_TIMEOUT_S,
        },
        "codes": [c.describe() for c in codes],
        "loadavg": {"start": load_start, "end": load_end},
        "prices": PRICES,
        "results": results,
        "failed_runs": failed_runs,
        "history_ok": ok,
    }
    result["failed_requests"] = failed_requests(result)
    write_results(out_path, result)
    return result


if __name__ == "__main__":
    sys.exit(exit_code(main()))
