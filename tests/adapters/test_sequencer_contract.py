"""The sequencer's contract (docs/storage.md "The sequencer"): the head's counter hands out
seqs that never conflict, a frame goes at its reserved key in one of the incarnation's
partition keys, a hole takes a slot nobody wrote, and reads walk the chain of frames across
the partitions, stopping before a slot that is still open. Run against every backend in
conftest.BACKENDS (the in-memory fakes, moto, DynamoDB Local, a moto server)."""

from __future__ import annotations

import time

import pytest
from adapter_helpers import (
    REC_SIZE,
    T0,
    Backend,
    Lossy,
    append,
    append_commit,
    create_topic,
    creating_commit,
    recs,
    reserve,
    seqs_of,
)

from headwater.engine.ports import (
    AppendRejected,
    DeleteCommit,
    FrameDelete,
    Head,
    IdemEntry,
    ProducerClaim,
    frame_partition,
    log_key_parts,
)
from headwater.storage.schema import LOG

pytestmark = pytest.mark.adapters


def _create(b: Backend, topic: str, n: int, partitions: int) -> None:
    b.tail.commit_append(creating_commit(topic, recs(n), partitions=partitions))


def _head(b: Backend, topic: str) -> Head:
    head = b.heads.get(topic)
    assert head is not None
    return head


# --- the counter ----------------------------------------------------------------------------


def test_reservations_hand_out_consecutive_seqs_and_move_every_counter(backend: Backend) -> None:
    head = create_topic(backend, "t", 2)  # seqs 1-2, 20 bytes
    one = reserve(backend, head, recs(3), T0 + 5)
    # a writer on a stale head still gets the next seqs: reservations never conflict
    two = reserve(backend, head, recs(2), T0 + 3)
    assert (one.first_seq, one.last_seq, two.first_seq, two.last_seq) == (3, 5, 6, 7)
    # each carries the log's reserved bytes through its last seq, and a time never before
    # the last reservation's (clocks of other processes may lag)
    assert (one.appended_bytes, two.appended_bytes) == (5 * REC_SIZE, 7 * REC_SIZE)
    assert (one.ts, two.ts) == (T0 + 5, T0 + 5)
    assert (one.head.head_seq, two.head.head_seq) == (5, 7)
    after = _head(backend, "t")
    assert after == two.head
    # every counter moved with the seqs: appends in flight count until they resolve
    assert (after.head_seq, after.count, after.bytes, after.appended) == (7, 7, 70, 7)
    assert after.unsealed_bytes == head.unsealed_bytes + 5 * REC_SIZE
    assert after.appended_bytes == 7 * REC_SIZE and after.last_write_ts == T0 + 3


def test_a_reservation_whose_answer_is_lost_takes_its_seqs_once(backend: Backend) -> None:
    lossy: Lossy = backend.lossy(False)
    head = create_topic(backend, "t", 2)
    lossy.lose_next("reserve_seqs")
    got = lossy.heads.reserve(head, 3, 3 * REC_SIZE, T0 + 1)
    # the re-send found the head as its first attempt left it (its commit id on it): the
    # same seqs, stepped once
    assert (got.first_seq, got.last_seq, got.retried) == (3, 5, True)
    assert _head(backend, "t").head_seq == 5
    nxt = reserve(backend, _head(backend, "t"), recs(1))
    assert nxt.first_seq == 6


# --- holes ------------------------------------------------------------------------------------


def test_a_hole_takes_a_free_slot_and_never_one_a_frame_holds(backend: Backend) -> None:
    head = create_topic(backend, "t", 2)
    reserve(backend, head, recs(3))  # 3-5: its writer dies
    theirs = reserve(backend, head, recs(1))  # 6
    backend.tail.commit_append(append_commit(head, recs(1), first=theirs.first_seq, single=True))
    # a reader fills the first seq of the open slot; the writer's own fill would cover all
    hole = backend.tail.fill_hole(head, 3)
    assert (hole.first_seq, hole.last_seq, hole.hole, hole.records) == (3, 3, True, [])
    # filling a key a frame holds changes nothing and answers that frame
    held = backend.tail.fill_hole(head, 6)
    assert (held.first_seq, held.hole, seqs_of([held])) == (6, False, [6])
    # and the same hole again answers the hole
    assert backend.tail.fill_hole(head, 3) == hole
    # the owner of a reservation fills its whole span at once, with its bytes
    owned = backend.tail.fill_hole(head, 4, 5, 2 * REC_SIZE)
    assert (owned.first_seq, owned.last_seq, owned.void_bytes) == (4, 5, 2 * REC_SIZE)
    after = _head(backend, "t")
    chain = backend.tail.read_frames(after, 0, after.head_seq, 100)
    assert [(f.first_seq, f.last_seq, f.hole) for f in chain] == [
        (1, 2, False),
        (3, 3, True),
        (4, 5, True),
        (6, 6, False),
    ]
    assert seqs_of(chain) == [1, 2, 6]
    summaries = backend.tail.frame_summaries(after, 0, after.head_seq, 100)
    assert [(s.first_seq, s.hole, s.void_bytes) for s in summaries] == [
        (1, False, 0),
        (3, True, 0),
        (4, True, 2 * REC_SIZE),
        (6, False, 0),
    ]


