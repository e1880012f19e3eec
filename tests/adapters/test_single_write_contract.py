"""One-write appends (docs/storage.md "One write per append"), against every backend: an
append whose only condition is a free frame key writes its frame alone; heads are read
brought up to their log's newest frame; transactional appends, seals and checkpoints move
the stored head item from where it was past those frames; a delete fences the log so a
writer that has not seen it cannot land a frame nobody reads; a lost answer is recognised."""

from __future__ import annotations

import dataclasses

import pytest
from adapter_helpers import (
    REC_SIZE,
    T0,
    Backend,
    Lossy,
    append,
    append_commit,
    create_topic,
    recs,
)

from headwater.engine.ports import (
    AppendCommit,
    AppendRejected,
    Checkpoint,
    DeleteCommit,
    FrameDelete,
    Head,
    SealCommit,
    SegmentItem,
)

pytestmark = pytest.mark.adapters

TTL_S = T0 // 1000 + 7 * 86_400


def _single(b: Backend, head: Head, n: int, **kw: object) -> Head:
    """A one-write append of n records on `head`; the head read back."""
    start = head.head_seq
    assert (
        b.tail.commit_append(
            append_commit(head, recs(n, start=start), single=True, expires_s=TTL_S, **kw)  # type: ignore[arg-type]
        )
        is False
    )
    got = b.heads.get(head.topic)
    assert got is not None
    return got


def _rejected(b: Backend, commit: AppendCommit) -> AppendRejected:
    """The rejection `commit` meets (it must meet one)."""
    with pytest.raises(AppendRejected) as rej:
        b.tail.commit_append(commit)
    return rej.value


def test_a_single_write_appends_the_frame_and_reads_see_it(backend: Backend) -> None:
    head = create_topic(backend, "t", 2)
    assert head.stored is None
    # WHEN two one-write appends follow (each builds on the head read after the last)
    one = _single(backend, head, 3, ts=T0 + 5)
    two = _single(backend, one, 1, ts=T0 + 9)
    # THEN reads see the head at the newest frame, counters included, and the stored item
    # still where the creating commit left it
    assert (two.head_seq, two.count, two.bytes) == (6, 6, 6 * REC_SIZE)
    assert (two.appended, two.appended_bytes, two.last_write_ts) == (6, 6 * REC_SIZE, T0 + 9)
    assert two.unsealed_bytes == head.unsealed_bytes + 4 * REC_SIZE
    assert two.stored == Checkpoint(2, 2, 2 * REC_SIZE)
    assert two.checkpoint == Checkpoint(2, 2, 2 * REC_SIZE)
    assert backend.heads.get_many(["t"]) == {"t": two}
    assert [h.topic for h in backend.heads.list_live("", None, 10)] == ["t"]
    assert backend.heads.list_live("", None, 10)[0] == two
    frames = backend.tail.read_frames(two, 0, 10, 100)
    assert [(f.first_seq, f.last_seq) for f in frames] == [(1, 2), (3, 5), (6, 6)]
    # AND the frames carry their TTL (their reclaiming once sealed)
    summaries = backend.tail.frame_summaries(two, 0, 10, 10)
    assert [f.expires_s for f in summaries] == [None, TTL_S, TTL_S]


def test_a_single_write_on_a_stale_head_steps_past_the_frame_that_beat_it(
    backend: Backend,
) -> None:
    head = create_topic(backend, "t", 1)
    current = _single(backend, head, 2)
    # WHEN a single write lands on the key another single write took
    rej = _rejected(backend, append_commit(head, recs(1), single=True, expires_s=TTL_S))
    # THEN it is a conflict that answers the head stepped past that frame, without a read
    assert rej.head_conflict and rej.stepped
    assert rej.current_head == current
    assert backend.heads.get("t") == current


