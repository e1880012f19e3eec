"""create_app(): the one ASGI app. Mangum wraps it on the REST Lambda, uvicorn serves it
behind the Lambda Web Adapter on the streaming Lambda, and locally."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware

from headwater import __version__, allocator
from headwater.access.keys import KeyStore
from headwater.console import ConsoleRoute
from headwater.engine import SweepPlan, run_timer
from headwater.http import api_docs, errors, probes
from headwater.http.aviso import RequestIdMiddleware
from headwater.http.compression import GZipUnlessCompressed
from headwater.http.lazy_routes import on_first_use
from headwater.http.limits import InflightLimit
from headwater.http.paths import EncodedSlashGuard
from headwater.http.responses import BrowserSafety, NoCorsForEvents, TimingMiddleware
from headwater.index.local import LocalIndexer
from headwater.notify.schema import NotificationSchema, load_notification_schema
from headwater.services import LazyServices
from headwater.settings import ENV_API_KEYS, ENV_API_KEYS_PARAMETER, Settings
from headwater.storage.clients import AwsClients

log = logging.getLogger(__name__)


def create_app(
    settings: Settings | None = None,
    clients: AwsClients | None = None,
) -> FastAPI:
    settings = settings or Settings.from_env()
    parameter_name = os.environ.get(ENV_API_KEYS_PARAMETER) or None
    # Plain keys are parsed now, so a malformed entry refuses to start (fail-closed).
    keys = KeyStore.parse(settings.api_keys_raw) if settings.api_keys_raw else None
    if keys is None and parameter_name is None:
        keys = KeyStore([])
        # Loud at boot (spec §0.2): a server with no keys is single-tenant dev mode.
        log.warning("auth is DISABLED: no %s configured (dev mode)", ENV_API_KEYS)
    settings.check_bind(has_keys=bool(parameter_name) or (keys is not None and keys.enabled))
    # A schema file is read now, so a bad one refuses to start; an s3:// one is read with the
    # app's clients when the services are built (at startup under uvicorn; the buffered
    # Lambda builds them on its first request, and creates no client at import).
    schema: NotificationSchema | None = None
    if not settings.notify.schema.startswith("s3://"):
        schema = load_notification_schema(settings.notify.schema, None)
    # Flag tokens given inline or as a file are parsed now too: a bad file refuses to start.
    flag_tokens = None
    if settings.flags.tokens_raw:
        from headwater.flags.tokens import load_tokens

        flag_tokens = load_tokens(settings.flags.tokens_raw)
    lazy = LazyServices(settings, clients, keys, parameter_name, schema, flag_tokens)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # A serving process (uvicorn: local, or the streaming Lambda behind the Web Adapter)
        # forwards for routers from boot. Mangum runs with lifespan off, so the buffered
        # Lambda never starts this background work.
        # before the services start their pools' threads: arenas made later obey the cap
        allocator.limit_arenas(settings.malloc_arena_max)
        allocator.fix_mmap_threshold(settings.malloc_mmap_threshold)
        svc = lazy.get()
        svc.routers.ensure_running()
        trimmer = None
        if settings.malloc_trim_ms > 0:
            trimmer = asyncio.get_running_loop().create_task(
                allocator.trim_timer(settings.malloc_trim_ms / 1000)
            )
        interval_ms = settings.tiering.interval_ms
        sealer = indexer = None
        if interval_ms > 0:
            loop = asyncio.get_running_loop()
            # Each timer sweeps every topic only every full_sweep_ms (5 min); between, the topics
            # this process changed and those come due (engine/sweeps.py): idle topics cost
            # one read per full sweep, not one per interval.
            changes = svc.engine.changes
            svc.upkeep.on_change = changes.note
            full_s = settings.tiering.full_sweep_ms / 1000
            sealer = loop.create_task(
                run_timer(
                    interval_ms / 1000,
                    svc.upkeep.tick,
                    SweepPlan(changes.subscribe(), full_s),
                    "upkeep sweep",
                )
            )
            # the same per-segment index build as the Glue job (headwater/index/local.py)
            local = LocalIndexer(
                svc.engine,
                svc.upkeep.segments,
                svc.index_catalogue,
            )
            indexer = loop.create_task(
                run_timer(
                    interval_ms / 1000,
                    local.tick,
                    SweepPlan(changes.subscribe(), full_s),
                    "index sweep",
                )
            )
        yield
        for task in (sealer, indexer, trimmer):
            if task is not None:
                task.cancel()
        built = lazy.built
        if built is not None:
            built.begin_shutdown()
            await built.routers.stop()
            built.engine.close()

    app = FastAPI(
        title="Headwater",
        version=__version__,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,  # no undocumented, unauthenticated route listing the whole API
    )
    app.state.services = lazy
    errors.install(app)
    # Each surface's routes are imported on its first request (http/lazy_routes.py). /v1
    # first, before the probes: routes are matched in order, and the Durable Streams routes
    # carry the most requests per second (no probe path starts with /v1/). The probes stay
    # before /v0, whose entry would take /v0/health.
    http = "headwater.http."
    on_first_use(app, ("/v1/",), http + "v1")
    app.include_router(probes.router)
    v0 = ("v0", "rollups", "queue", "watch", "routers", "ws")
    on_first_use(app, ("/v0/",), *(http + m for m in v0))
    on_first_use(app, ("/api/v1/",), http + "notifications", http + "flags")
    on_first_use(app, ("/api/v2/",), http + "dashboard")
    api_docs.install(app)  # GET /openapi.json and /docs (Swagger UI, no CDN)
    app.routes.append(ConsoleRoute())  # /console: the web console (docs/console.md)
    app.add_middleware(InflightLimit)
    app.add_middleware(EncodedSlashGuard)
    app.add_middleware(GZipUnlessCompressed, minimum_size=1024)  # never gzips a tar.gz again
    app.add_middleware(
        CORSMiddleware,
        # the one source of CORS, locally and behind both function URLs (settings.cors_origins)
        allow_origins=list(settings.cors_origins),
        allow_methods=["*"],
        allow_headers=["*"],
        expose_headers=["*"],
    )
    app.add_middleware(NoCorsForEvents)  # outside CORS: /api/v1/events emits none
    app.add_middleware(BrowserSafety)
    app.add_middleware(TimingMiddleware)
    app.add_middleware(RequestIdMiddleware)  # outermost: every /api/v1 response carries it
    return app


def begin_shutdown(app: FastAPI) -> int:
    """Start a graceful shutdown now, before the server waits for open responses to end:
    refuse new work and close every open /api/v1 stream with `server_shutdown`. The lifespan
    calls it too, but uvicorn runs the lifespan's shutdown only after every connection has
    closed (or its graceful timeout cancelled them), so a server that wants streams to say
    goodbye calls this when it starts stopping (headwater.dev.server does). Idempotent; call
    it on the serving event loop. Returns how many streams (SSE, WebSocket) were open."""
    lazy: LazyServices = app.state.services
    built = lazy.built
    if built is None:
        return 0
    built.begin_shutdown()
    return built.limits.streams