def test_a_hole_whose_answer_is_lost_is_the_fillers_own(backend: Backend) -> None:
    lossy: Lossy = backend.lossy(False)
    head = create_topic(backend, "t", 1)
    reserve(backend, head, recs(2))
    lossy.lose_next("fill_hole")
    hole = lossy.tail.fill_hole(head, 2, 3, 20)
    assert (hole.first_seq, hole.last_seq, hole.hole, hole.void_bytes) == (2, 3, True, 20)


# --- the chain over partition keys ------------------------------------------------------------


@pytest.mark.parametrize("partitions", [1, 4])
def test_reads_walk_the_chain_across_partition_keys(backend: Backend, partitions: int) -> None:
    _create(backend, "p", 2, partitions)
    head = _head(backend, "p")
    assert head.partitions == partitions
    sizes = [1, 3, 1, 1, 2, 1, 5, 1, 1, 1]
    for n in sizes:
        head = append(backend, head, recs(n, start=head.head_seq))
    total = 2 + sum(sizes)
    assert head.head_seq == total
    # every read sees the same chain, whatever partition each frame landed in
    frames = backend.tail.read_frames(head, 0, total, 1000)
    assert seqs_of(frames) == list(range(1, total + 1))
    # a read from a frame boundary, and from inside a frame (its holder comes first)
    assert seqs_of(backend.tail.read_frames(head, 3, total, 1000)) == list(range(4, total + 1))
    inside = backend.tail.read_frames(head, 4, total, 2)
    assert (inside[0].first_seq, inside[0].last_seq) == (4, 6)
    assert [r.seq for r in inside[0].records if r.seq > 4] == [5, 6]
    # a short span (read by key, not by a Query per partition), from inside a frame too
    assert seqs_of(backend.tail.read_frames(head, 4, 10, 100))[-6:] == [5, 6, 7, 8, 9, 10]
    short = backend.tail.read_frames(head, 4, 7, 100)
    assert [(f.first_seq, f.last_seq) for f in short] == [(4, 6), (7, 7)]
    # budgets: records and bytes stop the walk at the frame that fills them
    assert [f.last_seq for f in backend.tail.read_frames(head, 0, total, 3)] == [2, 3]
    assert [f.last_seq for f in backend.tail.read_frames(head, 0, total, 4)] == [2, 3, 6]
    assert [f.last_seq for f in backend.tail.read_frames(head, 0, total, 1000, 25)] == [2, 3]
    summaries = backend.tail.frame_summaries(head, 0, total, 1000)
    assert [s.first_seq for s in summaries] == [f.first_seq for f in frames]
    got = backend.tail.get_frames(head, [f.first_seq for f in frames])
    assert sorted(got) == [f.first_seq for f in frames]
    if backend.clients is not None:
        # the frames are where the partition function puts them
        for f in frames:
            pk = head.frame_pk(f.first_seq)
            assert log_key_parts(pk) == ("p", 1)
            assert pk.endswith(f"~{frame_partition(f.first_seq, partitions)}") or (
                frame_partition(f.first_seq, partitions) == 0 and pk == "p#1"
            )
            key = {"pk": {"S": pk}, "sk": {"N": str(f.first_seq)}}
            assert backend.raw_item(LOG.logical, key) is not None
        if partitions > 1:
            used = {frame_partition(f.first_seq, partitions) for f in frames}
            assert len(used) > 1


