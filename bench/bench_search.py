"""Benchmark search (issue 24): /v1 `_search`, `_aggregate` and `_routing_keys` on a stream
of evlog records spanning many sealed segments, through the index families (companions)
vs a forced scan; index build throughput; seal -> coverage lag; calls, $ and CPU per query.

    python -m bench.bench_search [--records N] [--seal-records N] [--iters N]
                                 [--scan-iters N] [--quick] [--glue | --no-glue] [--out PATH]

Same machinery as the other benches: moto as the emulator, the app served by uvicorn from
bench/server.py (AWS calls counted there, /_bench/calls), bench/harness.py for percentiles,
calls and cost. Steps:

1. load: one /v1 stream with the evlog profile (POST /_profile), then POST /_schema adds a
   routing key (/requestId) and the evlog search config plus one rollup
   (dimensions [service], interval 1m, measures n=count and lat=summary of duration, log2
   histogram). --records evlog-shaped entries (20 services, ~95% 2xx, ~2% 5xx, log-normal
   durations, a message from a small vocabulary with "issuer declined" in ~1% and
   "declined" alone in another ~0.5%, unique request ids, timestamps --step-ms apart) are
   POSTed as JSON arrays of --batch entries through an indexer server
   (HEADWATER_SEAL_RECORDS=--seal-records, HEADWATER_TIERING_INTERVAL_MS=--interval-ms: its
   upkeep seals and its in-process indexer builds companions; HEADWATER_SEAL_AGE_MS=10000
   seals the remainder after the load). A thread polls
   `_index_status` during the load; after the load we wait until every record is sealed
   and covered (lag_segments 0).
2. lag: the largest `lag_ms` (age of the oldest sealed-but-unindexed segment) seen by the
   poller, and the time from the last segment being sealed to complete coverage.
3. indexed: a fresh query server (no upkeep, no indexer) answers each query --iters times
   after one warm-up; p50/p99 client latency, server CPU ms per query, AWS calls per query
   and $ per 1,000 queries (harness.cost_per_op; Lambda = 1 invocation + (server CPU ms +
   8 ms per AWS call) x 1 GB).
4. scan: the stream's index catalogue item is deleted (DynamoIndexCatalogue.delete), a
   fresh query server answers the same queries --scan-iters times (a scan is bounded by the
   protocol's 3 s search deadline: a timed-out scan is reported as such and its latency is
   a floor). Every answer is compared with the indexed one (total + hit offsets; aggregate
   counts per window and group; routing-key pages) and the check is reported.
5. build: the in-process indexer (headwater.index.build.index_stream, in this process)
   rebuilds every companion from scratch: records/s. With --glue (default for full-size
   runs when java and pyspark are present) the catalogue is deleted again and the Glue job
   (glue_jobs/indexer/job.py) runs on local Spark (local[2]): records/s over job.main only
   (Spark session start reported separately).
6. storage: companion bytes at rest / segment bytes (`_index_status`).

Targets (issue 24): _search p50 <= 100 ms and >= 10x the scan; _aggregate p50 <= 150 ms and
>= 10x; _routing_keys (page of 500) p50 <= 50 ms; index build >= 20,000 records/s.
Results: bench/results/latest-search.json.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import random
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench.bench_tiering import Cluster, cluster
from bench.bench_v0 import BenchServer, Emulators
from bench.harness import (
    AWS_CALL_MS,
    PRICES,
    RemoteCallCounter,
    cost_per_op,
    format_table,
    machine_info,
    per_op_calls,
    percentile,
    process_cpu_seconds,
    result_header,
    write_results,
)

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
STREAM = "app-logs"
JSON_CT = {"Content-Type": "application/json"}
T0_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z, a multiple of 60,000
ROLLUP = "svc_1m"
ROLLUP_CONFIG: dict[str, Any] = {
    "dimensions": ["service"],
    "intervals": ["1m"],
    "measures": {
        "n": {"kind": "count"},
        "lat": {"kind": "summary", "field": "duration", "histogram": "log2_v1"},
    },
}
SERVICES = [
    "checkout",
    "cart",
    "search",
    "catalog",
    "payments",
    "auth",
    "users",
    "orders",
    "shipping",
    "inventory",
    "pricing",
    "reviews",
    "recs",
    "notify",
    "billing",
    "gateway",
    "media",
    "session",
    "ledger",
    "fraud",
]
PATHS = [f"/api/{s}/{v}" for s in SERVICES for v in ("list", "get", "update")]
METHODS = ["GET", "GET", "GET", "POST", "PUT", "DELETE"]
WORDS = [
    "request",
    "handled",
    "served",
    "cache",
    "hit",
    "miss",
    "upstream",
    "retry",
    "timeout",
    "connection",
    "pool",
    "user",
    "session",
    "token",
    "refreshed",
    "order",
    "created",
    "updated",
    "item",
    "added",
    "removed",
    "payment",
    "authorized",
    "captured",
    "shipment",
    "queued",
    "sent",
    "email",
    "rendered",
    "template",
    "query",
    "executed",
    "rows",
    "returned",
    "slow",
    "fast",
    "ok",
    "accepted",
    "validated",
]
QUERIES: list[tuple[str, str]] = [
    # selective: a scan must walk the whole stream to answer them
    ("exact", "requestId:{request_id}"),  # one request's entry, a third of the way in
    ("range", "duration:>500"),  # ~0.07% of entries (log-normal durations)
    ("phrase", 'message:"issuer declined"'),  # ~1%, ranked by score: every match is read
    ("bare", "declined"),  # ~1.5%, ranked by score
    # common, newest first: the first page is found in the newest segment either way
    ("exact-common", "service:checkout"),  # 5%
    ("range-common", "status:>=500"),  # 2%
]
TARGETS = {
    "search_p50_ms": 100.0,
    "search_speedup": 10.0,
    "aggregate_p50_ms": 150.0,
    "aggregate_speedup": 10.0,
    "routing_keys_p50_ms": 50.0,
    "build_records_per_s": 20_000.0,
}


# --- data -------------------------------------------------------------------------------------
def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + (
        f"{ms % 1000:03d}Z"
    )


def entry(i: int, rng: random.Random, step_ms: int) -> dict[str, Any]:
    """One evlog-shaped entry (before evlog normalization)."""
    service = SERVICES[rng.randrange(len(SERVICES))]
    r = rng.random()
    if r < 0.02:
        status = rng.choice((500, 502, 503, 504))
    elif r < 0.05:
        status = rng.choice((400, 401, 402, 404, 409, 429))
    else:
        status = rng.choice((200, 200, 200, 200, 201, 204))
    words = [rng.choice(WORDS) for _ in range(rng.randrange(5, 11))]
    p = rng.random()
    if p < 0.01:  # the phrase, in ~1%
        words.insert(rng.randrange(len(words) + 1), "issuer declined")
    elif p < 0.015:  # "declined" without "issuer" before it, in ~0.5%
        words.insert(rng.randrange(len(words) + 1), "declined by fraud rules")
    return {
        "timestamp": iso(T0_MS + i * step_ms),
        "service": service,
        "environment": "prod",
        "region": rng.choice(("eu-west-1", "us-east-1")),
        "requestId": f"req-{rng.getrandbits(48):012x}",
        "method": rng.choice(METHODS),
        "path": rng.choice(PATHS),
        "status": status,
        "duration": round(rng.lognormvariate(3.0, 1.0), 3),
        "message": " ".join(words),
        "userId": f"u{rng.randrange(100_000)}",
    }


# --- HTTP helpers -------------------------------------------------------------------------
def _ok(r: httpx.Response, what: str) -> httpx.Response:
    if r.status_code >= 300:
        raise RuntimeError(f"{what}: {r.status_code} {r.text[:500]}")
    return r


def create_stream(http: httpx.Client, base: str) -> None:
    url = f"{base}/v1/stream/{STREAM}"
    _ok(http.put(url, headers=JSON_CT), "PUT stream")
    profile = {"apiVersion": "durable.streams/profile/v1", "profile": {"kind": "evlog"}}
    _ok(http.post(f"{url}/_profile", json=profile), "POST _profile")
    search = _ok(http.get(f"{url}/_details"), "GET _details").json()["schema"]["search"]
    body = {
        "routingKey": {"jsonPointer": "/requestId", "required": True},
        "search": {**search, "rollups": {ROLLUP: ROLLUP_CONFIG}},
    }
    _ok(http.post(f"{url}/_schema", json=body), "POST _schema")


def index_status(http: httpx.Client, base: str) -> dict[str, Any]:
    r = _ok(http.get(f"{base}/v1/stream/{STREAM}/_index_status"), "GET _index_status")
    return r.json()  # type: ignore[no-any-return]


def details(http: httpx.Client, base: str) -> dict[str, Any]:
    return _ok(http.get(f"{base}/v1/stream/{STREAM}/_details"), "GET _details").json()  # type: ignore[no-any-return]


class LagPoller(threading.Thread):
    """Polls _index_status every `every_s`: the largest lag_ms / lag_segments seen."""

    def __init__(self, base: str, every_s: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.base = base
        self.every_s = every_s
        self.stop_event = threading.Event()
        self.max_lag_ms = 0
        self.max_lag_segments = 0
        self.polls = 0
        self.errors = 0

    def run(self) -> None:
        with httpx.Client(timeout=30) as http:
            while not self.stop_event.wait(self.every_s):
                try:
                    st = index_status(http, self.base)
                except Exception:
                    self.errors += 1
                    continue
                self.polls += 1
                fams = st.get("search_families") or []
                if fams:
                    self.max_lag_ms = max(self.max_lag_ms, max(f["lag_ms"] for f in fams))
                bc = st["bundled_companions"]
                self.max_lag_segments = max(self.max_lag_segments, bc["lag_segments"])


def load(http: httpx.Client, base: str, records: int, batch: int, step_ms: int) -> float:
    rng = random.Random(24)
    url = f"{base}/v1/stream/{STREAM}"
    t0 = time.perf_counter()
    # An idempotent producer: a batch whose answer was a timeout (408: outcome unknown) or
    # 503 is sent again with the same Producer-Seq, and applies once.
    for n, start in enumerate(range(0, records, batch)):
        body = [entry(i, rng, step_ms) for i in range(start, min(records, start + batch))]
        headers = {
            **JSON_CT,
            "Producer-Id": "bench-loader",
            "Producer-Epoch": "0",
            "Producer-Seq": str(n),
        }
        for attempt in range(10):
            r = http.post(url, content=json.dumps(body), headers=headers)
            if r.status_code not in (408, 503):
                break
            RETRIES["load"] += 1
            time.sleep(min(2.0, 0.1 * 2**attempt))
        _ok(r, "POST entries")
    return time.perf_counter() - t0


RETRIES = {"load": 0}  # load batches sent again after a 408/503 (reported)


def wait_covered(
    http: httpx.Client, base: str, next_offset: str, timeout_s: float
) -> tuple[float, float, dict[str, Any]]:
    """Poll until everything is sealed, then until lag 0 with every segment covered.
    (seconds until sealed, seconds until covered, the final status), from now."""
    t0 = time.perf_counter()
    sealed_at: float | None = None
    st: dict[str, Any] = {}
    while time.perf_counter() - t0 < timeout_s:
        st = index_status(http, base)
        segs, bc = st["segments"], st["bundled_companions"]
        if sealed_at is None and segs["sealed_through"] == next_offset:
            sealed_at = time.perf_counter() - t0
        if (
            sealed_at is not None
            and bc["lag_segments"] == 0
            and bc["covered_segment_count"] == segs["total_count"] > 0
        ):
            return sealed_at, time.perf_counter() - t0, st
        time.sleep(0.1)
    raise RuntimeError(f"not sealed+covered within {timeout_s:.0f} s: {st}")


# --- timed requests ---------------------------------------------------------------------------
class Op:
    def __init__(self, name: str, kind: str, method: str, path: str, body: Any = None) -> None:
        self.name, self.kind, self.method, self.path, self.body = name, kind, method, path, body

    def send(self, http: httpx.Client, base: str) -> httpx.Response:
        url = f"{base}/v1/stream/{STREAM}/{self.path}"
        if self.method == "GET":
            return http.get(url, params=self.body)
        return http.post(url, content=json.dumps(self.body), headers=JSON_CT)


def fingerprint(op: Op, body: dict[str, Any]) -> Any:
    """What must be equal between the indexed and the scanned answer."""
    if op.kind == "search":
        return {
            "total": body["total"],
            "offsets": [h["offset"] for h in body["hits"]],
        }
    if op.kind == "aggregate":
        out = {}
        for b in body["buckets"]:
            for g in b["groups"]:
                m = g["measures"]
                key = f"{b['start']}|{json.dumps(g['key'], sort_keys=True)}"
                out[key] = (m["n"]["count"], m["lat"]["count"], round(m["lat"]["sum"], 6))
        return out
    return {"keys": body["keys"], "next_after": body["next_after"]}


def summary_of(op: Op, body: dict[str, Any]) -> dict[str, Any]:
    cov = body.get("coverage", {})
    out: dict[str, Any] = {
        "complete": cov.get("complete"),
        "indexed_segments": cov.get("indexed_segments"),
        "scanned_segments": cov.get("scanned_segments", cov.get("scanned_uploaded_segments")),
        "families": cov.get("index_families_used"),
    }
    if op.kind == "search":
        out["timed_out"] = body.get("timed_out")
        out["total"] = body["total"]
        out["hits"] = len(body["hits"])
    elif op.kind == "aggregate":
        out["used_rollups"] = cov.get("used_rollups")
        out["buckets"] = len(body["buckets"])
        out["events"] = sum(
            g["measures"]["n"]["count"] for b in body["buckets"] for g in b["groups"]
        )
    else:
        out["source"] = body.get("source")
        out["keys"] = len(body["keys"])
    return out


def measure(
    op: Op, base: str, srv: BenchServer, emu_pid: int, iters: int, warmup: int = 1
) -> dict[str, Any]:
    counter = RemoteCallCounter([base])
    with httpx.Client(timeout=60) as http:
        # the first request on this server (cold caches): latency and AWS calls
        counter.reset()
        t = time.perf_counter()
        last: httpx.Response = op.send(http, base)
        cold_ms = (time.perf_counter() - t) * 1000
        cold_calls = per_op_calls(counter.snapshot(), 1)
        for _ in range(warmup - 1):
            last = op.send(http, base)
        counter.reset()
        cpu0, emu0 = process_cpu_seconds(srv.pid), process_cpu_seconds(emu_pid)
        lat: list[float] = []
        took: list[float] = []
        statuses: dict[int, int] = {}
        for _ in range(iters):
            t = time.perf_counter()
            last = op.send(http, base)
            lat.append((time.perf_counter() - t) * 1000)
            statuses[last.status_code] = statuses.get(last.status_code, 0) + 1
            if last.status_code in (200, 408):
                server_took = last.json().get("took_ms")
                if isinstance(server_took, int | float):
                    took.append(float(server_took))
        cpu_ms = 1000 * (process_cpu_seconds(srv.pid) - cpu0) / iters
        emu_ms = 1000 * (process_cpu_seconds(emu_pid) - emu0) / iters
        calls = counter.snapshot()
    if last.status_code not in (200, 408):
        raise RuntimeError(f"{op.name}: {last.status_code} {last.text[:500]}")
    body = last.json()
    per_op = per_op_calls(calls, iters)
    aws_calls = sum(f.get("calls", 0.0) for f in per_op.values())
    cost = cost_per_op(calls, iters, lambda_ms_per_op=cpu_ms + AWS_CALL_MS * aws_calls)
    return {
        "iters": iters,
        "p50_ms": percentile(lat, 50),
        "p99_ms": percentile(lat, 99),
        "mean_ms": sum(lat) / len(lat),
        "server_took_p50_ms": percentile(took, 50) if took else None,
        "cold_ms": cold_ms,
        "cold_aws_calls": cold_calls,
        "cold_aws_calls_total": sum(f.get("calls", 0.0) for f in cold_calls.values()),
        "latencies_ms": [round(x, 3) for x in lat],
        "statuses": {str(k): v for k, v in statuses.items()},
        "server_cpu_ms_per_op": cpu_ms,
        "moto_cpu_ms_per_op": emu_ms,
        "aws_calls_per_op": per_op,
        "aws_calls_total_per_op": aws_calls,
        "cost_per_op": cost,
        "usd_per_1000": {k: 1000 * v for k, v in cost.items() if k.startswith("usd_")},
        "answer": summary_of(op, body),
        "_fingerprint": fingerprint(op, body),
    }


def run_phase(
    c: Cluster, emu: Emulators, ops: list[Op], iters: int, label: str
) -> dict[str, dict[str, Any]]:
    srv = c.start(f"query-{label}", QUERY_ENV)
    emu_pid = emu.pids()["moto"]
    out = {}
    try:
        for op in ops:
            m = measure(op, srv.url, srv, emu_pid, iters)
            a = m["answer"]
            print(
                f"  {label:7s} {op.name:14s} p50 {m['p50_ms']:8.1f} ms  p99 {m['p99_ms']:8.1f} ms"
                f"  cpu {m['server_cpu_ms_per_op']:7.1f} ms/op  calls/op "
                f"{m['aws_calls_total_per_op']:6.1f}  indexed {a['indexed_segments']} "
                f"scanned {a['scanned_segments']} complete {a['complete']}"
            )
            out[op.name] = m
    finally:
        c.stop(srv)
    return out


QUERY_ENV = {"HEADWATER_TIERING_INTERVAL_MS": "0", "HEADWATER_TIERING_INLINE": "0"}


# --- index builds -----------------------------------------------------------------------------
class _Blobs:
    def __init__(self, s3: Any, bucket: str) -> None:
        self.s3, self.bucket = s3, bucket

    def get(self, key: str) -> bytes:
        return self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()  # type: ignore[no-any-return]

    def put(self, key: str, body: bytes) -> None:
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=body)


class Storage:
    """Direct access to the cluster's tables and bucket (for the catalogue and the indexer)."""

    def __init__(self, emu: Emulators, prefix: str) -> None:
        import boto3

        from headwater.settings import Settings
        from headwater.storage.heads import DynamoHeadStore
        from headwater.storage.index_catalogue import DynamoIndexCatalogue
        from headwater.storage.segments import DynamoSegmentStore

        env = emu.env()
        self.settings = Settings(resource_prefix=prefix)
        session = boto3.Session(
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
            aws_session_token=env.get("AWS_SESSION_TOKEN"),
            region_name=self.settings.region,
        )
        self.endpoint = env["AWS_ENDPOINT_URL"]
        self.ddb = session.client("dynamodb", endpoint_url=self.endpoint)
        self.s3 = session.client("s3", endpoint_url=self.endpoint)
        self.heads = DynamoHeadStore(self.ddb, self.settings)
        self.segments = DynamoSegmentStore(self.ddb, self.settings)
        self.catalogue = DynamoIndexCatalogue(self.ddb, self.settings)
        self.blobs = _Blobs(self.s3, self.settings.bucket_name)

    def head(self) -> Any:
        from headwater.durable.state import topic_of

        h = self.heads.get(topic_of(STREAM))
        if h is None:
            raise RuntimeError("no head for the stream")
        return h

    def registry(self, head: Any) -> dict[str, Any]:
        from headwater.durable.state import state_of

        state = state_of(head)
        assert state is not None and state.registry_key
        return json.loads(self.blobs.get(state.registry_key))  # type: ignore[no-any-return]

    def segment_records(self, head: Any) -> tuple[int, int]:
        """(sealed segments, live records in them)."""
        segs = self.segments.after(head, 0, 100_000)
        return len(segs), sum(s.last_seq - s.first_seq + 1 - len(s.deleted) for s in segs)

    def drop_catalogue(self, head: Any) -> None:
        self.catalogue.delete(head.topic, head.epoch)
        if self.catalogue.get(head.topic, head.epoch) is not None:
            raise RuntimeError("catalogue item still there after delete")