def test_a_step_is_a_guess_that_more_frames_may_stand_past(backend: Backend) -> None:
    head = create_topic(backend, "t", 1)
    one = _single(backend, head, 2)  # frame 2..3
    two = _single(backend, one, 3)  # frame 4..6
    # WHEN two writers started from `head`: the step goes past the frame at its key only
    rej = _rejected(backend, append_commit(head, recs(1), single=True, expires_s=TTL_S))
    step = rej.current_head
    assert rej.stepped and step == one
    # AND the retry on it steps again, then lands after the newest frame
    again = _rejected(backend, append_commit(step, recs(1, start=3), single=True, expires_s=TTL_S))
    assert again.stepped and again.current_head == two
    assert (
        backend.tail.commit_append(
            append_commit(two, recs(1, start=6), single=True, expires_s=TTL_S)
        )
        is False
    )
    after = backend.heads.get("t")
    assert after is not None and (after.head_seq, after.count, after.appended) == (7, 7, 7)


def test_a_transaction_beaten_to_its_key_by_a_single_write_steps_past_it(
    backend: Backend,
) -> None:
    head = create_topic(backend, "t", 2)
    current = _single(backend, head, 2)
    # WHEN a transactional append (the head item unmoved, its frame key taken) is cancelled
    rej = _rejected(backend, append_commit(head, recs(1, start=2)))
    # THEN it steps past the single write's frame, and wrote nothing
    assert rej.head_conflict and rej.stepped and not rej.idem_hits
    assert rej.current_head == current
    assert backend.heads.get("t") == current
    # AND the transaction on the stepped head commits, the stored item moved past both
    assert backend.tail.commit_append(append_commit(current, recs(1, start=4))) is False
    after = backend.heads.get("t")
    assert after is not None and after.stored is None and after.head_seq == 5


def test_a_frame_a_transaction_wrote_is_not_stepped_past(backend: Backend) -> None:
    head = create_topic(backend, "t", 1)
    moved = append(backend, head, recs(2, start=1))  # a transaction: the item moved with it
    # WHEN a single write on the head before it finds that frame at its key
    rej = _rejected(backend, append_commit(head, recs(1), single=True, expires_s=TTL_S))
    # THEN the head is read (the item and its ext belong with that frame), not guessed
    assert rej.head_conflict and not rej.stepped
    assert rej.current_head == moved


def test_a_transaction_after_single_writes_stores_the_head_past_them(backend: Backend) -> None:
    head = create_topic(backend, "t", 2)
    merged = _single(backend, _single(backend, head, 2), 1)
    # a transactional append on the merged head (its condition: the stored item unmoved)
    assert backend.tail.commit_append(append_commit(merged, recs(2, start=5))) is False
    after = backend.heads.get("t")
    assert after is not None and after.stored is None
    assert (after.head_seq, after.count, after.bytes, after.appended) == (7, 7, 70, 7)
    assert after.unsealed_bytes == head.unsealed_bytes + 5 * REC_SIZE
    # a transaction on a head read before the single writes conflicts
    with pytest.raises(AppendRejected):
        backend.tail.commit_append(append_commit(head, recs(1)))


def test_caps_count_what_single_writes_appended_past_the_stored_head(backend: Backend) -> None:
    head = _single(backend, create_topic(backend, "t", 2), 2)  # 4 records, stored count 2
    # GIVEN a cap of 5 records (discard: reject): the commit passes max_count = 5 - n
    with pytest.raises(AppendRejected):
        backend.tail.commit_append(append_commit(head, recs(2, start=4), max_count=5 - 2))
    assert (
        backend.tail.commit_append(append_commit(head, recs(1, start=4), max_count=5 - 1)) is False
    )
    after = backend.heads.get("t")
    assert after is not None and (after.count, after.head_seq) == (5, 5)


def test_checkpoint_moves_the_stored_head_once(backend: Backend) -> None:
    head = _single(backend, create_topic(backend, "t", 2), 3)
    assert head.stored is not None
    assert backend.tail.checkpoint(head)
    stored = backend.heads.get("t")
    assert stored is not None and stored.stored is None
    assert dataclasses.replace(stored, stored=head.stored) == head  # same head, now stored
    # a checkpoint from a head read before it is refused (the stored item moved)
    assert not backend.tail.checkpoint(head)
    assert backend.tail.checkpoint(stored)  # already stored: nothing to do


