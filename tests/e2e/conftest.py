"""E2E fixtures: a moto server subprocess and real uvicorn server processes on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from headwater.dev.emulator import (
    MotoServer,
    die_with_parent,
    free_port,
    stop_process,
)
from headwater.settings import Settings
from headwater.storage.bootstrap import ensure_resources
from headwater.storage.clients import AwsClients


@pytest.fixture(scope="session")
def emulator() -> Iterator[MotoServer]:
    with MotoServer() as server:
        yield server


@dataclass
class ServerProcess:
    url: str
    proc: subprocess.Popen[bytes]
    log_path: str

    def stop(self) -> int | None:
        return stop_process(self.proc, grace_s=15)


@dataclass
class Cluster:
    emulator: MotoServer
    prefix: str
    servers: list[ServerProcess] = field(default_factory=list)

    def env(self, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            **self.emulator.env(),
            "HEADWATER_RESOURCE_PREFIX": self.prefix,
            **extra,
        }

    def start_server(self, tmp_dir: str, **extra_env: str) -> ServerProcess:
        port = free_port()
        log_path = os.path.join(tmp_dir, f"server-{port}.log")
        log = open(log_path, "wb")  # noqa: SIM115 - owned by the child for its lifetime
        proc = subprocess.Popen(
            [sys.executable, "-m", "headwater.dev.server"],
            env=self.env(TOPICS_HOST="127.0.0.1", TOPICS_PORT=str(port), **extra_env),
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
        )
        log.close()
        server = ServerProcess(f"http://127.0.0.1:{port}", proc, log_path)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited early: {Path(log_path).read_text()}")
            try:
                if httpx.get(f"{server.url}/v0/health", timeout=1).status_code == 200:
                    self.servers.append(server)
                    return server
            except httpx.HTTPError:
                time.sleep(0.1)
        server.stop()
        raise RuntimeError(f"server did not become healthy: {Path(log_path).read_text()}")


@pytest.fixture
def cluster(emulator: MotoServer, tmp_path: object) -> Iterator[Cluster]:
    prefix = f"e2e-{uuid.uuid4().hex[:8]}"
    settings = Settings(resource_prefix=prefix)
    clients = AwsClients.create(settings, session=_session(emulator))
    ensure_resources(settings, clients)
    c = Cluster(emulator, prefix)
    yield c
    for s in c.servers:
        s.stop()


def _session(emulator: MotoServer) -> object:
    """A boto3 session for the test's own clients, which reach the emulator through the
    AWS_ENDPOINT_URL* variables (set here; `_endpoints_end_with_the_module` puts them back)."""
    import boto3

    os.environ.update(emulator.env())
    return boto3.Session(region_name="us-east-1")


@pytest.fixture(scope="module", autouse=True)
def _endpoints_end_with_the_module() -> Iterator[None]:
    """The emulator endpoints an e2e module sets must not outlive it: under pytest-xdist the
    next module on this worker may use in-process moto, which they would send elsewhere."""
    from headwater.dev.emulator import endpoints_restored

    with endpoints_restored():
        yield


@pytest.fixture(scope="session")
def _bench_moto() -> Iterator[MotoServer]:
    with MotoServer() as server:
        yield server


class _SharedMoto:
    """What a benchmark gets for `bench.bench_v0.Emulators("moto")` under `bench_emulator`:
    the session's moto process (same env() and pids()); stop() leaves it running."""

    backend = "moto"
    ddblocal = None

    def __init__(self, moto: MotoServer) -> None:
        self.moto = moto

    def env(self) -> dict[str, str]:
        return self.moto.env()

    def pids(self) -> dict[str, int]:
        assert self.moto._proc is not None
        return {"moto": self.moto._proc.pid}

    def stop(self) -> None:
        pass


@pytest.fixture
def bench_emulator(_bench_moto: MotoServer, monkeypatch: pytest.MonkeyPatch) -> MotoServer:
    """The benchmark smoke runs share one moto process instead of starting one each (about
    1 s apiece); it is reset (every table and bucket gone) before each, so every benchmark
    still starts on an empty emulator. Other backends (ddblocal) are started as before."""
    import bench.bench_v0 as bench_v0

    if _bench_moto._proc is None or _bench_moto._proc.poll() is not None:
        _bench_moto.start()  # a benchmark before this one took it down
    _bench_moto.reset()
    real = bench_v0.Emulators

    def emulators(backend: str) -> Any:
        return _SharedMoto(_bench_moto) if backend == "moto" else real(backend)

    for name, module in list(sys.modules.items()):
        if name.partition(".")[0] == "bench" and getattr(module, "Emulators", None) is real:
            monkeypatch.setattr(module, "Emulators", emulators)
    return _bench_moto


@pytest.fixture
def start_servers(cluster: Cluster, tmp_path: object) -> Callable[..., list[ServerProcess]]:
    def start(n: int, **env: str) -> list[ServerProcess]:
        return [cluster.start_server(str(tmp_path), **env) for _ in range(n)]

    return start


def sse_events(response: httpx.Response) -> Iterator[tuple[str, dict[str, Any]]]:
    """(event, data JSON) of each data-bearing SSE frame of a streamed httpx response."""
    event = ""
    for line in response.iter_lines():
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            yield event, json.loads(line[6:])
