"""Bench-only server entry: the real app, served by uvicorn, with AWS call counting.

Like `headwater.dev.server` but it never starts an emulator (the benchmark owns it: set
AWS_ENDPOINT_URL), builds its clients from a boto3 Session hooked by
`headwater.storage.callcount`, and adds two routes for the load generator:

    GET  /_bench/calls        -> callcount.snapshot() (JSON)
    POST /_bench/calls/reset  -> zero the counters

Optional: HEADWATER_BENCH_PROFILE=/path.prof runs cProfile over the event-loop thread and
writes it on shutdown (the storage threads are better seen with py-spy).
HEADWATER_BENCH_TRACEMALLOC=N traces allocations (N frames each) and adds

    GET  /_bench/memory       -> the live Python allocations by source line, largest first
    POST /_bench/memory       -> marks now; GET ?since_mark=1 then gives what grew since

(bench_soak --trace: where the memory a long run keeps went).
"""

from __future__ import annotations

import cProfile
import logging
import os
import sys
from typing import Any

import boto3
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from headwater.dev.server import serve
from headwater.http.app import create_app
from headwater.settings import Settings
from headwater.storage import callcount
from headwater.storage.bootstrap import ensure_resources
from headwater.storage.clients import AwsClients

ENV_PROFILE = "HEADWATER_BENCH_PROFILE"
ENV_TRACEMALLOC = "HEADWATER_BENCH_TRACEMALLOC"


async def calls(request: Request) -> Response:
    return JSONResponse(callcount.snapshot())


async def calls_reset(request: Request) -> Response:
    callcount.reset()
    return JSONResponse({"reset": True})


async def memory(request: Request) -> Response:
    import tracemalloc

    if not tracemalloc.is_tracing():
        return JSONResponse({"error": f"set {ENV_TRACEMALLOC}"}, status_code=409)
    snap = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(False, tracemalloc.__file__)]
    )
    if request.method == "POST":  # a mark: later GETs with ?since_mark=1 compare to it
        _MARK[:] = [snap]
        return JSONResponse({"marked": True})
    n = int(request.query_params.get("top", "40"))
    if request.query_params.get("since_mark") and _MARK:
        diff = snap.compare_to(_MARK[0], "traceback")
        rows = [(st.size_diff, st.count_diff, st.traceback) for st in diff[:n]]
        total = sum(st.size_diff for st in diff)
    else:
        stats = snap.statistics("traceback")
        rows = [(st.size, st.count, st.traceback) for st in stats[:n]]
        total = sum(st.size for st in stats)
    top = [
        {
            "kb": round(size / 1024, 1),
            "count": count,
            "where": [f"{f.filename.rsplit('/site-packages/', 1)[-1]}:{f.lineno}" for f in tb],
        }
        for size, count, tb in rows
    ]
    return JSONResponse({"traced_kb": round(total / 1024, 1), "top": top})


_MARK: list[Any] = []


async def trim(request: Request) -> Response:
    """glibc's malloc_trim(0): give back to the OS what the allocator keeps free, so the RSS
    that is left is what the process holds (bench_soak: held vs retained after a peak)."""
    import ctypes

    try:
        released = ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError as exc:
        return JSONResponse({"error": repr(exc)}, status_code=409)
    return JSONResponse({"released": bool(released)})


def main() -> int:
    logging.basicConfig(level=logging.WARNING)
    if frames := int(os.environ.get(ENV_TRACEMALLOC, "0") or 0):
        import tracemalloc

        tracemalloc.start(frames)
    if not os.environ.get("AWS_ENDPOINT_URL"):
        print(
            "bench.server: set AWS_ENDPOINT_URL (the benchmark owns the emulator)", file=sys.stderr
        )
        return 2
    settings = Settings.from_env()
    session = boto3.Session(region_name=settings.region)
    callcount.install(session)
    clients = AwsClients.create(settings, session=session)
    ensure_resources(settings, clients)
    callcount.reset()
    app = create_app(settings, clients)
    app.add_api_route("/_bench/calls", calls, methods=["GET"], include_in_schema=False)
    app.add_api_route("/_bench/calls/reset", calls_reset, methods=["POST"], include_in_schema=False)
    app.add_api_route("/_bench/memory", memory, methods=["GET", "POST"], include_in_schema=False)
    app.add_api_route("/_bench/trim", trim, methods=["POST"], include_in_schema=False)
    profile_path = os.environ.get(ENV_PROFILE)
    prof = cProfile.Profile() if profile_path else None
    if prof is not None:
        prof.enable()
    try:
        serve(app, settings)
    finally:
        if prof is not None and profile_path:
            prof.disable()
            prof.dump_stats(profile_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
