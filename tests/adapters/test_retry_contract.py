"""Retry safety of every adapter write (docs/storage.md "Exactly-once writes"), against each
backend: a write applies, its answer is lost, the adapter re-sends it, and must report what
happened once: the commit, not a conflict; one frame, one segment, one counter step.

The loss is made by LossyClient: it runs the real call, then raises what botocore raises for
a reset connection. Backends that honour ClientRequestToken (DynamoDB, DynamoDB Local, the
embedded emulator) answer a re-sent transaction with its first success. The `no-tokens` runs
give every attempt a fresh token, as a backend that ignores it would see them: the adapter
must then recognise its own commit id from the items a cancelled repeat returns (on
DynamoDB Local, real DynamoDB's condition and ALL_OLD semantics)."""

from __future__ import annotations

import dataclasses
import time
import uuid
from typing import Any

import pytest
from adapter_helpers import T0, Backend, append_commit, create_topic, recs
from botocore.exceptions import ConnectionClosedError

from headwater.engine.ports import (
    AppendRejected,
    Guard,
    IdemEntry,
    Lease,
    LeaseCommit,
    SealCommit,
    SegmentItem,
    queue_key,
)
from headwater.storage.dynamo import DynamoHeadStore, DynamoLogTailStore
from headwater.storage.leases import DynamoLeaseStore
from headwater.storage.quota import DynamoQuotaStore
from headwater.storage.schema import LOG
from headwater.storage.segments import DynamoSegmentStore

pytestmark = pytest.mark.adapters


class LossyClient:
    """A DynamoDB client whose next `lose[op]` answers of `op` are lost after applying."""

    def __init__(self, real: Any, *, fresh_tokens: bool = False) -> None:
        self._real = real
        self.lose: dict[str, int] = {}
        self.calls: dict[str, int] = {}
        self.fresh_tokens = fresh_tokens

    def __getattr__(self, name: str) -> Any:
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


@pytest.fixture(params=["tokens", "no-tokens"])
def lossy(request: pytest.FixtureRequest, backend: Backend) -> tuple[Backend, LossyClient]:
    return backend, LossyClient(backend.clients.dynamodb, fresh_tokens=request.param == "no-tokens")


def test_a_lost_append_answer_is_one_commit(lossy: tuple[Backend, LossyClient]) -> None:
    backend, client = lossy
    head = create_topic(backend, "t", 2)
    tail = DynamoLogTailStore(client, backend.settings, backend.blobs)
    # GIVEN an idempotent append whose answer is lost after it applied
    # (expiry from the real clock: DynamoDB Local's TTL sweeper deletes items whose ttl,
    # derived from it, is past, and T0 is in 2023)
    now = int(time.time() * 1000)
    commit = append_commit(head, recs(3), idem=[IdemEntry("k1", 3, 5, now + 60_000)])
    client.lose["transact_write_items"] = 1
    # WHEN the adapter re-sends it, THEN it reports the commit (not a conflict, no dedup)
    tail.commit_append(commit)
    after = backend.heads.get("t")
    assert after is not None
    assert (after.head_seq, after.count) == (5, 5)
    frames = backend.tail.read_frames(after, 0, 5, 100)
    assert [f.last_seq for f in frames] == [2, 5]
    assert backend.tail.get_idempotency(after, "k1", now) is not None
    # AND a different commit on the same stale head is still a genuine conflict
    with pytest.raises(AppendRejected) as info:
        tail.commit_append(append_commit(head, recs(1)))
    assert info.value.head_conflict


def test_a_lost_seal_answer_moves_sealed_through_once(lossy: tuple[Backend, LossyClient]) -> None:
    backend, client = lossy
    head = create_topic(backend, "s", 4)
    store = DynamoSegmentStore(client, backend.settings)
    sealed = head.unsealed_bytes - 10  # leaves 10: a second step would show (ub >= 0)
    seg = SegmentItem(1, 4, "segments/s/1/1-4", b"\x01", 4, sealed, T0, T0, T0)
    client.lose["transact_write_items"] = 1
    assert store.commit_seal(SealCommit(head, seg, sealed))
    after = backend.heads.get("s")
    assert after is not None
    assert (after.sealed_through, after.unsealed_bytes) == (4, 10)
    assert [s.last_seq for s in store.after(after, 0, 10)] == [4]


def test_a_lost_ack_answer_is_reported_done(lossy: tuple[Backend, LossyClient]) -> None:
    backend, client = lossy
    create_topic(backend, "jobs", 5, config={"type": "queue"})
    head = backend.heads.get("jobs")
    assert head is not None
    qk = queue_key("jobs", 1)
    store = DynamoLeaseStore(client, backend.settings)
    due = T0 + 60_000
    fresh = [Lease(s, "w1", f"l{s}", due, 1, 5, 10) for s in (1, 2)]
    assert store.claim(qk, (0, 2), fresh, []) == set()
    # GIVEN an ack of both jobs whose answer is lost after it applied
    client.lose["transact_write_items"] = 1
    commit = LeaseCommit(
        qk,
        head,
        [(1, Guard(lease_id="l1", node="w1")), (2, Guard(lease_id="l2", node="w1"))],
        [(5, 1, 10), (5, 2, 10)],
        held_until={1: due, 2: due},
        now_ms=T0,
    )
    # THEN the finish reports both done, and each was finished once
    assert store.complete(commit) == set()
    assert store.load(qk).leases == []
    after = backend.heads.get("jobs")
    assert after is not None and after.count == 3
    frame = backend.raw_item(LOG.logical, {"pk": {"S": head.log_key}, "sk": {"N": "5"}})
    assert frame is not None and frame["dn"] == {"N": "2"}


def test_lost_single_write_answers_are_recognised(lossy: tuple[Backend, LossyClient]) -> None:
    backend, client = lossy
    head = create_topic(backend, "x", 1)
    heads = DynamoHeadStore(client, backend.settings)
    client.lose["update_item"] = 1
    assert heads.put_ext(head, '{"closed":true}')
    client.lose["put_item"] = 1
    assert heads.mark_deleted(dataclasses.replace(head, ext='{"closed":true}'), if_empty=False)
    assert backend.heads.get("x") is not None and backend.heads.get("x").deleted  # type: ignore[union-attr]
    quota = DynamoQuotaStore(client, backend.settings)
    client.lose["update_item"] = 1
    assert quota.reserve("topics", 1, cap=10)
    client.lose["update_item"] = 1
    quota.release("topics", 1)
    client.lose["update_item"] = 1
    assert quota.reserve("topics", 3, cap=10)
    assert quota.get("topics") == 3  # each step counted once
