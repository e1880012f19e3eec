"""Benchmark app_path: the CPU the app's own request path spends, without HTTP sockets.

    python -m bench.bench_app_path [--rounds 300] [--reps 3]

The app runs in this process on the event loop, driven through httpx's ASGI transport
(no uvicorn, no sockets), against the moto server; storage calls run on the engine's I/O
threads. Per operation it measures the event-loop thread's CPU (`time.thread_time`: the
middleware, routing, handlers, the engine's loop-side work and the httpx client, not the
storage calls) and the wall time. Two workloads on /v1:

- round trip: a long-poll GET parks, 20 ms later a 100 B POST appends, until the GET answers;
- append: a 100 B POST alone.

Peer in the same run: the same app with FastAPI's own request handler on every route
instead of `LeanRoute`'s direct call (http/lean_route.py), alternated rep by rep so the
machine's drift hits both. The httpx client's CPU is in both figures, so the difference is
the handler's. Results: bench/results/latest-app-path.json."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.harness import format_table, machine_info, percentile, result_header, write_results
from headwater.http.lean_route import LeanRoute

RESULTS = Path(__file__).resolve().parent / "results"
MODES = ("lean", "fastapi")
OCTET = {"content-type": "application/octet-stream"}
_LEAN_HANDLER = LeanRoute.get_route_handler  # restored after the FastAPI-handler runs


def _fresh_app(mode: str) -> Any:
    """A new app on new tables; `mode` picks the route handler the /v1 routes are built with."""
    import boto3
    from fastapi.routing import APIRoute

    from headwater.http.app import create_app
    from headwater.settings import Settings
    from headwater.storage.bootstrap import ensure_resources
    from headwater.storage.clients import AwsClients

    LeanRoute.get_route_handler = (  # type: ignore[method-assign]
        _LEAN_HANDLER if mode == "lean" else APIRoute.get_route_handler
    )
    # the /v1 routes are built when their module is first imported by an app: import anew
    for name in [m for m in sys.modules if m.startswith("headwater.http.v1")]:
        del sys.modules[name]
    prefix = f"ap-{uuid.uuid4().hex[:8]}"
    settings = dataclasses.replace(Settings.from_env(), resource_prefix=prefix)
    clients = AwsClients.create(settings, session=boto3.Session(region_name=settings.region))
    ensure_resources(settings, clients)
    return create_app(settings, clients)


async def _drive(app: Any, rounds: int, warmup: int) -> dict[str, dict[str, list[float]]]:
    import httpx

    out: dict[str, dict[str, list[float]]] = {
        w: {"cpu_ms": [], "wall_ms": []} for w in ("round trip", "append")
    }
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as c:
            r = await c.put("/v1/stream/path", headers=OCTET)
            assert r.status_code in (200, 201), r.text
            offset = r.headers["stream-next-offset"]
            for i in range(warmup + rounds):
                poll = asyncio.ensure_future(
                    c.get("/v1/stream/path", params={"offset": offset, "live": "long-poll"})
                )
                await asyncio.sleep(0.02)
                c0, t0 = time.thread_time(), time.perf_counter()
                posted = await c.post("/v1/stream/path", content=b"x" * 100, headers=OCTET)
                answer = await poll
                c1, t1 = time.thread_time(), time.perf_counter()
                assert posted.status_code == 204 and answer.status_code == 200, answer.text
                offset = answer.headers["stream-next-offset"]
                posted = await c.post("/v1/stream/path", content=b"y" * 100, headers=OCTET)
                c2, t2 = time.thread_time(), time.perf_counter()
                assert posted.status_code == 204
                offset = posted.headers["stream-next-offset"]
                if i >= warmup:
                    out["round trip"]["cpu_ms"].append((c1 - c0) * 1000)
                    out["round trip"]["wall_ms"].append((t1 - t0) * 1000)
                    out["append"]["cpu_ms"].append((c2 - c1) * 1000)
                    out["append"]["wall_ms"].append((t2 - t1) * 1000)
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="30 operations, 2 reps per mode")
    ap.add_argument("--out", type=Path, default=RESULTS / "latest-app-path.json")
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.warmup, args.reps = 30, 5, 2

    from bench.bench_v0 import Emulators

    emu = Emulators("moto")
    os.environ.update(emu.env())
    samples: dict[str, dict[str, dict[str, list[float]]]] = {}
    try:
        for rep in range(args.reps):
            for mode in MODES if rep % 2 == 0 else tuple(reversed(MODES)):
                got = asyncio.run(_drive(_fresh_app(mode), args.rounds, args.warmup))
                for wl, series in got.items():
                    dst = samples.setdefault(wl, {}).setdefault(mode, {"cpu_ms": [], "wall_ms": []})
                    for k, v in series.items():
                        dst[k] += v
    finally:
        LeanRoute.get_route_handler = _LEAN_HANDLER  # type: ignore[method-assign]
        emu.stop()
    workloads: dict[str, Any] = {}
    rows = []
    for wl, by_mode in samples.items():
        workloads[wl] = {}
        for mode, s in by_mode.items():
            workloads[wl][mode] = {
                "ops": len(s["cpu_ms"]),
                "loop_cpu_ms_per_op": statistics.fmean(s["cpu_ms"]),
                "loop_cpu_p50_ms": percentile(s["cpu_ms"], 50),
                "p50_ms": percentile(s["wall_ms"], 50),
                "p95_ms": percentile(s["wall_ms"], 95),
            }
        lean, fa = workloads[wl]["lean"], workloads[wl]["fastapi"]
        saved = fa["loop_cpu_ms_per_op"] - lean["loop_cpu_ms_per_op"]
        workloads[wl]["saved_loop_cpu_ms_per_op"] = saved
        rows.append(
            [
                wl,
                f"{fa['loop_cpu_ms_per_op']:.3f}",
                f"{lean['loop_cpu_ms_per_op']:.3f}",
                f"{saved:+.3f}",
                f"{fa['p50_ms']:.2f}",
                f"{lean['p50_ms']:.2f}",
            ]
        )
    print(
        format_table(
            [
                "workload",
                "FastAPI handler: loop CPU ms/op",
                "LeanRoute: loop CPU ms/op",
                "saved",
                "FastAPI p50 ms",
                "LeanRoute p50 ms",
            ],
            rows,
        )
    )
    print(
        "Loop CPU: the event-loop thread's CPU per operation (middleware, routing, handler, "
        "the engine's loop-side work and the in-process httpx client; not the storage calls)."
    )
    result = {
        **result_header("app_path", argv, machine_info()),
        "params": {"rounds": args.rounds, "warmup": args.warmup, "reps": args.reps},
        "workloads": workloads,
    }
    write_results(args.out, result)
    return result


if __name__ == "__main__":
    main()
