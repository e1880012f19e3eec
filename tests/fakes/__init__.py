"""In-memory fakes of the storage ports (engine/ports/, engine/quotas.py's QuotaStore), for
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

from tests.fakes.heads import MemoryHeadStore
from tests.fakes.items import MemoryIndexCatalogue, MemoryQuotaStore, MemorySessionStore
from tests.fakes.leases import MemoryLeaseStore
from tests.fakes.storage import Fault, MemoryAccount
from tests.fakes.tail import MemoryLogTailStore
from tests.fakes.tiering import MemoryBlobStore, MemorySegmentStore

__all__ = [
    "Fault",
    "MemoryAccount",
    "MemoryBlobStore",
    "MemoryHeadStore",
    "MemoryIndexCatalogue",
    "MemoryLeaseStore",
    "MemoryLogTailStore",
    "MemoryQuotaStore",
    "MemorySegmentStore",
    "MemorySessionStore",
    "MemoryStores",
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
        )