def build_inprocess(st: Storage) -> dict[str, Any]:
    """Rebuild every companion with index_stream (catalogue deleted first): records/s."""
    from headwater.index.build import index_stream

    head = st.head()
    st.drop_catalogue(head)
    reg = st.registry(head)
    n_segs, n_records = st.segment_records(head)
    built = nbytes = 0
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    while True:
        p = index_stream(
            head,
            reg,
            segments=st.segments,
            blobs=st.blobs,
            catalogue=st.catalogue,
            now_ms=int(time.time() * 1000),
            max_segments=64,
        )
        built += p.built
        nbytes += p.bytes
        if p.built == 0:
            break
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    cat = st.catalogue.get(head.topic, head.epoch)
    return {
        "segments": n_segs,
        "built": built,
        "records": n_records,
        "elapsed_s": elapsed,
        "records_per_s": n_records / elapsed if elapsed > 0 else math.nan,
        "bench_process_cpu_s": cpu,
        "companion_bytes": nbytes,
        "covered_through": cat.covered_through if cat else None,
        "complete": bool(cat and built == n_segs),
    }


def glue_available() -> str | None:
    """None if the Glue job can run here, else why not."""
    import shutil

    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "no java"
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "no pyspark"
    return None


def build_glue(st: Storage, tasks_per_core: int = 2, runs: int = 6) -> dict[str, Any]:
    """Run the Glue job on local Spark `runs` times in one session, the catalogue deleted
    before each (so each rebuilds every companion): records/s over job.main. The first run
    pays for a cold JVM and cold Python workers (like the session start, reported apart);
    the figure is the median of the others (the job's steady throughput)."""
    jobs = str(REPO / "glue_jobs")
    if jobs not in sys.path:
        sys.path.insert(0, jobs)
    from indexer.job import main as job_main
    from rollup.spark import local_session

    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        os.environ.setdefault(k, "testing")  # the job's boto3 clients (emulator credentials)
    head = st.head()
    n_segs, n_records = st.segment_records(head)
    t0 = time.perf_counter()
    spark = local_session()
    spark.sparkContext.setLogLevel("ERROR")
    session_s = time.perf_counter() - t0
    args = [
        "--bucket",
        st.settings.bucket_name,
        "--resource-prefix",
        st.settings.resource_prefix,
        "--endpoint-url",
        st.endpoint,
        "--region",
        st.settings.region,
        "--tasks-per-core",
        str(tasks_per_core),
    ]
    each: list[dict[str, Any]] = []
    try:
        for _ in range(max(1, runs)):
            st.drop_catalogue(head)
            buf = io.StringIO()
            t1 = time.perf_counter()
            with contextlib.redirect_stdout(buf):
                rc = job_main(args, spark=spark)
            elapsed = time.perf_counter() - t1
            summary = json.loads(buf.getvalue().strip().splitlines()[-1])
            cat = st.catalogue.get(head.topic, head.epoch)
            each.append(
                {
                    "exit_code": rc,
                    "built": summary.get("built"),
                    "elapsed_s": elapsed,
                    "records_per_s": n_records / elapsed if elapsed > 0 else math.nan,
                    "companion_bytes": summary.get("bytes"),
                    "phase_seconds": summary.get("seconds"),
                    "complete": bool(cat and summary.get("built") == n_segs),
                }
            )
    finally:
        spark.stop()
    warm = each[1:] or each
    mid = sorted(warm, key=lambda r: r["elapsed_s"])[len(warm) // 2]
    return {
        "spark_master": "local[2]",
        "tasks_per_core": tasks_per_core,
        "spark_session_start_s": session_s,
        "segments": n_segs,
        "records": n_records,
        "runs": each,
        "cold_records_per_s": each[0]["records_per_s"],
        **mid,
        "complete": all(r["complete"] for r in each),
        "exit_code": max(r["exit_code"] for r in each),
    }


# --- the benchmark ----------------------------------------------------------------------------
def request_id_at(n: int, step_ms: int) -> str:
    """The requestId of entry `n` of the load (the generator replayed)."""
    rng = random.Random(24)
    for i in range(n):
        entry(i, rng, step_ms)
    return str(entry(n, rng, step_ms)["requestId"])


def make_ops(from_ms: int, to_ms: int, request_id: str) -> list[Op]:
    ops = [
        Op(f"search-{n}", "search", "POST", "_search", {"q": q.format(request_id=request_id)})
        for n, q in QUERIES
    ]
    agg = {
        "rollup": ROLLUP,
        "from": from_ms,
        "to": to_ms,
        "interval": "1m",
        "group_by": ["service"],
    }
    ops.append(Op("aggregate-1m", "aggregate", "POST", "_aggregate", agg))
    ops.append(Op("routing-keys", "routing_keys", "GET", "_routing_keys", {"limit": "500"}))
    return ops


def _fmt(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--records", type=int, default=None, help="entries (default 200,000)")
    ap.add_argument("--seal-records", type=int, default=None, help="HEADWATER_SEAL_RECORDS")
    ap.add_argument("--batch", type=int, default=500, help="entries per POST")
    ap.add_argument("--step-ms", type=int, default=100, help="timestamp step between entries")
    ap.add_argument("--iters", type=int, default=None, help="timed requests per query, indexed")
    ap.add_argument("--scan-iters", type=int, default=None, help="timed requests per query, scan")
    ap.add_argument("--interval-ms", type=int, default=1000, help="upkeep + indexer interval")
    ap.add_argument("--quick", action="store_true", help="small run (20,000 records)")
    ap.add_argument("--glue", dest="glue", action="store_true", default=None)
    ap.add_argument("--no-glue", dest="glue", action="store_false")
    ap.add_argument(
        "--glue-tasks-per-core",
        default="2",
        help="the job's --tasks-per-core; a comma list measures each value",
    )
    ap.add_argument(
        "--build-only", action="store_true", help="skip the query phases (load, then builds)"
    )
    ap.add_argument("--timeout", type=float, default=900, help="seconds to wait for coverage")
    ap.add_argument("--out", default=None, help="results JSON (default bench/results/...)")
    ap.add_argument(
        "--profile-build",
        default=None,
        metavar="PATH",
        help="cProfile the in-process build; pstats to PATH, the top 20 printed",
    )
    ap.add_argument("--runs", type=int, default=None, help="ignored (run_all passes it)")
    args = ap.parse_args(argv)
    records = args.records or (20_000 if args.quick else 200_000)
    seal = args.seal_records or (2_000 if args.quick else 5_000)
    iters = args.iters or (10 if args.quick else 30)
    scan_iters = args.scan_iters or (3 if args.quick else 5)
    glue = args.glue if args.glue is not None else not args.quick
    glue_skip = glue_available() if glue else "not requested (--no-glue / --quick)"
    out_path = Path(args.out or RESULTS / "latest-search.json")
    machine = machine_info()
    print(
        f"bench search | moto | {machine['cpu_model']} x{machine['cores']} | Python "
        f"{machine['python']} | records={records:,} seal={seal:,} batch={args.batch} "
        f"iters={iters} scan-iters={scan_iters} glue={glue_skip is None} | load "
        f"{machine.get('loadavg_1m')}"
    )
    indexer_env = {
        "HEADWATER_SEAL_RECORDS": str(seal),
        "HEADWATER_TIERING_INTERVAL_MS": str(args.interval_ms),
        "HEADWATER_SEAL_AGE_MS": "10000",
    }
    result: dict[str, Any] = {
        **result_header("search", argv, machine),
        "settings": {
            "records": records,
            "seal_records": seal,
            "batch": args.batch,
            "step_ms": args.step_ms,
            "iters": iters,
            "scan_iters": scan_iters,
            "indexer_env": indexer_env,
            "query_env": QUERY_ENV,
            "queries": dict(QUERIES),
            "rollup": {ROLLUP: ROLLUP_CONFIG},
        },
        "prices": PRICES,
        "targets": TARGETS,
    }
    emu = Emulators("moto")
    try:
        with cluster(emu) as c:
            st = Storage(emu, c.prefix)
            # 1. load through an indexer server
            indexer = c.start("indexer", indexer_env)
            poller = LagPoller(indexer.url)
            with httpx.Client(timeout=120) as http:
                create_stream(http, indexer.url)
                poller.start()
                load_s = load(http, indexer.url, records, args.batch, args.step_ms)
                d = details(http, indexer.url)
                next_offset = d["stream"]["next_offset"]
                print(
                    f"\n== loaded {records:,} entries in {load_s:.1f} s "
                    f"({records / load_s:,.0f} rec/s, batches of {args.batch}; "
                    f"{RETRIES['load']} sent again after a 408/503)"
                )
                sealed_s, covered_s, status = wait_covered(
                    http, indexer.url, next_offset, args.timeout
                )
                poller.stop_event.set()
                poller.join(timeout=5)
                d = details(http, indexer.url)
            c.stop(indexer)
            segs = status["segments"]
            bc = status["bundled_companions"]
            seg_bytes = int(segs["bytes"])
            fam_bytes = int(bc["bytes_at_rest"])
            result["load"] = {
                "records": records,
                "load_s": load_s,
                "load_batches_resent": RETRIES["load"],
                "records_per_s": records / load_s,
                "entries": d["stream"]["entries"],
                "segments": segs["total_count"],
                "epoch": d["stream"]["epoch"],
            }
            result["lag"] = {
                "indexer_interval_ms": args.interval_ms,
                "max_lag_ms_seen": poller.max_lag_ms,
                "max_lag_segments_seen": poller.max_lag_segments,
                "polls": poller.polls,
                "sealed_after_load_s": sealed_s,
                "covered_after_load_s": covered_s,
                "last_seal_to_coverage_s": covered_s - sealed_s,
            }
            result["storage"] = {
                "segment_bytes": seg_bytes,
                "companion_bytes": fam_bytes,
                "companion_per_segment_byte": fam_bytes / seg_bytes if seg_bytes else math.nan,
                "desired_families": bc["desired_families"],
            }
            print(
                f"   {segs['total_count']} segments sealed {sealed_s:.1f} s and covered "
                f"{covered_s:.1f} s after the load (max lag seen while loading: "
                f"{poller.max_lag_ms:,} ms, {poller.max_lag_segments} segments; "
                f"{poller.polls} polls)"
            )
            last_ms = T0_MS + (records - 1) * args.step_ms
            from_ms = T0_MS // 60_000 * 60_000
            to_ms = (last_ms // 60_000 + 1) * 60_000
            ops = make_ops(from_ms, to_ms, request_id_at(records // 3, args.step_ms))
            indexed: dict[str, Any] = {}
            scanned: dict[str, Any] = {}
            if not args.build_only:
                # 2. indexed
                print(f"\n== indexed: fresh query server, {iters} timed requests per query")
                indexed = run_phase(c, emu, ops, iters, "indexed")
                # 3. forced scan
                st.drop_catalogue(st.head())
                print(
                    f"\n== scan: catalogue item deleted, fresh query server, {scan_iters} requests"
                )
                scanned = run_phase(c, emu, ops, scan_iters, "scan")
            # 4. index builds
            print("\n== index build: in-process index_stream over every sealed segment")
            moto_pid = emu.pids()["moto"]
            emu0 = process_cpu_seconds(moto_pid)
            if args.profile_build:
                import cProfile
                import pstats

                prof = cProfile.Profile()
                inproc = prof.runcall(build_inprocess, st)
                prof.dump_stats(args.profile_build)
                pstats.Stats(args.profile_build).sort_stats("cumulative").print_stats(20)
            else:
                inproc = build_inprocess(st)
            inproc["emulator_cpu_s"] = process_cpu_seconds(moto_pid) - emu0
            print(
                f"   {inproc['built']} segments, {inproc['records']:,} records in "
                f"{inproc['elapsed_s']:.2f} s = {inproc['records_per_s']:,.0f} rec/s "
                f"(this process {inproc['bench_process_cpu_s']:.1f} s CPU, the emulator "
                f"{inproc['emulator_cpu_s']:.1f} s)"
            )
            builds: dict[str, Any] = {"inprocess": inproc}
            if glue_skip is None:
                for n, tpc in enumerate(int(x) for x in args.glue_tasks_per_core.split(",")):
                    print(
                        "\n== index build: Glue job (glue_jobs/indexer) on local Spark local[2], "
                        f"{tpc} tasks per core"
                    )
                    emu0 = process_cpu_seconds(moto_pid)
                    g = build_glue(st, tpc)
                    g["emulator_cpu_s"] = process_cpu_seconds(moto_pid) - emu0
                    builds["glue" if n == 0 else f"glue_{tpc}_per_core"] = g
                    for i, r in enumerate(g["runs"]):
                        print(
                            f"   run {i + 1}{' (cold JVM and workers)' if i == 0 else ''}: "
                            f"{r['built']} segments, {g['records']:,} records in "
                            f"{r['elapsed_s']:.2f} s = {r['records_per_s']:,.0f} rec/s; "
                            f"phases (wall s) {r['phase_seconds']}"
                        )
                    print(
                        f"   median of the warm runs {g['records_per_s']:,.0f} rec/s (session "
                        f"start {g['spark_session_start_s']:.1f} s, not counted; the emulator "
                        f"{g['emulator_cpu_s']:.1f} s CPU over every run)"
                    )
            else:
                builds["glue"] = {"skipped": glue_skip}
            result["index_build"] = builds
    finally:
        emu.stop()
    if args.build_only:  # no query figures: printed above, written only where --out says
        if args.out:
            out_path.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
        return result

    # --- report ---
    rows: list[dict[str, Any]] = []
    for op in ops:
        ix, sc = indexed[op.name], scanned[op.name]
        same = ix.pop("_fingerprint") == sc.pop("_fingerprint")
        scan_complete = bool(sc["answer"]["complete"]) and not sc["answer"].get("timed_out")
        # a scan cut short by the 3 s deadline (or the scan cap) has a partial answer
        equal: bool | None = same if scan_complete or same else None
        speedup = sc["p50_ms"] / ix["p50_ms"] if ix["p50_ms"] > 0 else math.nan
        if op.kind == "search":
            p50_t, sp_t = TARGETS["search_p50_ms"], TARGETS["search_speedup"]
            if op.name.endswith("-common"):
                sp_t = None  # the scan stops in the newest segment too: shown, not judged
        elif op.kind == "aggregate":
            p50_t, sp_t = TARGETS["aggregate_p50_ms"], TARGETS["aggregate_speedup"]
        else:
            p50_t, sp_t = TARGETS["routing_keys_p50_ms"], None
        rows.append(
            {
                "name": op.name,
                "kind": op.kind,
                "request": {"method": op.method, "path": op.path, "body": op.body},
                "indexed": ix,
                "scan": sc,
                "speedup_p50": speedup,
                "scan_complete": scan_complete,
                "results_equal": equal,
                "families_used": (ix["answer"]["indexed_segments"] or 0) > 0,
                "target": {
                    "p50_ms": p50_t,
                    "p50_met": ix["p50_ms"] <= p50_t,
                    "speedup": sp_t,
                    "speedup_met": None if sp_t is None else speedup >= sp_t,
                },
            }
        )
    result["queries"] = rows
    result["results_equal"] = all(r["results_equal"] is not False for r in rows)
    result["results_compared"] = sum(1 for r in rows if r["results_equal"] is not None)
    result["families_used"] = all(r["families_used"] for r in rows)

    def ok(met: bool | None) -> str:
        return "" if met is None else ("ok" if met else "MISS")

    print("\nQueries, indexed (families) vs forced scan (catalogue deleted), client latency:")
    print(
        format_table(
            [
                "query",
                "idx p50",
                "idx p99",
                "scan p50",
                "scan p99",
                "speedup",
                "p50 target",
                "x target",
                "idx/scan segs",
                "equal",
                "scan complete",
            ],
            [
                [
                    r["name"],
                    _fmt(r["indexed"]["p50_ms"]),
                    _fmt(r["indexed"]["p99_ms"]),
                    _fmt(r["scan"]["p50_ms"]),
                    _fmt(r["scan"]["p99_ms"]),
                    f"{_fmt(r['speedup_p50'])}x",
                    f"{ok(r['target']['p50_met'])} <= {r['target']['p50_ms']:g} ms",
                    (
                        f"{ok(r['target']['speedup_met'])} >= {r['target']['speedup']:g}x"
                        if r["target"]["speedup"]
                        else ""
                    ),
                    f"{r['indexed']['answer']['indexed_segments']}/"
                    f"{r['scan']['answer']['scanned_segments']}",
                    {True: "yes", False: "NO", None: "n/a"}[r["results_equal"]],
                    "yes" if r["scan_complete"] else "no (timed out/partial: floor)",
                ]
                for r in rows
            ],
        )
    )
    print(
        "\nPer query (indexed | scan), timed requests after one warm-up: server-reported took_ms,"
        "\nCPU ms per query of our server and of moto, AWS calls and S3 GETs and RRU per query,"
        "\n$ per 1,000 queries (DDB+S3; +Lambda: 1 invocation + (CPU ms + 8 ms/AWS call) x 1 GB),"
        "\nand the first request on a fresh server (cold caches): latency ms / AWS calls:"
    )
    print(
        format_table(
            [
                "query",
                "took_ms p50",
                "srv CPU ms",
                "moto CPU ms",
                "AWS calls",
                "S3 GET",
                "RRU",
                "$/1k DDB+S3",
                "$/1k +Lambda",
                "cold ms / calls",
                "answer (indexed)",
            ],
            [
                [
                    r["name"],
                    f"{_fmt(r['indexed']['server_took_p50_ms'], '.0f')} | "
                    f"{_fmt(r['scan']['server_took_p50_ms'], '.0f')}",
                    f"{r['indexed']['server_cpu_ms_per_op']:.1f} | "
                    f"{r['scan']['server_cpu_ms_per_op']:.1f}",
                    f"{r['indexed']['moto_cpu_ms_per_op']:.1f} | "
                    f"{r['scan']['moto_cpu_ms_per_op']:.1f}",
                    f"{r['indexed']['aws_calls_total_per_op']:.1f} | "
                    f"{r['scan']['aws_calls_total_per_op']:.1f}",
                    f"{r['indexed']['cost_per_op']['s3_get']:.1f} | "
                    f"{r['scan']['cost_per_op']['s3_get']:.1f}",
                    f"{r['indexed']['cost_per_op']['rru']:.1f} | "
                    f"{r['scan']['cost_per_op']['rru']:.1f}",
                    f"{r['indexed']['usd_per_1000']['usd_storage']:.5f} | "
                    f"{r['scan']['usd_per_1000']['usd_storage']:.5f}",
                    f"{r['indexed']['usd_per_1000']['usd_total']:.4f} | "
                    f"{r['scan']['usd_per_1000']['usd_total']:.4f}",
                    f"{r['indexed']['cold_ms']:.0f}/{r['indexed']['cold_aws_calls_total']:.0f} | "
                    f"{r['scan']['cold_ms']:.0f}/{r['scan']['cold_aws_calls_total']:.0f}",
                    _answer_text(r["indexed"]["answer"]),
                ]
                for r in rows
            ],
        )
    )
    b = result["index_build"]
    build_rows = []
    for name in ("inprocess", "glue"):
        x = b[name]
        if "skipped" in x:
            build_rows.append([name, "-", "-", "-", "-", f"skipped: {x['skipped']}"])
            continue
        met = x["records_per_s"] >= TARGETS["build_records_per_s"]
        build_rows.append(
            [
                name,
                str(x["built"]),
                f"{x['records']:,}",
                f"{x['elapsed_s']:.2f}",
                f"{x['records_per_s']:,.0f}",
                f"{ok(met)} >= {TARGETS['build_records_per_s']:,.0f} rec/s",
            ]
        )
        x["target_met"] = met
    print("\nIndex build (from scratch, every sealed segment):")
    print(format_table(["indexer", "segments", "records", "s", "rec/s", "target"], build_rows))
    lag, sto = result["lag"], result["storage"]
    print(
        f"\nLag (indexer every {lag['indexer_interval_ms']} ms): max age of an unindexed sealed "
        f"segment seen while loading {lag['max_lag_ms_seen']:,} ms "
        f"({lag['max_lag_segments_seen']} segments); last segment sealed -> complete coverage "
        f"{lag['last_seal_to_coverage_s']:.2f} s (polled every 0.1 s)"
    )
    print(
        f"Storage: companions {sto['companion_bytes']:,} B for segments {sto['segment_bytes']:,} B"
        f" = {sto['companion_per_segment_byte']:.3f} B of families per B of segment"
    )
    print(
        f"Results equal (indexed vs scan): {'yes' if result['results_equal'] else 'NO'} "
        f"({result['results_compared']} of {len(rows)} compared; a partial scan is not); "
        f"families used by every indexed query: {'yes' if result['families_used'] else 'NO'}"
    )
    write_results(out_path, result)
    return result


def _answer_text(a: dict[str, Any]) -> str:
    if "total" in a:
        return f"total {a['total']['value']} ({a['total']['relation']})"
    if "buckets" in a:
        return f"{a['buckets']} windows, {a['events']:,} events, rollups {a['used_rollups']}"
    return f"{a['keys']} keys from {a['source']}"


if __name__ == "__main__":
    main()
