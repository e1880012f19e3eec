"""headwater.engines.Core builds its queue, router and upkeep engines on first use (their
code is imported then: the cold start of a function that never uses them does not pay for
it, tests/infra/test_handler_imports.py). Each is built once, whichever threads ask first,
and an append that crosses a tiering threshold reaches the upkeep through the same part."""

from __future__ import annotations

import asyncio
import threading
import time

from headwater.engine.records import NewRecord
from headwater.engine.values import AppendRequest
from headwater.engines import Core
from headwater.settings import Settings
from headwater.storage.clients import AwsClients


def _core(settings: Settings, aws: AwsClients) -> Core:
    return Core.build(settings, aws)


def test_each_part_is_built_once_whichever_threads_ask_first(
    settings: Settings, aws: AwsClients
) -> None:
    core = _core(settings, aws)
    seen: dict[str, list[object]] = {"queues": [], "routers": [], "upkeep": []}
    start = threading.Barrier(12)

    def ask(part: str) -> None:
        start.wait(timeout=10)
        seen[part].append(getattr(core, part))

    threads = [
        threading.Thread(target=ask, args=(part,), daemon=True) for part in seen for _ in range(4)
    ]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 20
    for t in threads:
        t.join(timeout=max(0.0, deadline - time.monotonic()))
    # every thread finished (the router engine's build takes the router store's turn
    # under the same lock), and each part is one object
    assert not any(t.is_alive() for t in threads)
    for part, got in seen.items():
        assert len(got) == 4 and all(g is got[0] for g in got), part
    assert core.routers.store is core.router_store
    assert core.upkeep.segments is core.segments
    assert core.queues.log is core.engine and core.routers.log is core.engine


def test_the_parts_work_over_the_cores_storage(settings: Settings, aws: AwsClients) -> None:
    core = _core(settings, aws)
    core.engine.put_topic_sync("jobs", {"type": "queue"})

    async def work() -> list[int]:
        await core.engine.append("jobs", AppendRequest([NewRecord({"n": 1}, size=16)]))
        # the queue engine, built on first use, hands out the job the log engine appended
        claimed = await core.queues.claim("jobs", "worker-1", 5, 30_000)
        return [job.seq for job in claimed.jobs]

    assert asyncio.run(work()) == [1]
    assert core.routers.store.list_all() == []
    report = core.upkeep.run("jobs")
    assert report.topic == "jobs"


def test_an_append_past_a_threshold_runs_the_upkeep_through_the_part(
    settings: Settings, aws: AwsClients
) -> None:
    core = _core(settings, aws)
    ran: list[str] = []
    core.upkeep.run = lambda topic, head=None: ran.append(topic)  # type: ignore[method-assign,assignment,return-value]
    # the engine's hook reaches whatever upkeep the core holds when an append calls it
    assert core.engine.upkeep is not None
    core.engine.upkeep("busy")
    assert ran == ["busy"]