@pytest.mark.parametrize("partitions", [1, 4])
def test_the_chain_stops_before_an_open_slot(backend: Backend, partitions: int) -> None:
    _create(backend, "o", 2, partitions)
    head = _head(backend, "o")
    slow = reserve(backend, head, recs(2))  # 3-4: reserved, not written yet
    fast = reserve(backend, head, recs(1))  # 5: written
    backend.tail.commit_append(append_commit(head, recs(1), first=fast.first_seq, single=True))
    now = _head(backend, "o")
    assert now.head_seq == 5
    # a read never passes the open slot, though a frame stands after it
    assert seqs_of(backend.tail.read_frames(now, 0, 5, 100)) == [1, 2]
    assert backend.tail.read_frames(now, 2, 5, 100) == []
    assert [s.last_seq for s in backend.tail.frame_summaries(now, 0, 5, 100)] == [2]
    # every item in a span (for deleting them all) includes the frame past it
    every = backend.tail.frame_summaries(now, 0, 5, 100, every=True)
    assert [s.first_seq for s in every] == [1, 5]
    # once the slot's frame lands, the chain runs through
    backend.tail.commit_append(append_commit(head, recs(2), first=slow.first_seq, single=True))
    assert seqs_of(backend.tail.read_frames(now, 0, 5, 100)) == [1, 2, 3, 4, 5]


def test_record_deletes_mark_frames_in_their_partitions(backend: Backend) -> None:
    _create(backend, "d", 1, 4)
    head = _head(backend, "d")
    for n in (1, 1, 2, 1):
        head = append(backend, head, recs(n, start=head.head_seq))
    frames = backend.tail.read_frames(head, 0, head.head_seq, 100)
    marks = [FrameDelete(f.first_seq, (f.first_seq,), REC_SIZE, 0) for f in frames[1:]]
    commit = DeleteCommit(
        head.topic,
        head.epoch,
        head.del_ver,
        marks,
        len(marks),
        len(marks) * REC_SIZE,
        None,
        expected_sealed=head.sealed_through,
        partitions=head.partitions,
    )
    assert backend.tail.commit_delete(commit)
    after = _head(backend, "d")
    deleted = {
        s for f in backend.tail.read_frames(after, 0, after.head_seq, 100) for s in f.deleted
    }
    assert deleted == {f.first_seq for f in frames[1:]}
    assert after.count == head.count - len(marks)


# --- deletes and the counter ----------------------------------------------------------------


def test_a_topic_delete_needs_nothing_reserved_since_its_read(backend: Backend) -> None:
    head = create_topic(backend, "x", 2)
    reserve(backend, head, recs(1))  # another writer reserved after `head` was read
    assert not backend.heads.mark_deleted(head, if_empty=False)
    fresh = _head(backend, "x")
    assert not backend.heads.mark_deleted(fresh, if_empty=True)  # 3 seqs reserved: not empty
    assert backend.heads.mark_deleted(fresh, if_empty=False)
    gone = _head(backend, "x")
    assert gone.deleted and gone.prev_head_seq == 3


def test_a_reservation_answers_the_config_it_was_judged_on(backend: Backend) -> None:
    head = create_topic(backend, "c", 1)
    assert backend.heads.put_config(head, {"cap_records": 5, "discard": "reject"})
    # a writer that judged on the old config is refused, with the head as it is now
    with pytest.raises(AppendRejected) as rej:
        reserve(backend, head, recs(1))
    current = rej.value.current_head
    assert current is not None and current.config == {"cap_records": 5, "discard": "reject"}
    got = reserve(backend, current, recs(1), max_count=4)
    assert got.first_seq == 2


def test_idempotency_items_outlive_their_frames_slot(backend: Backend) -> None:
    """(Expiry from the real clock: DynamoDB Local's TTL sweeper deletes items whose ttl is
    past, and T0 is in 2023.)"""
    now = int(time.time() * 1000)
    head = create_topic(backend, "k", 1)
    rsv = reserve(backend, head, recs(1), now)
    commit = append_commit(
        head, recs(1), first=rsv.first_seq, ts=now, idem=[IdemEntry("key", 2, 2, now + 60_000)]
    )
    backend.tail.commit_append(commit)
    hit = backend.tail.get_idempotency(head, "key", now)
    assert hit is not None and (hit.first_seq, hit.last_seq) == (2, 2)


# --- idempotent producers: a claim item per producer -------------------------------------------


def _claimed(
    b: Backend, head: Head, producer: str, epoch: int, seq: int, first: int | None = None
) -> int:
    """Commit one record with a producer's claim at freshly reserved seqs (or at `first`,
    reserved before): the frame key."""
    if first is None:
        first = reserve(b, head, recs(1)).first_seq
    commit = append_commit(head, recs(1), first=first)
    commit.claims = [ProducerClaim(producer, epoch, seq)]
    b.tail.commit_append(commit)
    return first


