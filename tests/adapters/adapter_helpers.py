"""Builders shared by the adapter contract tests (imported by the tests and the conftest)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tests.fakes import Fault, MemoryAccount, MemoryStores

from headwater.engine.ports import (
    AppendCommit,
    BlobStore,
    Head,
    HeadStore,
    IdemEntry,
    LogTailStore,
    Reservation,
    SegmentStore,
    SessionStore,
    TagEntry,
)
from headwater.engine.ports.catalogue import IndexCatalogueStore
from headwater.engine.ports.dashboard import DashboardConfigStore
from headwater.engine.ports.queue import LeaseStore
from headwater.engine.ports.quota import QuotaStore
from headwater.engine.ports.routers import RouterStore
from headwater.engine.ports.ws import WsStore
from headwater.engine.records import NewRecord, encode_records
from headwater.flags.ports import ConnectionSlots
from headwater.settings import Settings
from headwater.storage.blobs import S3BlobStore
from headwater.storage.clients import AwsClients
from headwater.storage.dashboard_configs import DynamoConfigStore
from headwater.storage.flag_slots import DynamoFlagSlots
from headwater.storage.heads import DynamoHeadStore
from headwater.storage.index_catalogue import DynamoIndexCatalogue
from headwater.storage.leases import DynamoLeaseStore
from headwater.storage.log_tail import DynamoLogTailStore
from headwater.storage.quota import DynamoQuotaStore
from headwater.storage.routers import DynamoRouterStore
from headwater.storage.segments import DynamoSegmentStore
from headwater.storage.sessions import DynamoSessionStore
from headwater.storage.ws_connections import DynamoWsStore

T0 = 1_700_000_000_000  # a fixed "now" (ms) so expiry tests are deterministic
REC_SIZE = 10  # accounted bytes per test record

# The writes the retry contract loses an answer of: the port method, the DynamoDB call its
# adapter makes, and the fakes' operation.
LOSSY_OPS = {
    "commit_append": ("transact_write_items", "tail.commit_append"),
    "commit_seal": ("transact_write_items", "segments.commit_seal"),
    "complete": ("transact_write_items", "leases.complete"),
    "put_ext": ("update_item", "heads.put_ext"),
    "mark_deleted": ("put_item", "heads.mark_deleted"),
    "append_single": ("put_item", "tail.commit_append"),
    "reserve_seqs": ("update_item", "heads.reserve"),
    "fill_hole": ("put_item", "tail.fill_hole"),
    "reserve": ("update_item", "quota.reserve"),
    "release": ("update_item", "quota.release"),
    "publish": ("put_item", "catalogue.publish"),
}


class LossyClient:
    """A DynamoDB client whose next `lose[op]` answers of `op` are lost after applying."""

    def __init__(self, real: Any, *, fresh_tokens: bool = False) -> None:
        self._real = real
        self.lose: dict[str, int] = {}
        self.calls: dict[str, int] = {}
        self.fresh_tokens = fresh_tokens

    def __getattr__(self, name: str) -> Any:
        from botocore.exceptions import ConnectionClosedError

        fn = getattr(self._real, name)
        if not callable(fn):
            return fn

        def call(**kw: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            if self.fresh_tokens and "ClientRequestToken" in kw:
                kw = {**kw, "ClientRequestToken": uuid.uuid4().hex}
            out = fn(**kw)
            if self.lose.get(name, 0) > 0:
                self.lose[name] -= 1
                raise ConnectionClosedError(endpoint_url="http://lost")
            return out

        return call


@dataclass
class Lossy:
    """Stores over the backend's storage whose writes can lose their answer after applying:
    `lose_next(op)` makes the next `op` (a key of LOSSY_OPS) apply, lose its answer, and be
    re-sent as the adapter re-sends it (same token, or a fresh one with `fresh_tokens`)."""

    heads: HeadStore
    tail: LogTailStore
    segments: SegmentStore
    leases: LeaseStore
    quota: QuotaStore
    catalogue: IndexCatalogueStore
    lose_next: Callable[[str], None]
    fresh_tokens: bool  # re-sends carry a new token: recognised by commit ids alone


@dataclass
class Backend:
    """The ports over one backend: the DynamoDB/S3 adapters over moto, DynamoDB Local or a
    moto server (`clients` set), or the in-memory fakes (tests/fakes, `clients` None)."""

    name: str
    settings: Settings
    heads: HeadStore
    tail: LogTailStore
    blobs: BlobStore
    segments: SegmentStore
    leases: LeaseStore
    sessions: SessionStore
    catalogue: IndexCatalogueStore
    quota: QuotaStore
    routers: RouterStore
    dashboards: DashboardConfigStore
    ws: WsStore
    flag_slots: ConnectionSlots
    lossy: Callable[[bool], Lossy]  # lossy(fresh_tokens)
    clients: AwsClients | None = None

    @classmethod
    def build(cls, name: str, settings: Settings, clients: AwsClients) -> Backend:
        blobs = S3BlobStore(clients.s3, settings.bucket_name)

        def lossy(fresh_tokens: bool) -> Lossy:
            client = LossyClient(clients.dynamodb, fresh_tokens=fresh_tokens)

            def lose_next(op: str) -> None:
                call = LOSSY_OPS[op][0]
                client.lose[call] = client.lose.get(call, 0) + 1

            return Lossy(
                heads=DynamoHeadStore(client, settings),
                tail=DynamoLogTailStore(client, settings, blobs),
                segments=DynamoSegmentStore(client, settings),
                leases=DynamoLeaseStore(client, settings),
                quota=DynamoQuotaStore(client, settings),
                catalogue=DynamoIndexCatalogue(client, settings),
                lose_next=lose_next,
                fresh_tokens=fresh_tokens,
            )

        return cls(
            name=name,
            settings=settings,
            heads=DynamoHeadStore(clients.dynamodb, settings),
            tail=DynamoLogTailStore(clients.dynamodb, settings, blobs),
            blobs=blobs,
            segments=DynamoSegmentStore(clients.dynamodb, settings),
            leases=DynamoLeaseStore(clients.dynamodb, settings),
            sessions=DynamoSessionStore(clients.dynamodb, settings),
            catalogue=DynamoIndexCatalogue(clients.dynamodb, settings),
            quota=DynamoQuotaStore(clients.dynamodb, settings),
            routers=DynamoRouterStore(clients.dynamodb, settings),
            dashboards=DynamoConfigStore(clients.dynamodb, settings),
            ws=DynamoWsStore(clients.dynamodb, settings),
            flag_slots=DynamoFlagSlots(clients.dynamodb, settings),
            lossy=lossy,
            clients=clients,
        )

    @classmethod
    def memory(cls, settings: Settings) -> Backend:
        stores = MemoryStores.build(MemoryAccount())

        def lossy(fresh_tokens: bool) -> Lossy:
            # other store objects over the same account (as the DynamoDB ones over a client)
            view = MemoryStores.build(stores.account)

            def lose_next(op: str) -> None:
                view.account.arm(
                    LOSSY_OPS[op][1], Fault.RESEND_AFTER_APPLY, fresh_token=fresh_tokens
                )

            return Lossy(
                heads=view.heads,
                tail=view.tail,
                segments=view.segments,
                leases=view.leases,
                quota=view.quota,
                catalogue=view.catalogue,
                lose_next=lose_next,
                fresh_tokens=fresh_tokens,
            )

        return cls(
            name="memory",
            settings=settings,
            heads=stores.heads,
            tail=stores.tail,
            blobs=stores.blobs,
            segments=stores.segments,
            leases=stores.leases,
            sessions=stores.sessions,
            catalogue=stores.catalogue,
            quota=stores.quota,
            routers=stores.routers,
            dashboards=stores.dashboards,
            ws=stores.ws,
            flag_slots=stores.flag_slots,
            lossy=lossy,
        )

    def raw_item(self, logical: str, key: dict[str, Any]) -> dict[str, Any] | None:
        """An item as DynamoDB stores it (the DynamoDB backends only: tests of the item
        encoding take the `aws_backend` fixture)."""
        assert self.clients is not None, f"{self.name} has no DynamoDB items"
        resp = self.clients.dynamodb.get_item(
            TableName=self.settings.table_name(logical), Key=key, ConsistentRead=True
        )
        item: dict[str, Any] | None = resp.get("Item")
        return item


def recs(n: int, *, tag: str | None = None, start: int = 0) -> list[NewRecord]:
    return [NewRecord(data={"i": start + i}, tag=tag, size=REC_SIZE) for i in range(n)]


def new_head(topic: str, *, epoch: int = 1, **kw: Any) -> Head:
    return Head(topic=topic, epoch=epoch, created_ms=T0, **kw)


def creating_commit(
    topic: str,
    records: Sequence[NewRecord],
    *,
    epoch: int = 1,
    replacing: Head | None = None,
    tags: Sequence[TagEntry] = (),
    idem: Sequence[IdemEntry] = (),
    config: dict[str, Any] | None = None,
    ts: int = T0,
    partitions: int = 1,
) -> AppendCommit:
    n = len(records)
    payload = sum(r.size for r in records)
    head = new_head(
        topic,
        epoch=epoch,
        head_seq=n,
        count=n,
        bytes=payload,
        last_write_ts=ts,
        config=config or {},
        appended=n,
        appended_bytes=payload,
        partitions=partitions,
    )
    return AppendCommit(
        topic=topic,
        expected=replacing,
        new_head=head,
        first_seq=1,
        last_seq=n,
        ts=ts,
        blob=encode_records(list(records)),
        spill_key=None,
        payload_bytes=payload,
        tag_entries=list(tags),
        tag_pending=False,
        idem=list(idem),
        appended_bytes=payload,
    )


def append_commit(
    expected: Head,
    records: Sequence[NewRecord],
    *,
    tags: Sequence[TagEntry] = (),
    tag_pending: bool = False,
    idem: Sequence[IdemEntry] = (),
    ts: int = T0 + 1,
    blob: bytes | None = None,
    spill_key: str | None = None,
    single: bool = False,
    expires_s: int | None = None,
    first: int | None = None,
) -> AppendCommit:
    """The commit of `records` at `first` (default: right after `expected`'s head seq, the
    seqs a reservation on `expected` would get: reserve them first, see `append`)."""
    first = expected.head_seq + 1 if first is None else first
    last = first + len(records) - 1
    payload = sum(r.size for r in records)
    if blob is None and spill_key is None:
        blob = encode_records(list(records))
    return AppendCommit(
        topic=expected.topic,
        expected=expected,
        new_head=None,
        first_seq=first,
        last_seq=last,
        ts=ts,
        blob=blob,
        spill_key=spill_key,
        payload_bytes=payload,
        tag_entries=list(tags),
        tag_pending=tag_pending,
        idem=list(idem),
        single=single,
        expires_s=expires_s,
        appended_bytes=expected.appended_bytes + payload,
    )


def reserve(
    b: Backend, head: Head, records: Sequence[NewRecord], ts: int = T0 + 1, **kw: Any
) -> Reservation:
    """The counter step an append of `records` makes before its write."""
    return b.heads.reserve(head, len(records), sum(r.size for r in records), ts, **kw)


def create_topic(b: Backend, topic: str, n: int = 3, **kw: Any) -> Head:
    b.tail.commit_append(creating_commit(topic, recs(n), **kw))
    head = b.heads.get(topic)
    assert head is not None
    return head


def append(
    b: Backend,
    head: Head,
    records: Sequence[NewRecord],
    *,
    max_count: int | None = None,
    max_bytes: int | None = None,
    ext: str | None = None,
    **kw: Any,
) -> Head:
    """Reserve seqs for `records` on `head`, then commit them there; the head after."""
    ts = kw.get("ts", T0 + 1)
    rsv = reserve(b, head, records, ts, ext=ext, max_count=max_count, max_bytes=max_bytes)
    b.tail.commit_append(append_commit(head, records, first=rsv.first_seq, **kw))
    fresh = b.heads.get(head.topic)
    assert fresh is not None
    return fresh


def build_log(b: Backend, topic: str, frame_sizes: Sequence[int]) -> Head:
    """A topic whose frames hold `frame_sizes` records each (first frame creates it)."""
    head = create_topic(b, topic, frame_sizes[0])
    for n in frame_sizes[1:]:
        head = append(b, head, recs(n, start=head.head_seq))
    return head


def seqs_of(frames: Sequence[Any]) -> list[int]:
    return [r.seq for f in frames for r in f.records]
