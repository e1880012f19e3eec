"""The per-router forwarding lease across OS processes: several processes each run a
RouterEngine forwarder loop against one moto server. Only the lease owner forwards a router,
so an at_least_once router copies every record exactly once and in order even under
contention; when the owner is killed (SIGKILL, no release), another process takes over from
the durable cursor once the lease lapses: nothing is lost, an exactly_once router stays
exact, and an at_least_once router may repeat at most the one batch at the takeover.

Run as a module (`python -m tests.e2e.test_router_lease <index> <lease_ms> <ready_dir>`)
this file is the worker process."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from headwater.dev.emulator import die_with_parent, stop_process
from headwater.engine.log import LogEngine
from headwater.engine.ports.routers import RouterItem
from headwater.engine.records import NewRecord
from headwater.engine.routers import BATCH, RouterEngine
from headwater.engine.values import AppendRequest, DiffRequest
from headwater.settings import Settings
from headwater.storage.blobs import S3BlobStore
from headwater.storage.clients import AwsClients
from headwater.storage.heads import DynamoHeadStore
from headwater.storage.log_tail import DynamoLogTailStore
from headwater.storage.routers import DynamoRouterStore

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

REPO = Path(__file__).resolve().parents[2]
WORKERS = 3
LEASE_MS = 3_000  # shorter than the module default (5 s): a takeover costs ~3 s of the test
RECORDS = 1_200
PER_APPEND = 20


def _build(settings: Settings, **kwargs: Any) -> RouterEngine:
    clients = AwsClients.create(settings)
    blobs = S3BlobStore(clients.s3, settings.bucket_name)
    engine = LogEngine(
        DynamoHeadStore(clients.dynamodb, settings),
        DynamoLogTailStore(clients.dynamodb, settings, blobs),
        blobs,
        settings,
    )
    return RouterEngine(engine, DynamoRouterStore(clients.dynamodb, settings), **kwargs)


# --- the worker process ----------------------------------------------------------------------
def _worker(index: str, lease_ms: str, ready_dir: str) -> None:
    routers = _build(
        Settings.from_env(),
        poll_s=0.05,
        lease_ms=int(lease_ms),
        owner=f"worker-{index}:{os.getpid()}",
    )

    async def main() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        routers.ensure_running()
        Path(ready_dir, f"worker-{index}").write_text(routers.owner)
        await stop.wait()
        await routers.stop()  # gives the leases back
        routers.log.close()

    asyncio.run(main())


# --- the test side ---------------------------------------------------------------------------
@dataclass
class Worker:
    index: int
    proc: subprocess.Popen[bytes]
    owner: str


@pytest.fixture
def workers(cluster: Any, tmp_path: Path) -> Iterator[list[Worker]]:
    started: list[tuple[int, subprocess.Popen[bytes]]] = []
    ready = tmp_path / "ready"
    ready.mkdir()
    for i in range(WORKERS):
        log = open(tmp_path / f"worker-{i}.log", "wb")  # noqa: SIM115 - the child's
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.e2e.test_router_lease", str(i), str(LEASE_MS), ready],
            cwd=REPO,
            env=cluster.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
        )
        log.close()
        started.append((i, proc))
    try:
        out: list[Worker] = []
        deadline = time.monotonic() + 30
        for i, proc in started:
            marker = ready / f"worker-{i}"
            while not marker.exists():
                assert proc.poll() is None, (tmp_path / f"worker-{i}.log").read_text()
                assert time.monotonic() < deadline, "worker not ready after 30 s"
                time.sleep(0.05)
            out.append(Worker(i, proc, marker.read_text()))
        yield out
    finally:
        for _, proc in started:
            stop_process(proc, grace_s=10)


def _values(records: list[bytes]) -> list[int]:
    return [int(json.loads(r)["data"]["i"]) for r in records]


async def _read_all(r: RouterEngine, topic: str) -> list[int]:
    out: list[int] = []
    start = 0
    while True:
        res = await r.log.diff(topic, DiffRequest(from_seq=start, limit=1000))
        out.extend(_values(res.records))
        if res.caught_up or not res.records:
            return out
        start = res.next_from_seq


async def _append_all(r: RouterEngine, topic: str, lo: int, hi: int) -> None:
    for first in range(lo, hi, PER_APPEND):
        recs = [NewRecord({"i": i}, size=16) for i in range(first, min(first + PER_APPEND, hi))]
        await r.log.append(topic, AppendRequest(recs))
        await asyncio.sleep(0.005)


async def _settled(r: RouterEngine, names: list[str], head: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        cursors = {n: (await r.get(n)).cursor for n in names}
        if all(c == head for c in cursors.values()):
            return
        assert time.monotonic() < deadline, f"routers stuck at {cursors}, source head {head}"
        await asyncio.sleep(0.1)


def test_contending_processes_forward_each_record_once_in_order(
    cluster: Any, workers: list[Worker]
) -> None:
    async def scenario() -> None:
        r = _build(Settings(resource_prefix=cluster.prefix))
        # GIVEN an at_least_once router and three processes all running the forwarder
        await r.log.put_topic("src", {})
        await r.put(RouterItem("src->dst", "src", "dst"))
        # WHEN many frames are appended while they all contend for the router
        await _append_all(r, "src", 0, RECORDS)
        await _settled(r, ["src->dst"], RECORDS, 60)
        await asyncio.sleep(0.5)  # a loser that copied anyway would show up by now
        # THEN the dest holds every record exactly once, in source order
        assert await _read_all(r, "dst") == list(range(RECORDS))
        item = await r.get("src->dst")
        assert item.forwarded_total == RECORDS
        assert item.lease_owner in {w.owner for w in workers} | {None}
        r.log.close()

    asyncio.run(scenario())


def test_killed_owner_is_taken_over_from_the_durable_cursor(
    cluster: Any, workers: list[Worker]
) -> None:
    async def scenario() -> None:
        r = _build(Settings(resource_prefix=cluster.prefix))
        # GIVEN an exactly_once and an at_least_once router on one source, forwarded by
        # whichever of the processes holds each one's lease
        await r.log.put_topic("src", {})
        await r.put(RouterItem("src->eo", "src", "eo", guarantee="exactly_once"))
        await r.put(RouterItem("src->alo", "src", "alo"))
        half = RECORDS // 2
        appending = asyncio.ensure_future(_append_all(r, "src", 0, half))
        # WHEN the exactly_once router's owner is killed mid-stream (no lease release)
        deadline = time.monotonic() + 30
        while True:
            item = await r.get("src->eo")
            if item.lease_owner is not None and item.cursor >= RECORDS // 6:
                break
            assert time.monotonic() < deadline, f"no owner forwarding: {item}"
            await asyncio.sleep(0.01)
        victim = next(w for w in workers if w.owner == item.lease_owner)
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait(10)
        killed_at = item.cursor
        await appending
        await _append_all(r, "src", half, RECORDS)
        # THEN another process takes over once the lease lapses, and catches up
        await _settled(r, ["src->eo", "src->alo"], RECORDS, 60)
        assert killed_at < RECORDS, "the kill came after the work was done"
        assert victim.proc.returncode == -signal.SIGKILL
        # exactly_once: every record once, in order, across the takeover
        assert await _read_all(r, "eo") == list(range(RECORDS))
        # at_least_once: nothing lost, in order; a repeat only as one replayed batch (if the
        # victim also owned it and died between the dest append and the cursor write)
        alo = await _read_all(r, "alo")
        assert sorted(set(alo)) == list(range(RECORDS))
        rewinds = [k for k in range(1, len(alo)) if alo[k] <= alo[k - 1]]
        assert len(rewinds) <= 1, rewinds
        assert len(alo) - RECORDS <= BATCH
        if len(alo) == RECORDS:
            assert alo == list(range(RECORDS))
        r.log.close()

    asyncio.run(scenario())


if __name__ == "__main__":
    _worker(*sys.argv[1:4])