def test_a_producer_claim_commits_with_its_frame_and_refuses_what_it_does_not_take(
    backend: Backend,
) -> None:
    head = create_topic(backend, "pr", 1)
    at = _claimed(backend, head, "p1", 0, 0)
    assert backend.tail.get_producer(head, "p1") == (0, 0, at)
    at = _claimed(backend, head, "p1", 0, 1)
    assert backend.tail.get_producer(head, "p1") == (0, 1, at)
    # another producer never meets p1's state
    _claimed(backend, head, "p2", 0, 0)
    # a duplicate, a gap and a stale epoch are refused with the stored state: nothing written
    for epoch, seq in ((0, 1), (0, 3), (0, 0)):
        first = reserve(backend, head, recs(1)).first_seq
        commit = append_commit(head, recs(1), first=first)
        commit.claims = [ProducerClaim("p1", epoch, seq)]
        with pytest.raises(AppendRejected) as rej:
            backend.tail.commit_append(commit)
        assert rej.value.claim_hits == {"p1": (0, 1, at)}, (epoch, seq)
        assert not rej.value.slot_lost and not rej.value.head_conflict
        assert backend.tail.get_frames(head, [first]) == {}
    # a new epoch starts at seq 0
    later = _claimed(backend, head, "p1", 1, 0)
    assert backend.tail.get_producer(head, "p1") == (1, 0, later)
    # a first write that is not seq 0 has no state to show
    first = reserve(backend, head, recs(1)).first_seq
    commit = append_commit(head, recs(1), first=first)
    commit.claims = [ProducerClaim("p3", 0, 4)]
    with pytest.raises(AppendRejected) as rej:
        backend.tail.commit_append(commit)
    assert rej.value.claim_hits == {"p3": None}


def test_a_producer_claim_is_refused_before_the_producers_last_write(backend: Backend) -> None:
    """Seqs reserved earlier but committed later must not put a producer's writes out of
    order: its claim holds only after its last frame."""
    head = create_topic(backend, "po", 1)
    early = reserve(backend, head, recs(1)).first_seq  # seq 2, for p's write 1
    _claimed(backend, head, "p", 0, 0)  # seq 3: p's write 0
    commit = append_commit(head, recs(1), first=early)
    commit.claims = [ProducerClaim("p", 0, 1)]  # taken next by the rules, but at seq 2 < 3
    with pytest.raises(AppendRejected) as rej:
        backend.tail.commit_append(commit)
    assert rej.value.claim_hits == {"p": (0, 0, 3)}


def test_a_close_with_a_producer_claim_moves_both_or_neither(backend: Backend) -> None:
    head = create_topic(backend, "pc", 1)
    _claimed(backend, head, "p", 0, 0)
    cur = _head(backend, "pc")
    assert backend.heads.put_ext(cur, '{"closed":1}', ProducerClaim("p", 0, 1))
    closed = _head(backend, "pc")
    assert closed.ext == '{"closed":1}'
    assert backend.tail.get_producer(closed, "p") == (0, 1, closed.head_seq)
    # the same close again: the producer refuses it (a duplicate), the ext stays
    with pytest.raises(AppendRejected) as rej:
        backend.heads.put_ext(closed, '{"closed":2}', ProducerClaim("p", 0, 1))
    assert rej.value.claim_hits == {"p": (0, 1, closed.head_seq)}
    assert _head(backend, "pc").ext == '{"closed":1}'
    # a head that moved since the read: nothing moves, the claim neither
    assert not backend.heads.put_ext(cur, '{"closed":3}', ProducerClaim("p", 0, 2))
    assert backend.tail.get_producer(closed, "p") == (0, 1, closed.head_seq)


def test_a_lost_claim_answer_is_one_commit(backend: Backend) -> None:
    lossy: Lossy = backend.lossy(True)  # re-sent with a fresh token: found by its commit id
    head = create_topic(backend, "pl", 1)
    first = reserve(backend, head, recs(1)).first_seq
    commit = append_commit(head, recs(1), first=first)
    commit.claims = [ProducerClaim("p", 0, 0)]
    lossy.lose_next("commit_append")
    assert lossy.tail.commit_append(commit) is True  # applied earlier: recognised
    assert backend.tail.get_producer(head, "p") == (0, 0, first)