def test_a_seal_leaves_the_stored_head_to_a_checkpoint(backend: Backend) -> None:
    """A seal's condition does not involve where the head item stands (appends must never
    hold a seal up); the sealer moves the item with a checkpoint of its own afterwards."""
    head = _single(backend, create_topic(backend, "t", 2), 3)
    seg = SegmentItem(
        first_seq=1,
        last_seq=2,
        key="segments/t/1/x",
        index=b"",
        count=2,
        bytes=2 * REC_SIZE,
        min_ts=T0,
        max_ts=T0,
        created_ms=T0,
    )
    # GIVEN a transaction moves the item between the sealer's read and its commit
    moved = backend.heads.get("t")
    assert moved is not None
    assert backend.tail.commit_append(append_commit(moved, recs(1, start=5))) is False
    # THEN the seal still commits
    assert backend.segments.commit_seal(SealCommit(head, seg, 2 * REC_SIZE))
    after = backend.heads.get("t")
    assert after is not None and after.stored is None  # the transaction stored it
    assert (after.head_seq, after.count, after.sealed_through) == (6, 6, 2)
    assert after.unsealed_bytes == head.unsealed_bytes + REC_SIZE - 2 * REC_SIZE
    # AND the sealer's checkpoint from its stale read is refused, harmlessly
    assert not backend.tail.checkpoint(head)


def test_a_delete_fences_the_log_against_single_writes(backend: Backend) -> None:
    head = create_topic(backend, "t", 1)
    live = _single(backend, head, 2)
    # if_empty judges the count with what single writes appended past the stored item
    assert not backend.heads.mark_deleted(live, if_empty=True)
    assert backend.heads.mark_deleted(live, if_empty=False)
    marker = backend.heads.get("t")
    assert marker is not None and marker.deleted and marker.prev_head_seq == 3
    # a writer that read the head before the delete meets the fence, not an empty key
    with pytest.raises(AppendRejected):
        backend.tail.commit_append(append_commit(live, recs(1), single=True, expires_s=TTL_S))
    # and the fence is no frame to readers
    assert [f.last_seq for f in backend.tail.read_frames(live, 0, 10, 100)] == [1, 3]
    assert [f.last_seq for f in backend.tail.frame_summaries(live, 0, 10, 10)] == [1, 3]
    # a delete on a head read before the single writes is refused (the log moved on)
    other = create_topic(backend, "u", 1)
    _single(backend, other, 1)
    assert not backend.heads.mark_deleted(other, if_empty=False)


def test_an_empty_topic_with_single_writes_acked_away_is_empty(backend: Backend) -> None:
    created = create_topic(backend, "t", 1)
    live = _single(backend, created, 1)
    # records deleted past the stored item: the stored count goes below zero, the merged
    # count to 0, and an if_empty delete succeeds
    assert backend.tail.commit_delete(
        DeleteCommit(
            topic="t",
            epoch=1,
            expected_del_ver=0,
            frames=[FrameDelete(1, (1,), REC_SIZE, 0), FrameDelete(2, (2,), REC_SIZE, 0)],
            count_delta=2,
            bytes_delta=2 * REC_SIZE,
            new_earliest=3,
        )
    )
    emptied = backend.heads.get("t")
    assert emptied is not None and emptied.count == 0 and emptied.head_seq == live.head_seq
    assert backend.heads.mark_deleted(emptied, if_empty=True)


@pytest.fixture(params=["tokens", "no-tokens"])
def lossy(request: pytest.FixtureRequest, backend: Backend) -> tuple[Backend, Lossy]:
    return backend, backend.lossy(request.param == "no-tokens")


def test_a_lost_single_write_answer_is_one_frame(lossy: tuple[Backend, Lossy]) -> None:
    backend, stores = lossy
    head = create_topic(backend, "t", 2)
    commit = append_commit(head, recs(3), single=True, expires_s=TTL_S)
    stores.lose_next("append_single")
    # the re-send finds the frame holding its own commit id: applied earlier (True)
    assert stores.tail.commit_append(commit) is True
    after = backend.heads.get("t")
    assert after is not None and (after.head_seq, after.count) == (5, 5)
    assert [f.last_seq for f in backend.tail.read_frames(after, 0, 10, 100)] == [2, 5]
    # a lost checkpoint answer is one move
    stores.lose_next("checkpoint")
    assert stores.tail.checkpoint(after)
    stored = backend.heads.get("t")
    assert stored is not None and stored.stored is None and stored.count == 5
