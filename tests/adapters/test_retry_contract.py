"""Retry safety of every adapter write (docs/storage.md "Exactly-once writes"), against each
backend: a write applies, its answer is lost, the adapter re-sends it, and must report what
happened once: the commit, not a conflict; one frame, one segment, one counter step.

The loss is made by adapter_helpers.Lossy: on the DynamoDB backends a LossyClient runs the
real call, then raises what botocore raises for a reset connection; on the in-memory fakes
the operation's fault hook applies it and re-sends it (Fault.RESEND_AFTER_APPLY). Backends
that honour ClientRequestToken (DynamoDB, DynamoDB Local, the embedded emulator, the fakes)
answer a re-sent transaction with its first success. The `no-tokens` runs
give every attempt a fresh token, as a backend that ignores it would see them: the adapter
(or the fake) must then recognise its own commit id from the items a cancelled repeat
returns (on DynamoDB Local, real DynamoDB's condition and ALL_OLD semantics)."""

from __future__ import annotations

import dataclasses
import time

import pytest
from adapter_helpers import T0, Backend, Lossy, append_commit, create_topic, recs, reserve

from headwater.engine.ports import AppendRejected, IdemEntry, SealCommit, SegmentItem
from headwater.engine.ports.queue import Guard, Lease, LeaseCommit, queue_key

pytestmark = pytest.mark.adapters


@pytest.fixture(params=["tokens", "no-tokens"])
def lossy(request: pytest.FixtureRequest, backend: Backend) -> tuple[Backend, Lossy]:
    return backend, backend.lossy(request.param == "no-tokens")


def test_a_lost_append_answer_is_one_commit(lossy: tuple[Backend, Lossy]) -> None:
    backend, stores = lossy
    head = create_topic(backend, "t", 2)
    # GIVEN an idempotent append whose answer is lost after it applied
    # (expiry from the real clock: DynamoDB Local's TTL sweeper deletes items whose ttl,
    # derived from it, is past, and T0 is in 2023)
    now = int(time.time() * 1000)
    rsv = reserve(backend, head, recs(3))
    commit = append_commit(
        head, recs(3), first=rsv.first_seq, idem=[IdemEntry("k1", 3, 5, now + 60_000)]
    )
    stores.lose_next("commit_append")
    # WHEN the adapter re-sends it, THEN it reports the commit (not a conflict, no dedup):
    # answered by the token as a plain success, or, without it, as applied earlier (True)
    assert stores.tail.commit_append(commit) is stores.fresh_tokens
    after = backend.heads.get("t")
    assert after is not None
    assert (after.head_seq, after.count) == (5, 5)
    frames = backend.tail.read_frames(after, 0, 5, 100)
    assert [f.last_seq for f in frames] == [2, 5]
    assert backend.tail.get_idempotency(after, "k1", now) is not None
    # AND a different commit at the same seqs finds them taken: not ours, a lost slot
    with pytest.raises(AppendRejected) as info:
        stores.tail.commit_append(append_commit(head, recs(1)))
    assert info.value.slot_lost


def test_a_lost_seal_answer_moves_sealed_through_once(lossy: tuple[Backend, Lossy]) -> None:
    backend, stores = lossy
    head = create_topic(backend, "s", 4)
    sealed = head.unsealed_bytes - 10  # leaves 10: a second step would show (ub >= 0)
    seg = SegmentItem(1, 4, "segments/s/1/1-4", b"\x01", 4, sealed, T0, T0, T0)
    stores.lose_next("commit_seal")
    assert stores.segments.commit_seal(SealCommit(head, seg, sealed))
    after = backend.heads.get("s")
    assert after is not None
    assert (after.sealed_through, after.unsealed_bytes) == (4, 10)
    assert [s.last_seq for s in backend.segments.after(after, 0, 10)] == [4]


def test_a_lost_ack_answer_is_reported_done(lossy: tuple[Backend, Lossy]) -> None:
    backend, stores = lossy
    create_topic(backend, "jobs", 5, config={"type": "queue"})
    head = backend.heads.get("jobs")
    assert head is not None
    qk = queue_key("jobs", 1)
    due = T0 + 60_000
    fresh = [Lease(s, "w1", f"l{s}", due, 1, 5, 10) for s in (1, 2)]
    assert stores.leases.claim(qk, (0, 2), fresh, []) == set()
    # GIVEN an ack of both jobs whose answer is lost after it applied
    stores.lose_next("complete")
    commit = LeaseCommit(
        qk,
        head,
        [(1, Guard(lease_id="l1", node="w1")), (2, Guard(lease_id="l2", node="w1"))],
        [(1, 1, 10), (1, 2, 10)],
        held_until={1: due, 2: due},
        now_ms=T0,
    )
    # THEN the finish reports both done, and each was finished once
    assert stores.leases.complete(commit) == set()
    assert backend.leases.load(qk).leases == []
    after = backend.heads.get("jobs")
    assert after is not None and after.count == 3
    frame = backend.tail.get_frames(after, [1])[1]
    assert (frame.deleted, frame.deleted_count) == (frozenset({1, 2}), 2)


def test_a_lost_finish_without_records_is_ours_only_while_the_lease_was_held(
    lossy: tuple[Backend, Lossy],
) -> None:
    # A finish that deletes no record (its record already gone) writes nothing our commit id
    # could be found on: without the token, only the read-back can tell it was ours.
    backend, stores = lossy
    head = create_topic(backend, "jobs", 5, config={"type": "queue"})
    qk = queue_key("jobs", 1)
    fresh = [Lease(s, "w1", f"l{s}", T0 + 60_000, 1, 5, 10) for s in (1, 2)]
    assert stores.leases.claim(qk, (0, 2), fresh, []) == set()
    # GIVEN a finish of job 1, still held (to T0+60s) when it was sent at T0, whose answer
    # is lost after it applied: THEN it is reported done (nobody else could have ended it)
    stores.lose_next("complete")
    held = LeaseCommit(
        qk, head, [(1, Guard(node="w1"))], [], held_until={1: T0 + 60_000}, now_ms=T0
    )
    assert stores.leases.complete(held) == set()
    # GIVEN the same for job 2, but its lease had expired when the finish was sent
    stores.lose_next("complete")
    expired = LeaseCommit(qk, head, [(2, Guard(node="w1"))], [], held_until={2: T0}, now_ms=T0)
    # THEN without the token another worker could have ended it: reported failed (1 = the
    # lease's position); the token still answers the first success
    assert stores.leases.complete(expired) == ({1} if stores.fresh_tokens else set())
    # AND each was finished once either way
    assert backend.leases.load(qk).leases == []


def test_lost_single_write_answers_are_recognised(lossy: tuple[Backend, Lossy]) -> None:
    backend, stores = lossy
    head = create_topic(backend, "x", 1)
    stores.lose_next("put_ext")
    assert stores.heads.put_ext(head, '{"closed":true}')
    stores.lose_next("mark_deleted")
    assert stores.heads.mark_deleted(
        dataclasses.replace(head, ext='{"closed":true}'), if_empty=False
    )
    marker = backend.heads.get("x")
    assert marker is not None and marker.deleted
    stores.lose_next("reserve")
    assert stores.quota.reserve("topics", 1, cap=10)
    stores.lose_next("release")
    stores.quota.release("topics", 1)
    stores.lose_next("reserve")
    assert stores.quota.reserve("topics", 3, cap=10)
    assert backend.quota.get("topics") == 3  # each step counted once
