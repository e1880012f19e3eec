"""Engines over the in-memory fakes, as the fast unit tests build them: each `Process` is one
LogEngine (with its quotas, Upkeep and QueueEngine, wired as services.py wires them) over its own
store objects on a shared MemoryAccount, so two processes share storage and nothing else.
Every process reads one injected clock."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from headwater.engine.log import LogEngine
from headwater.engine.queue import QueueEngine
from headwater.engine.quotas import TOPICS, TOTAL_BYTES, Quotas
from headwater.engine.records import NewRecord, StoredRecord
from headwater.engine.tiering import Upkeep
from headwater.engine.values import AppendRequest
from headwater.settings import Settings, Tiering
from tests.fakes import MemoryAccount, MemoryStores

T0 = 1_700_000_000_000

# Upkeep runs only when a test calls it (no in-process sweep, no background runs). A slot
# reserved and not written is filled after 50 ms of (real) waiting, not a second.
SETTINGS = Settings(tiering=Tiering(inline=False, interval_ms=0), hole_timeout_ms=50)


class ManualClock:
    """Engine time in ms: stands still until a test moves it."""

    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> int:
        self.now += ms
        return self.now


@dataclass(frozen=True, slots=True)
class Process:
    engine: LogEngine
    upkeep: Upkeep
    queues: QueueEngine
    stores: MemoryStores

    async def history(self, topic: str) -> list[StoredRecord]:
        """Every stored record of the topic, in seq order (no TTL filtering: what storage
        holds above the floor)."""
        got = await self.engine.read_range(topic, 0, 1 << 30, 1 << 40)
        return got.records

    async def run_upkeep(self, topic: str) -> None:
        await self.engine.run_io(self.upkeep.run, topic)


def process(account: MemoryAccount, clock: ManualClock, settings: Settings = SETTINGS) -> Process:
    stores = MemoryStores.build(account)
    # the deployment-wide caps of settings.caps, over the account's counters
    recount = {TOPICS: stores.heads.count_live, TOTAL_BYTES: stores.heads.total_live_bytes}
    quotas = Quotas(stores.quota, settings.caps, recount)
    engine = LogEngine(
        stores.heads,
        stores.tail,
        stores.blobs,
        settings,
        clock=clock,
        quotas=quotas,
        segments=stores.segments,
    )
    upkeep = Upkeep(engine.core, stores.segments)
    engine.upkeep = upkeep.run
    return Process(engine, upkeep, QueueEngine(engine, stores.leases), stores)


@asynccontextmanager
async def processes(
    n: int,
    clock: ManualClock,
    *,
    account: MemoryAccount | None = None,
    settings: Settings = SETTINGS,
) -> AsyncIterator[list[Process]]:
    """`n` processes over one account (a fresh one unless given), closed afterwards."""
    account = account or MemoryAccount()
    procs = [process(account, clock, settings) for _ in range(n)]
    try:
        yield procs
    finally:
        for p in procs:
            p.engine.close()


def rec(**data: object) -> NewRecord:
    """A record of `data`, accounted as 10 bytes."""
    return NewRecord(data=data, size=10)


def req(*records: NewRecord, key: str | None = None) -> AppendRequest:
    return AppendRequest(records=list(records), idempotency_key=key)


def datas(history: list[StoredRecord]) -> list[object]:
    return [r.data for r in history]
