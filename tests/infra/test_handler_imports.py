"""What a function loads at import is what its cold start costs (bench/bench_coldstart.py
measures it): the stream-triggered and scheduled functions must not load a web framework,
a surface's geometry or numpy. Each handler is imported in a fresh interpreter."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from headwater.engine.records import NewRecord
from headwater.engine.values import AppendRequest
from headwater.engines import Core
from headwater.settings import Settings
from headwater.storage.bootstrap import ensure_resources
from headwater.storage.clients import AwsClients

REPO = Path(__file__).resolve().parents[2]
# aws_xray_sdk: the tracer loads only with EnableTracing (headwater.obs.traced)
HEAVY = (
    "fastapi",
    "starlette",
    "pydantic",
    "shapely",
    "numpy",
    "headwater.services",
    "aws_xray_sdk",
    # the surfaces, each imported on its first use (services.Services)
    "headwater.durable.service",
    "headwater.flags.service",
    "headwater.notify.service",
    "headwater.dashboard.service",
)
SURFACES = {m for m in HEAVY if m.endswith(".service")}
# each surface's routes, imported on its first request (http/lazy_routes.py)
ROUTES = tuple(
    f"headwater.http.{m}"
    for m in (
        "v0",
        "v1",
        "v1_reads",
        "v1_writes",
        "queue",
        "watch",
        "routers",
        "notifications",
        "flags",
        "dashboard",
    )
)

# the engines headwater.engines.Core builds on first use, and the ports only they need
QUEUE = (
    "headwater.engine.queue",
    "headwater.engine.queue_claims",
    "headwater.engine.queue_core",
    "headwater.engine.queue_leases",
    "headwater.engine.ports.queue",
    "headwater.storage.leases",
)
ROUTER = ("headwater.engine.routers", "headwater.engine.ports.routers", "headwater.storage.routers")
ROUTER_STREAM = ("headwater.engine.router_stream",)  # the forwarder Lambda's driver
UPKEEP = ("headwater.engine.tiering",)
WS = ("headwater.engine.ports.ws", "headwater.storage.ws_connections")
ENGINES = QUEUE + ROUTER + ROUTER_STREAM + UPKEEP + WS
# the log engine's parts over its core (engines.Core.engine): every function but the sealer
LOG_PARTS = (
    "headwater.engine.log",
    "headwater.engine.append",
    "headwater.engine.values",
    "headwater.engine.reads",
    "headwater.engine.ranges",
    "headwater.engine.deletes",
    "headwater.engine.topics",
)
# what WsFunction's $default needs and its $connect / $disconnect do not
WS_DEFAULT = (
    "headwater.ws.gate",
    "headwater.engine.log",
    "headwater.engine.watch",
    "headwater.ws.commands",
    "headwater.ws.gateway",
    "asyncio",
)

PROBE = """
import json, sys
import handler
print(json.dumps(sorted(m for m in set({heavy}) if m in sys.modules)))
"""


WATCHED = WS_DEFAULT + LOG_PARTS


def _loaded(function: str) -> list[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(REPO / "functions" / function), str(REPO / "layers" / "headwater")]
        ),
        "AWS_LAMBDA_FUNCTION_NAME": f"hw-{function}",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            PROBE.format(heavy=repr(HEAVY + ROUTES + ENGINES + WS_DEFAULT + LOG_PARTS)),
        ],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    loaded: list[str] = json.loads(out.stdout.strip().splitlines()[-1])
    return loaded


@pytest.mark.parametrize(
    ("function", "engines"),
    [
        # Core builds its upkeep on the first sweep, over the log engine's core: the
        # engine's parts (append, reads, deletes) are never loaded
        ("sealer", ()),
        # the log engine, the router engine and its stream driver, WebSocket delivery (the router
        # store waits for the first batch), never the queue
        ("forwarder", ROUTER[:2] + ROUTER_STREAM + WS + LOG_PARTS),
    ],
)
def test_a_background_function_loads_no_web_framework_geometry_or_surface(
    function: str, engines: tuple[str, ...]
) -> None:
    # (WS_DEFAULT is for WsFunction's INIT: the engine's core they do load)
    loaded = [m for m in _loaded(function) if m not in WS_DEFAULT or m in LOG_PARTS]
    assert loaded == sorted(engines)


def test_the_api_function_loads_its_web_framework_but_no_geometry() -> None:
    # It serves every surface, each imported on its first request; shapely and numpy wait
    # for the first spatial notification filter.
    loaded = set(_loaded("api"))
    assert {"fastapi", "headwater.services"} <= loaded  # what the probe must see
    assert not loaded & {"shapely", "numpy", "aws_xray_sdk"}
    # no surface's routes or code: each is imported on its first request
    assert not loaded & set(ROUTES)
    assert not loaded & SURFACES


def test_the_websocket_function_loads_no_web_framework_or_geometry() -> None:
    """WsFunction runs the /v0/ws commands on API Gateway events: the request helpers it
    shares with POST /v0/topics/:t and POST /v0/watch live in v0/requests.py, so FastAPI
    and the /v0 routes stay out of its cold start (they took ~300 ms of its ~460), and the
    surfaces it never serves are not imported (~95 ms more). Its INIT loads what $connect and
    $disconnect need (keys, the connection store, the cap: ws/gate.py); the engine, the
    services and the command code wait for the first $default message."""
    loaded = set(_loaded("ws"))
    assert "headwater.ws.gate" in loaded  # the probe sees what the handler imports
    assert not loaded & {"fastapi", "pydantic", "shapely", "numpy", "aws_xray_sdk"}
    assert not loaded & SURFACES
    assert not loaded & set(ENGINES) - set(WS)
    assert not loaded & {
        "headwater.services",
        "headwater.engine.log",
        "headwater.engine.watch",
        "headwater.ws.commands",
        "headwater.ws.gateway",
        "asyncio",
    }


SWEEP = """
import json, sys
import handler

