"""Benchmark read-your-writes with many writers: what readers pay for slots still open.

    python -m bench.bench_ryw [--writers 1,4,8] [--seconds 15] [--backend ddblocal|moto]
                              [--quick] [--out PATH]

Issue 41: with seqs from the topic's counter, an append is acknowledged once its own frame
is written; a slot reserved before it by another writer may still be open. A read never
skips such a slot (docs/storage.md "The sequencer"): it waits for its frame (at most the
hole timeout, then fills it). So every append stays visible to the very next read, and
readers pay for writers in flight. This measures that payment.

Processes, as bench_writers builds them (standard Lambda: one request per process): the
emulator(s), N writer servers and N reader servers (bench/server.py, one topic), and one
load generator holding N closed-loop writers, each with a reader that follows the whole
topic. Writer w appends one 1 KB record to writer server w; as soon as the append is
acknowledged at seq s, its reader reads from reader server w from its cursor
(`POST /v0/topics/<t>/diff`, `limit` 1000, a strong head read: every writer's records since
its last read, up to the head) and must get the record at seq s, with its id, in that very
read; the cursor moves on. The read is timed from its send, and it waits on the other
writers' slots still open below the head: that wait is the cost measured. Then the writer
appends again.

Printed per N: appends/s; append p50/p99; read-after-ack p50/p99/max; reads that did not
return the record just acknowledged (read-your-writes violations: must be 0); the readers'
DynamoDB calls per read by API (their waits on open slots are GetItem polls); and the holes
the readers filled. Results: bench/results/latest-ryw.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.bench_v0 import Emulators, RawHttp
from bench.bench_writers import (
    DEFAULT_CODE,
    REPO,
    UPKEEP_OFF,
    _api_name,
    _http,
    _pad_pool,
    append_body,
    make_code,
    record_data,
    servers,
)
from bench.harness import (
    RemoteCallCounter,
    barrier_main,
    format_table,
    machine_info,
    percentile,
    result_header,
    run_processes,
    write_results,
)

RESULTS = REPO / "bench" / "results"
REQUEST_TIMEOUT_S = 60.0


def ryw_process(spec: dict[str, Any], ready: Any, go: Any, out: Any) -> None:
    barrier_main(_ryw_main, spec, ready, go, out)


async def _ryw_main(spec: dict[str, Any], ready: Any, go: Any) -> dict[str, Any]:
    """Closed-loop writers: append to writer server w, then read it back from reader
    server w. Each op: [w, append status, seq, append ms, read ms, read ok 0/1]."""
    wurls: list[str] = spec["writers"]
    rurls: list[str] = spec["readers"]
    path = f"/v0/topics/{spec['topic']}"
    wconn = [RawHttp(u) for u in wurls]
    rconn = [RawHttp(u) for u in rurls]
    pools = [_pad_pool(w) for w in range(len(wurls))]
    ops: list[list[float]] = []
    bad: list[str] = []
    cursors = [0] * len(wurls)

    async def one(w: int, i: int, timed: bool) -> None:
        data = record_data(spec["tag"], w, i, pools[w])
        t0 = time.perf_counter()
        status, content = await asyncio.wait_for(
            wconn[w].request("POST", path, append_body(data)), REQUEST_TIMEOUT_S
        )
        t1 = time.perf_counter()
        if not 200 <= status < 300:
            if timed:
                ops.append([w, status, -1, (t1 - t0) * 1000, 0.0, 0])
            return
        seq = int(json.loads(content)["first_seq"])
        # the reader follows the whole topic from its cursor: the records of every writer
        # since its last read, up to the head, its own append among them
        body = json.dumps({"from_seq": cursors[w], "limit": 1000}).encode()
        rstatus, rcontent = await asyncio.wait_for(
            rconn[w].request("POST", f"{path}/diff", body), REQUEST_TIMEOUT_S
        )
        t2 = time.perf_counter()
        ok = 0
        if rstatus == 200:
            got = json.loads(rcontent)
            mine = [r for r in got["records"] if r["$seq"] == seq]
            ok = int(bool(mine) and mine[0]["data"]["id"] == data["id"])
            cursors[w] = max(cursors[w], int(got["next_from_seq"]))
        if not ok and len(bad) < 5:
            bad.append(f"w{w} seq {seq}: {rstatus} {rcontent[:200]!r}")
        if timed:
            ops.append([w, status, seq, (t1 - t0) * 1000, (t2 - t1) * 1000, ok])

    try:
        await asyncio.gather(*(one(w, 0, False) for w in range(len(wurls))))
        ready.wait()
        go.wait()
        deadline = time.perf_counter() + spec["seconds"]
        t0 = time.perf_counter()

        async def loop(w: int) -> None:
            i = 1
            while time.perf_counter() < deadline:
                await one(w, i, True)
                i += 1

        await asyncio.gather(*(loop(w) for w in range(len(wurls))))
        elapsed = time.perf_counter() - t0
    finally:
        for c in [*wconn, *rconn]:
            await c.close()
    return {"ops": ops, "elapsed_s": elapsed, "bad": bad}


def run_once(code: Any, backend: str, n: int, seconds: float, log_dir: Path) -> dict[str, Any]:
    prefix = f"ryw-{uuid.uuid4().hex[:6]}"
    tag = uuid.uuid4().hex[:8]
    topic = f"ryw-{tag}"
    emu = Emulators(backend)
    try:
        env = {**emu.env(), "HEADWATER_RESOURCE_PREFIX": prefix, **UPKEEP_OFF}
        with servers(code, env, 2 * n, log_dir) as srv:
            writers, readers = srv[:n], srv[n:]
            _http("PUT", f"{writers[0].url}/v0/topics/{topic}", {})
            counter = RemoteCallCounter([s.url for s in readers])

            def begin() -> None:
                counter.reset()

            spec = {
                "writers": [s.url for s in writers],
                "readers": [s.url for s in readers],
                "topic": topic,
                "tag": tag,
                "seconds": seconds,
            }
            (got,) = run_processes(ryw_process, [spec], begin, what="ryw")
            calls = counter.snapshot()
            fills = sum(s.log_tail(10**7).count("filled an overdue slot") for s in readers)
    finally:
        emu.stop()
    return summarize(n, got, calls, fills)


def summarize(
    n: int, got: Mapping[str, Any], calls: Mapping[str, Any], fills: int
) -> dict[str, Any]:
    ops = got["ops"]
    acked = [op for op in ops if op[2] >= 0]
    reads = len(acked)
    by_api: dict[str, float] = {}
    for api, f in calls.get("calls", {}).items():
        service, name = _api_name(api)
        if service == "DynamoDB":
            by_api[name] = f["calls"] / max(reads, 1)
    return {
        "writers": n,
        "appends": len(acked),
        "failed": len(ops) - len(acked),
        "appends_per_s": len(acked) / got["elapsed_s"] if got["elapsed_s"] else 0.0,
        "append_p50_ms": percentile([op[3] for op in acked], 50),
        "append_p99_ms": percentile([op[3] for op in acked], 99),
        "read_p50_ms": percentile([op[4] for op in acked], 50),
        "read_p99_ms": percentile([op[4] for op in acked], 99),
        "read_max_ms": max((op[4] for op in acked), default=float("nan")),
        "ryw_violations": sum(1 for op in acked if not op[5]),
        "violation_samples": got["bad"],
        "reader_calls_per_read": by_api,
        "holes_filled_by_readers": fills,
    }


def table(rows: Sequence[Mapping[str, Any]]) -> str:
    body = [
        [
            r["writers"],
            f"{r['appends_per_s']:.1f}",
            f"{r['append_p50_ms']:.1f} / {r['append_p99_ms']:.1f}",
            f"{r['read_p50_ms']:.1f} / {r['read_p99_ms']:.1f} / {r['read_max_ms']:.0f}",
            r["ryw_violations"],
            ", ".join(f"{k} {v:.2f}" for k, v in sorted(r["reader_calls_per_read"].items())),
            r["holes_filled_by_readers"],
        ]
        for r in rows
    ]
    return format_table(
        [
            "N",
            "appends/s",
            "append p50 / p99 ms",
            "read-after-ack p50 / p99 / max ms",
            "RYW violations",
            "reader calls per read",
            "holes filled",
        ],
        body,
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--writers", default=None, help="N values (default 1,4,8)")
    ap.add_argument("--seconds", type=float, default=None, help="timed seconds per run (15)")
    ap.add_argument("--backend", choices=("ddblocal", "moto"), default="ddblocal")
    ap.add_argument("--code", default=str(DEFAULT_CODE))
    ap.add_argument("--quick", action="store_true", help="smoke run: N = 1,2 for 4 s")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    ns = [int(x) for x in (args.writers or ("1,2" if args.quick else "1,4,8")).split(",")]
    seconds = args.seconds or (4.0 if args.quick else 15.0)
    code = make_code(args.code, str(REPO), "", ns)
    machine = machine_info()
    load_start = [round(x, 2) for x in os.getloadavg()]
    print(
        f"bench ryw | {machine['cpu_model']} x{machine['cores']} | code {code.label} | "
        f"{args.backend} | {seconds:g} s per N | load at start {load_start}"
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-ryw-") as tmp:
        for n in ns:
            rows.append(run_once(code, args.backend, n, seconds, Path(tmp)))
            r = rows[-1]
            print(
                f"  N={n}: {r['appends_per_s']:.1f} appends/s, read after ack p50 "
                f"{r['read_p50_ms']:.1f} p99 {r['read_p99_ms']:.1f} ms, "
                f"{r['ryw_violations']} violations"
            )
    load_end = [round(x, 2) for x in os.getloadavg()]
    print(table(rows))
    print(f"load average at start {load_start}, at end {load_end}")
    result = {
        **result_header("ryw", argv, machine),
        "settings": {"writers": ns, "seconds": seconds, "backend": args.backend},
        "code": code.describe(),
        "loadavg": {"start": load_start, "end": load_end},
        "results": rows,
    }
    write_results(Path(args.out or RESULTS / "latest-ryw.json"), result)
    return result


if __name__ == "__main__":
    got = main()
    sys.exit(0 if all(r["ryw_violations"] == 0 and not r["failed"] for r in got["results"]) else 1)
