"""Builders shared by the adapter contract tests (imported by the tests and the conftest)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from headwater.engine.ports import AppendCommit, Head, IdemEntry, TagEntry
from headwater.engine.records import NewRecord, encode_records
from headwater.settings import Settings
from headwater.storage.blobs import S3BlobStore
from headwater.storage.clients import AwsClients
from headwater.storage.dynamo import DynamoHeadStore, DynamoLogTailStore

T0 = 1_700_000_000_000  # a fixed "now" (ms) so expiry tests are deterministic
REC_SIZE = 10  # accounted bytes per test record


@dataclass
class Backend:
    name: str
    settings: Settings
    clients: AwsClients
    heads: DynamoHeadStore
    tail: DynamoLogTailStore
    blobs: S3BlobStore

    @classmethod
    def build(cls, name: str, settings: Settings, clients: AwsClients) -> Backend:
        blobs = S3BlobStore(clients.s3, settings.bucket_name)
        return cls(
            name=name,
            settings=settings,
            clients=clients,
            heads=DynamoHeadStore(clients.dynamodb, settings),
            tail=DynamoLogTailStore(clients.dynamodb, settings, blobs),
            blobs=blobs,
        )

    def raw_item(self, logical: str, key: dict[str, Any]) -> dict[str, Any] | None:
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
    max_count: int | None = None,
    max_bytes: int | None = None,
) -> AppendCommit:
    first = expected.head_seq + 1
    last = expected.head_seq + len(records)
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
        payload_bytes=sum(r.size for r in records),
        tag_entries=list(tags),
        tag_pending=tag_pending,
        idem=list(idem),
        max_count=max_count,
        max_bytes=max_bytes,
    )


def create_topic(b: Backend, topic: str, n: int = 3, **kw: Any) -> Head:
    b.tail.commit_append(creating_commit(topic, recs(n), **kw))
    head = b.heads.get(topic)
    assert head is not None
    return head


def append(b: Backend, head: Head, records: Sequence[NewRecord], **kw: Any) -> Head:
    b.tail.commit_append(append_commit(head, records, **kw))
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
