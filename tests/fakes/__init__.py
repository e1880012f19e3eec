"""In-memory fakes of every storage port (engine/ports/, flags/ports.py), for
tests only: they run through the same adapter contract tests as the DynamoDB/S3 adapters
(tests/adapters, backend "memory") and carry the engine's fast unit tests (tests/unit).

    stores = MemoryStores.build()            # one account: every table, one lock
    engine = LogEngine(stores.heads, stores.tail, stores.blobs, settings, clock=clock,
                       segments=stores.segments)
    other = MemoryStores.build(stores.account)   # a second process over the same storage
    stores.tail.fail_next("commit_append", Fault.LOSE_AFTER_APPLY)

Not modelled: DynamoDB's own TTL deletions (expiry is judged by the `now` each call is
given), eventual consistency (every read is strong), throttling and transaction conflicts
between requests (requests never interleave)."""

from __future__ import annotations

from dataclasses import dataclass

from tests.fakes.dashboard import MemoryConfigStore
from tests.fakes.flag_slots import MemoryFlagSlots
from tests.fakes.heads import MemoryHeadStore
from tests.fakes.items import MemoryIndexCatalogue, MemoryQuotaStore, MemorySessionStore
from tests.fakes.leases import MemoryLeaseStore
from tests.fakes.routers import MemoryRouterStore
from tests.fakes.storage import Fault, MemoryAccount
from tests.fakes.tail import MemoryLogTailStore
from tests.fakes.tiering import MemoryBlobStore, MemorySegmentStore
from tests.fakes.ws import MemoryWsStore

__all__ = [
    "Fault",
    "MemoryAccount",
    "MemoryBlobStore",
    "MemoryConfigStore",
    "MemoryFlagSlots",
    "MemoryHeadStore",
    "MemoryIndexCatalogue",
    "MemoryLeaseStore",
    "MemoryLogTailStore",
    "MemoryQuotaStore",
    "MemoryRouterStore",
    "MemorySegmentStore",
    "MemorySessionStore",
    "MemoryStores",
    "MemoryWsStore",
]


@dataclass(frozen=True, slots=True)
class MemoryStores:
    """Every in-memory store over one account."""

    account: MemoryAccount
    heads: MemoryHeadStore
    tail: MemoryLogTailStore
    blobs: MemoryBlobStore
    segments: MemorySegmentStore
    leases: MemoryLeaseStore
    sessions: MemorySessionStore
    catalogue: MemoryIndexCatalogue
    quota: MemoryQuotaStore
    routers: MemoryRouterStore
    dashboards: MemoryConfigStore
    ws: MemoryWsStore
    flag_slots: MemoryFlagSlots

    @classmethod
    def build(cls, account: MemoryAccount | None = None) -> MemoryStores:
        account = account or MemoryAccount()
        blobs = MemoryBlobStore(account)
        return cls(
            account=account,
            heads=MemoryHeadStore(account),
            tail=MemoryLogTailStore(account, blobs),
            blobs=blobs,
            segments=MemorySegmentStore(account),
            leases=MemoryLeaseStore(account),
            sessions=MemorySessionStore(account),
            catalogue=MemoryIndexCatalogue(account),
            quota=MemoryQuotaStore(account),
            routers=MemoryRouterStore(account),
            dashboards=MemoryConfigStore(account),
            ws=MemoryWsStore(account),
            flag_slots=MemoryFlagSlots(account),
        )
