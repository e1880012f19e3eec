"""Bench-only server entry: the real app, served by uvicorn, with AWS call counting.

Like `headwater.dev.server` but it never starts an emulator (the benchmark owns it: set
AWS_ENDPOINT_URL), builds its clients from a boto3 Session hooked by
`headwater.storage.callcount`, and adds two routes for the load generator:

    GET  /_bench/calls        -> callcount.snapshot() (JSON)
    POST /_bench/calls/reset  -> zero the counters
    GET  /_bench/heap         -> where the RSS is: glibc's heap (mallinfo2: in use, free,
                                 mmapped), pymalloc's arenas (sys._debugmallocstats) and the
                                 rest (thread stacks, libraries); bench_soak samples it

Optional: HEADWATER_BENCH_PROFILE=/path.prof runs cProfile over the event-loop thread and
writes it on shutdown (the storage threads are better seen with py-spy).
HEADWATER_BENCH_TRACEMALLOC=N traces allocations (N frames each) and adds

    GET  /_bench/memory       -> the live Python allocations by source line, largest first
    POST /_bench/memory       -> marks now; GET ?since_mark=1 then gives what grew since

(bench_soak --trace: where the memory a long run keeps went).
"""

from __future__ import annotations

import collections
import cProfile
import logging
import os
import re
import sys
import tempfile
import threading
from typing import Any

import boto3
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from headwater import allocator
from headwater.dev.server import serve
from headwater.http.app import create_app
from headwater.settings import Settings
from headwater.storage import callcount
from headwater.storage.bootstrap import ensure_resources
from headwater.storage.clients import AwsClients

ENV_PROFILE = "HEADWATER_BENCH_PROFILE"
ENV_TRACEMALLOC = "HEADWATER_BENCH_TRACEMALLOC"
# items whose sizes the call counter remembers (storage/callcount.py; 0: its default, 1M)
ENV_ITEM_SIZES = "HEADWATER_BENCH_ITEM_SIZES"


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
    return JSONResponse({"released": allocator.trim()})


def _pymalloc() -> dict[str, int]:
    """pymalloc's arenas now, from sys._debugmallocstats (it writes to fd 2 from C)."""
    fd = sys.stderr.fileno()
    saved = os.dup(fd)
    with tempfile.TemporaryFile() as f:
        try:
            os.dup2(f.fileno(), fd)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, fd)
            os.close(saved)
        f.seek(0)
        text = f.read().decode(errors="replace")
    out: dict[str, int] = {}
    for key, pat in (
        ("arenas", r"# arenas allocated current\s*=\s*([\d,]+)"),
        ("arenas_highwater", r"# arenas highwater mark\s*=\s*([\d,]+)"),
        ("arena_bytes", r"\d[\d,]* arenas \* \d+ bytes/arena\s*=\s*([\d,]+)"),
        ("used_bytes", r"# bytes in allocated blocks\s*=\s*([\d,]+)"),
        ("free_bytes", r"# bytes in available blocks\s*=\s*([\d,]+)"),
        ("empty_pool_bytes", r"\d+ unused pools \* \d+ bytes\s*=\s*([\d,]+)"),
    ):
        if m := re.search(pat, text):
            out[key] = int(m.group(1).replace(",", ""))
    return out


async def heap(request: Request) -> Response:
    got: dict[str, Any] = {}
    if (glibc := allocator.heap()) is not None:
        got["glibc"] = glibc
    if request.query_params.get("types"):  # gc-tracked objects by type, most first
        import gc

        n = int(request.query_params.get("types", "25"))
        counts = collections.Counter(type(o).__qualname__ for o in gc.get_objects())
        got["types"] = counts.most_common(n)
        got["gc_stats"] = gc.get_stats()
        got["gc_count"] = gc.get_count()
    if request.query_params.get("big"):  # the largest containers: what holds the most
        import gc

        n = int(request.query_params.get("big", "15"))
        sized = []
        for o in gc.get_objects():
            if isinstance(o, dict | set | frozenset | list | collections.deque):
                try:
                    sized.append((len(o), o))
                except TypeError:
                    continue
        sized.sort(key=lambda t: -t[0])
        got["big"] = []
        for size, o in sized[:n]:
            sample = next(iter(o), None) if size else None
            refs = [type(r).__qualname__ for r in gc.get_referrers(o)[:4] if r is not sized]
            got["big"].append([type(o).__qualname__, size, repr(sample)[:80], refs])
        del sized
    if request.query_params.get("collect"):  # what a full collection frees now
        import gc

        before = sys.getallocatedblocks()
        got["collected"] = gc.collect()
        got["blocks_freed_by_collect"] = before - sys.getallocatedblocks()
    got["pymalloc"] = _pymalloc()
    got["python_blocks"] = sys.getallocatedblocks()
    got["threads"] = threading.active_count()
    try:
        with open("/proc/self/smaps_rollup", encoding="ascii") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("Rss", "Anonymous", "Private_Dirty"):
                    got.setdefault("smaps_kb", {})[k] = int(v.split()[0])
    except OSError:
        pass
    return JSONResponse(got)


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
    if sizes := int(os.environ.get(ENV_ITEM_SIZES, "0") or 0):
        callcount.limit_sizes(sizes)
    clients = AwsClients.create(settings, session=session)
    ensure_resources(settings, clients)
    callcount.reset()
    app = create_app(settings, clients)
    app.add_api_route("/_bench/calls", calls, methods=["GET"], include_in_schema=False)
    app.add_api_route("/_bench/calls/reset", calls_reset, methods=["POST"], include_in_schema=False)
    app.add_api_route("/_bench/memory", memory, methods=["GET", "POST"], include_in_schema=False)
    app.add_api_route("/_bench/heap", heap, methods=["GET"], include_in_schema=False)
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