class Context:
    function_name = "hw-sealer"
    memory_limit_in_mb = 256
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:hw-sealer"
    aws_request_id = "sweep-probe"

    def get_remaining_time_in_millis(self):
        return 300_000

with open("tests/events/40_sealer_schedule.json") as f:
    out = handler.handler(json.load(f), Context())
watched = ("asyncio", "headwater.engine.log", "headwater.engine.append")
loaded = sorted(m for m in watched if m in sys.modules)
print(json.dumps({"out": out, "loaded": loaded}))
"""


def test_the_sealer_sweeps_without_an_event_loop(
    moto_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SealerFunction runs the engine's synchronous upkeep over the engine's core: neither
    its INIT nor a sweep that seals loads asyncio (~3-5 ms of its cold start; the engine
    imports it where it runs a loop) or the log engine's parts. The sweep runs in a fresh
    interpreter against a moto server (moto itself loads asyncio), over a topic appended
    to from here."""
    env = {
        "AWS_ENDPOINT_URL": moto_server,
        "HEADWATER_RESOURCE_PREFIX": "hw-sweep",
        "HEADWATER_BUCKET": "hw-sweep-data",
        "HEADWATER_TIERING_INTERVAL_MS": "0",
        "HEADWATER_TIERING_INLINE": "0",
        "HEADWATER_SEAL_RECORDS": "10",
        "HEADWATER_SEAL_GRACE_MS": "0",
        "POWERTOOLS_SERVICE_NAME": "headwater-test",
        "POWERTOOLS_METRICS_NAMESPACE": "HeadwaterTest",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = Settings.from_env()
    ensure_resources(settings, AwsClients.create(settings))
    core = Core.build(settings)
    records = [NewRecord({"i": i}, size=24) for i in range(25)]
    asyncio.run(core.engine.append("big", AppendRequest(records)))
    core.engine.close()

    out = subprocess.run(
        [sys.executable, "-c", SWEEP],
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                [str(REPO / "functions" / "sealer"), str(REPO / "layers" / "headwater")]
            ),
            "AWS_LAMBDA_FUNCTION_NAME": "hw-sealer",
        },
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["out"]["topics"] == 1 and seen["out"]["segments_sealed"] >= 1
    assert seen["loaded"] == []
