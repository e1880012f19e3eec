"""LogTailStore contract (DynamoLogTailStore): appends, idempotency, caps, spill, tag index,
reads and deletes, run against every backend in conftest.BACKENDS."""

from __future__ import annotations

import dataclasses
import struct
import uuid

import pytest
from adapter_helpers import (
    REC_SIZE,
    T0,
    Backend,
    append,
    append_commit,
    build_log,
    create_topic,
    creating_commit,
    new_head,
    recs,
    reserve,
    seqs_of,
)
from botocore.exceptions import ClientError

from headwater.engine.ports import (
    AppendRejected,
    DeleteCommit,
    FrameDelete,
    Head,
    IdemEntry,
    IdemHit,
    TagEntry,
)
from headwater.engine.records import FRAME_FORMAT_RAW, NewRecord, StoredRecord, encode_records
from headwater.errors import StorageUnavailable
from headwater.settings import MAX_INLINE_FRAME_BYTES
from headwater.storage.schema import INDEX, LOG

pytestmark = pytest.mark.adapters

# Does a cancelled transaction carry the old item of a failed condition
# (ReturnValuesOnConditionCheckFailure=ALL_OLD)? When not, the engine falls back to
# get_idempotency, so both answers are correct; this records which backend does what.
RETURNS_OLD_ITEM_ON_CANCEL = {"memory": True, "moto": True, "ddblocal": True, "motoserver": True}


def _no_frame(b: Backend, head: Head, seq: int) -> bool:
    """No frame starts or ends at `seq`, not even a ghost item a stray update left there (the
    summaries list every item of the log's partition, whatever attributes it lacks)."""
    found = b.tail.frame_summaries(head, 0, 1 << 62, 1 << 20, every=True)
    return all(seq not in (f.first_seq, f.last_seq) for f in found)


def _no_idem_key(b: Backend, head: Head, key: str) -> bool:
    return b.tail.get_idempotency(head, key, 0) is None  # at time 0 any stored key is live


def _frame_item(b: Backend, head: Head, last_seq: int) -> dict[str, object] | None:
    return b.raw_item(LOG.logical, {"pk": {"S": head.log_key}, "sk": {"N": str(last_seq)}})


def _idem_item(b: Backend, head: Head, key: str) -> dict[str, object] | None:
    pk = f"i#{head.topic}#{head.epoch}"
    return b.raw_item(INDEX.logical, {"pk": {"S": pk}, "sk": {"S": key}})


# --- creating appends -----------------------------------------------------------------------


def test_creating_append_writes_head_and_frame(backend: Backend) -> None:
    records = [
        NewRecord({"a": 1}, node="n1", tag="t", meta={"m": "é"}, size=11),
        NewRecord([1, "二"], size=12),
        NewRecord(None, tag="t", size=13),
    ]
    commit = creating_commit("t/ü", records, config={"c": 1})
    backend.tail.commit_append(commit)
    head = backend.heads.get("t/ü")
    assert head == commit.new_head
    assert head is not None and (head.head_seq, head.count, head.bytes) == (3, 3, 36)
    frames = backend.tail.read_frames(head, 0, 3, 100)
    assert len(frames) == 1
    f = frames[0]
    assert (f.first_seq, f.last_seq, f.ts, f.payload_bytes) == (1, 3, T0, 36)
    assert (f.deleted, f.deleted_count, f.deleted_bytes) == (frozenset(), 0, 0)
    got = [(r.seq, r.ts, r.data, r.node, r.tag, r.meta, r.size) for r in f.records]
    assert got == [
        (1, T0, {"a": 1}, "n1", "t", {"m": "é"}, 11),
        (2, T0, [1, "二"], None, None, None, 12),
        (3, T0, None, None, "t", None, 13),
    ]


def test_second_creating_append_is_a_head_conflict(backend: Backend) -> None:
    first = create_topic(backend, "t", 3)
    with pytest.raises(AppendRejected) as rej:
        backend.tail.commit_append(creating_commit("t", recs(5, start=100)))
    assert rej.value.head_conflict and rej.value.idem_hits == {}
    # the head the failed condition saw (when the backend returns it): saves the re-read
    assert rej.value.current_head == (first if RETURNS_OLD_ITEM_ON_CANCEL[backend.name] else None)
    assert backend.heads.get("t") == first
    frames = backend.tail.read_frames(first, 0, 10, 100)
    assert [r.data for r in frames[0].records] == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert _no_frame(backend, first, 5)


def test_recreate_over_a_deleted_marker_uses_the_new_epoch(backend: Backend) -> None:
    old = create_topic(backend, "t", 2)
    assert backend.heads.mark_deleted(old, if_empty=False)
    marker = backend.heads.get("t")
    assert marker is not None and marker.deleted
    backend.tail.commit_append(creating_commit("t", recs(1), epoch=2, replacing=marker))
    head = backend.heads.get("t")
    assert head is not None and head.epoch == 2 and head.head_seq == 1
    assert seqs_of(backend.tail.read_frames(head, 0, 5, 100)) == [1]
    assert seqs_of(backend.tail.read_frames(old, 0, 5, 100)) == [1, 2]  # old epoch's frames
    # a second recreate against the same (now replaced) marker is a conflict
    with pytest.raises(AppendRejected) as rej:
        backend.tail.commit_append(creating_commit("t", recs(1), epoch=2, replacing=marker))
    assert rej.value.head_conflict


# --- normal appends -------------------------------------------------------------------------


def test_append_advances_the_head(backend: Backend) -> None:
    head = create_topic(backend, "t", 3)
    after = append(backend, head, recs(2, start=3), ts=T0 + 7)
    # unsealed_bytes grows with every append (it is what starts sealing).
    assert after == dataclasses.replace(
        head,
        head_seq=5,
        count=5,
        bytes=5 * REC_SIZE,
        last_write_ts=T0 + 7,
        unsealed_bytes=head.unsealed_bytes + 2 * REC_SIZE,
        appended=5,
        appended_bytes=5 * REC_SIZE,
    )
    assert seqs_of(backend.tail.read_frames(after, 0, 5, 100)) == [1, 2, 3, 4, 5]


def test_a_commit_sent_again_under_its_commit_id_applies_once(backend: Backend) -> None:
    head = create_topic(backend, "t", 2)
    # GIVEN a commit that applied under its commit id (which is also its request token), at
    # seqs its reservation holds
    rsv = reserve(backend, head, recs(2))
    commit = append_commit(head, recs(2, start=2), idem=[IdemEntry("k", 3, 4, T0 + 60_000)])
    commit.cid = uuid.uuid4().hex[:24]
    assert (rsv.first_seq, commit.first_seq) == (3, 3)
    assert backend.tail.commit_append(commit) is False
    # WHEN the very same commit is sent again THEN storage answers its first success (the
    # token) and nothing is written twice
    assert backend.tail.commit_append(commit) is False
    after = backend.heads.get("t")
    assert after is not None and (after.head_seq, after.count) == (4, 4)
    assert [f.last_seq for f in backend.tail.read_frames(after, 0, 10, 100)] == [2, 4]
    # AND a different commit under the same id is refused as a request, writing nothing
    other = append_commit(after, recs(1, start=4))
    other.cid = commit.cid
    with pytest.raises(StorageUnavailable) as err:
        backend.tail.commit_append(other)
    assert err.value.detail == {"aws_error": "IdempotentParameterMismatchException"}
    assert backend.heads.get("t") == after
    assert _no_frame(backend, after, 5)


def test_a_commit_at_a_key_a_hole_took_writes_nothing(backend: Backend) -> None:
    head = create_topic(backend, "t", 3)
    rsv = reserve(backend, head, recs(3))  # seqs 4..6
    # GIVEN a reader filled the reserved slot as a hole (its writer was overdue)
    hole = backend.tail.fill_hole(head, rsv.first_seq)
    assert (hole.first_seq, hole.last_seq, hole.hole) == (4, 4, True)
    # WHEN the late writer commits there, with tags and a key
    commit = append_commit(
        head,
        recs(3, tag="x"),
        first=rsv.first_seq,
        tags=[TagEntry("x", 4, (4, 5, 6))],
        idem=[IdemEntry("k", 4, 6, T0 + 60_000)],
    )
    with pytest.raises(AppendRejected) as rej:
        backend.tail.commit_append(commit)
    # THEN its slot is lost (it reserves again) and nothing at all was written
    assert rej.value.slot_lost and rej.value.idem_hits == {}
    current = backend.heads.get("t")
    assert current is not None and current.head_seq == 6
    frames = backend.tail.read_frames(current, 0, 10, 100)
    assert [(f.first_seq, f.last_seq, f.hole) for f in frames] == [(1, 3, False), (4, 4, True)]
    assert backend.tail.tag_lookup(current, "x", False) == []
    assert _no_idem_key(backend, current, "k")
    # AND the single put of a frame alone is refused the same way
    with pytest.raises(AppendRejected) as rej:
        backend.tail.commit_append(append_commit(head, recs(1), first=4, single=True))
    assert rej.value.slot_lost


def test_a_reservation_on_a_deleted_topic_or_wrong_epoch_is_a_conflict(backend: Backend) -> None:
    head = create_topic(backend, "t", 1)
    with pytest.raises(AppendRejected) as rej:
        reserve(backend, dataclasses.replace(head, epoch=2), recs(1))
    assert rej.value.head_conflict and rej.value.current_head == head
    assert backend.heads.mark_deleted(head, if_empty=False)
    with pytest.raises(AppendRejected) as rej:
        reserve(backend, head, recs(1))
    assert rej.value.head_conflict
    marker = backend.heads.get("t")
    assert marker is not None and marker.deleted and marker.head_seq == 0


def test_a_reservation_on_a_missing_topic_is_a_conflict_and_creates_nothing(
    backend: Backend,
) -> None:
    ghost = Head(topic="ghost", epoch=1)
    with pytest.raises(AppendRejected) as rej:
        reserve(backend, ghost, recs(1))
    assert rej.value.head_conflict and rej.value.current_head is None
    assert backend.heads.get("ghost") is None


# --- idempotency ----------------------------------------------------------------------------


def test_existing_idempotency_key_rejects_with_original_seqs(backend: Backend) -> None:
    head = create_topic(backend, "t", 3, idem=[IdemEntry("k1", 1, 3, T0 + 1_000)])
    assert backend.tail.get_idempotency(head, "k1", T0) == IdemHit(1, 3)
    # WHEN the same key is committed again while unexpired, with a fresh key beside it
    commit = append_commit(
        head,
        recs(2),
        ts=T0 + 500,
        idem=[IdemEntry("k2", 4, 4, T0 + 1_500), IdemEntry("k1", 5, 5, T0 + 1_500)],
    )
    with pytest.raises(AppendRejected) as rej:
        backend.tail.commit_append(commit)
    # THEN only k1 is reported, with its ORIGINAL seqs (when the backend returns the item)
    assert not rej.value.head_conflict
    assert set(rej.value.idem_hits) == {"k1"}
    expected = IdemHit(1, 3) if RETURNS_OLD_ITEM_ON_CANCEL[backend.name] else None
    assert rej.value.idem_hits["k1"] == expected
    # and nothing was written: head, frame, the fresh key
    assert backend.heads.get("t") == head
    assert _no_frame(backend, head, 5)
    assert backend.tail.get_idempotency(head, "k2", T0) is None
    assert backend.tail.get_idempotency(head, "k1", T0 + 500) == IdemHit(1, 3)


def test_expired_idempotency_key_is_overwritten(backend: Backend) -> None:
    head = create_topic(backend, "t", 3, idem=[IdemEntry("k1", 1, 3, T0 + 1_000)])
    # the condition is `ex < now`: at now == expiry the key still holds
    with pytest.raises(AppendRejected):
        backend.tail.commit_append(
            append_commit(head, recs(1), ts=T0 + 1_000, idem=[IdemEntry("k1", 4, 4, T0 + 9)])
        )
    after = append(backend, head, recs(2), ts=T0 + 1_001, idem=[IdemEntry("k1", 4, 5, T0 + 60_000)])
    assert after.head_seq == 5
    assert backend.tail.get_idempotency(after, "k1", T0 + 1_001) == IdemHit(4, 5)


def test_get_idempotency_honours_expiry(backend: Backend) -> None:
    head = create_topic(backend, "t", 2, idem=[IdemEntry("k", 1, 2, T0 + 100)])
    assert backend.tail.get_idempotency(head, "k", T0 + 100) == IdemHit(1, 2)
    assert backend.tail.get_idempotency(head, "k", T0 + 101) is None
    assert backend.tail.get_idempotency(head, "other", T0) is None
    # keys are per epoch
    assert backend.tail.get_idempotency(dataclasses.replace(head, epoch=2), "k", T0) is None


# --- caps -----------------------------------------------------------------------------------


CAP_CASES = [  # (cap_n, cap_b, fits) for 2 records of 10 bytes on top of 3 (count 3, bytes 30)
    (5, None, True),  # 3 + 2 == 5 fits
    (4, None, False),
    (None, 50, True),
    (None, 49, False),
    (5, 49, False),
]


def test_caps_refuse_the_reservation_over_the_limit(backend: Backend) -> None:
    for i, (cap_n, cap_b, fits) in enumerate(CAP_CASES):
        head = create_topic(backend, f"t{i}", 3)
        added = recs(2)
        # the engine passes cap - added, checked against the counters (which every
        # reservation moves, so appends in flight count)
        caps = {
            "max_count": None if cap_n is None else cap_n - len(added),
            "max_bytes": None if cap_b is None else cap_b - len(added) * REC_SIZE,
        }
        if fits:
            got = append(backend, head, added, **caps)
            assert got.count == 5
            continue
        with pytest.raises(AppendRejected) as rej:
            reserve(backend, head, added, **caps)
        assert rej.value.head_conflict, (cap_n, cap_b)
        assert rej.value.current_head == head
        assert backend.heads.get(head.topic) == head


# --- spill ----------------------------------------------------------------------------------


def test_spilled_frame_reads_back_from_s3(backend: Backend) -> None:
    head = create_topic(backend, "t", 1)
    records = [NewRecord({"blob": "x" * 5000, "i": i}, size=5000) for i in range(50)]
    blob = encode_records(records)
    key = "spill/t/1/51-abc"
    backend.blobs.put(key, blob)
    after = append(backend, head, records, blob=None, spill_key=key)
    summaries = backend.tail.frame_summaries(after, 1, 51, 10)
    assert [(f.last_seq, f.spill_key) for f in summaries] == [(51, key)]
    frames = backend.tail.read_frames(after, 1, 51, 1000)
    assert [f.last_seq for f in frames] == [51]
    assert [r.data["i"] for r in frames[0].records] == list(range(50))
    assert frames[0].payload_bytes == 250_000
    assert backend.tail.get_frames(after, [2])[2].records == frames[0].records  # keyed by first


def test_a_spilled_frame_whose_records_are_known_is_not_fetched(backend: Backend) -> None:
    """read_frames' `known` (the engine's frame cache, when upkeep seals what this process
    appended): a spilled frame it answers for is not fetched from S3; the others are, and
    frames stored in their item never ask."""
    head = create_topic(backend, "t", 1)
    known_recs = [NewRecord({"blob": "x" * 5000, "i": i}, size=5000) for i in range(10)]
    other_recs = [NewRecord({"blob": "y" * 5000, "i": i}, size=5000) for i in range(10)]
    after = head
    for records, key in ((known_recs, "spill/t/1/11-a"), (other_recs, "spill/t/1/21-b")):
        backend.blobs.put(key, encode_records(records))
        after = append(backend, after, records, blob=None, spill_key=key)
    after = append(backend, after, recs(2, start=21))  # inline
    cached = backend.tail.read_frames(after, 1, 10, 1000)[0].records
    backend.blobs.delete_many(["spill/t/1/11-a"])  # a fetch of it would now fail
    asked: list[tuple[int, int]] = []

    def known(first: int, last: int) -> list[StoredRecord] | None:
        asked.append((first, last))
        return cached if (first, last) == (2, 11) else None

    frames = backend.tail.read_frames(after, 1, 23, 1000, known=known)
    assert [(f.first_seq, f.last_seq) for f in frames] == [(2, 11), (12, 21), (22, 23)]
    assert frames[0].records is cached
    assert [r.data["i"] for r in frames[1].records] == list(range(10))  # fetched from S3
    assert sorted(asked) == [(2, 11), (12, 21)]  # the spilled frames only


# --- tag index ------------------------------------------------------------------------------

ODD_TAGS = ["a", "ab", "a b", "a\x00b", "a\x01", "ünï/😀", "a/1", "9", "\x00", "a" * 256]


def _tags(entries: list[TagEntry]) -> list[tuple[str, int, tuple[int, ...]]]:
    return [(e.tag, e.frame_seq, e.seqs) for e in entries]


def test_inline_tag_entries_exact_and_prefix_lookup(backend: Backend) -> None:
    entries = [TagEntry(t, 1, (i + 1,)) for i, t in enumerate(ODD_TAGS)]  # frame [1..10]
    backend.tail.commit_append(creating_commit("t", recs(10), tags=entries))
    head = backend.heads.get("t")
    assert head is not None
    for e in entries:
        # exact lookup returns that tag only ("a" must not return "ab", "a\x00b" or "a\x01")
        got = _tags(backend.tail.tag_lookup(head, e.tag, False))
        assert got == [(e.tag, 1, e.seqs)], repr(e.tag)
    prefixed = sorted(t for t in ODD_TAGS if t.startswith("a"))
    by_prefix = backend.tail.tag_lookup(head, "a", True)
    assert sorted(e.tag for e in by_prefix) == prefixed
    assert sorted(e.tag for e in backend.tail.tag_lookup(head, "", True)) == sorted(ODD_TAGS)
    assert backend.tail.tag_lookup(head, "zz", False) == []
    assert backend.tail.tag_lookup(head, "zz", True) == []
    # per epoch
    assert backend.tail.tag_lookup(dataclasses.replace(head, epoch=2), "a", True) == []


def test_tag_entries_across_frames_come_back_in_frame_order(backend: Backend) -> None:
    head = create_topic(backend, "t", 2, tags=[TagEntry("x", 1, (1, 2))])
    for last in (3, 11, 100):
        first, n = head.head_seq + 1, last - head.head_seq
        head = append(backend, head, recs(n, tag="x"), tags=[TagEntry("x", first, (last,))])
    got = backend.tail.tag_lookup(head, "x", False)
    assert _tags(got) == [("x", 1, (1, 2)), ("x", 3, (3,)), ("x", 4, (11,)), ("x", 12, (100,))]


def test_write_tag_entries_and_tag_pending(backend: Backend) -> None:
    head = create_topic(backend, "t", 1)
    # an append whose tag entries did not fit: tag_pending marks the frame on the head
    head = append(backend, head, recs(40, tag="p"), tag_pending=True)
    assert head.tag_pending == {2: 41}  # frame first seq -> last seq
    entries = [TagEntry(f"p{i:02d}", 2, (i + 2,)) for i in range(40)]  # > one batch of 25
    backend.tail.write_tag_entries(head, entries)
    backend.heads.clear_tag_pending(head, 2)
    got = backend.tail.tag_lookup(head, "p", True)
    assert _tags(got) == _tags(entries)
    # rewriting is idempotent
    backend.tail.write_tag_entries(head, entries[:3])
    assert len(backend.tail.tag_lookup(head, "p", True)) == 40
    fresh = backend.heads.get("t")
    assert fresh is not None and fresh.tag_pending == {}


# --- reads ----------------------------------------------------------------------------------


@pytest.fixture
def log3(backend: Backend) -> Head:
    """Frames keyed by their first seq: [1..3]@1, [4..7]@4, [8..12]@8."""
    return build_log(backend, "t", [3, 4, 5])


def _lasts(b: Backend, head: Head, after: int, upto: int, max_records: int = 1000) -> list[int]:
    return [f.last_seq for f in b.tail.read_frames(head, after, upto, max_records)]


READ_CASES = [  # (after_seq, upto_seq, max_records, last seqs of the frames returned)
    (0, 12, 1000, [3, 7, 12]),
    (0, 100, 1000, [3, 7, 12]),  # upto beyond the head
    (4, 12, 1000, [7, 12]),  # after in the middle of a frame: its frame comes back whole
    (3, 12, 1000, [7, 12]),
    (0, 5, 1000, [3, 7]),  # upto in the middle of a frame: that frame is included
    (4, 5, 1000, [7]),  # the whole range inside one frame
    (6, 6, 1000, []),  # empty range (no frame holds a seq in (6, 6])
    (7, 7, 1000, []),
    (12, 100, 1000, []),  # nothing after the head
    (0, 12, 3, [3]),  # max_records stops at frame boundaries, at least one frame
    (0, 12, 4, [3, 7]),
    (0, 12, 1, [3]),
    (5, 12, 2, [7]),  # counts only records after after_seq (6, 7)
    (5, 12, 3, [7, 12]),
]


def test_read_frames_ranges(backend: Backend, log3: Head) -> None:
    got = {(a, u, m): _lasts(backend, log3, a, u, m) for a, u, m, _ in READ_CASES}
    assert got == {(a, u, m): lasts for a, u, m, lasts in READ_CASES}


def test_read_frames_pages_through_many_frames(backend: Backend) -> None:
    head = build_log(backend, "t", [1] * 14)  # the adapter queries 4, then 8, ... at a time
    frames = backend.tail.read_frames(head, 0, 14, 1000)
    assert [f.last_seq for f in frames] == list(range(1, 15))
    assert seqs_of(frames) == list(range(1, 15))
    assert [f.last_seq for f in backend.tail.read_frames(head, 2, 14, 7)] == list(range(3, 10))


def test_get_frames_batch(backend: Backend) -> None:
    head = build_log(backend, "t", [1, 99, 1, 49])  # frames keyed 1, 2, 101, 102
    # 151 distinct keys: more than one BatchGetItem may carry (100); missing keys are absent
    got = backend.tail.get_frames(head, [*range(1, 152), 3, 100])
    assert sorted(got) == [1, 2, 101, 102]
    assert [(f.first_seq, f.last_seq) for _, f in sorted(got.items())] == [
        (1, 1),
        (2, 100),
        (101, 101),
        (102, 150),
    ]
    assert backend.tail.get_frames(head, []) == {}
    assert backend.tail.get_frames(dataclasses.replace(head, epoch=2), [1]) == {}


# --- deletes --------------------------------------------------------------------------------


def _delete(
    head: Head, frames: list[FrameDelete], n: int, nbytes: int, es: int | None
) -> DeleteCommit:
    return DeleteCommit(head.topic, head.epoch, head.del_ver, frames, n, nbytes, es)


def test_commit_delete_updates_frames_and_head(backend: Backend, log3: Head) -> None:
    ok = backend.tail.commit_delete(
        _delete(
            log3,
            [FrameDelete(1, (1, 2), 20, 0), FrameDelete(4, (5,), 10, 0)],
            3,
            30,
            3,
        )
    )
    assert ok
    head = backend.heads.get("t")
    assert head == dataclasses.replace(log3, count=9, bytes=90, del_ver=1, earliest_seq=3)
    frames = {f.last_seq: f for f in backend.tail.read_frames(head, 0, 12, 1000)}
    assert (frames[3].deleted, frames[3].deleted_count, frames[3].deleted_bytes) == (
        frozenset({1, 2}),
        2,
        20,
    )
    assert (frames[7].deleted, frames[7].deleted_count, frames[7].deleted_bytes) == (
        frozenset({5}),
        1,
        10,
    )
    assert frames[12].deleted == frozenset() and frames[12].deleted_count == 0
    # a second delete adds to the set; new_earliest None leaves earliest_seq
    assert backend.tail.commit_delete(_delete(head, [FrameDelete(1, (3,), 10, 2)], 1, 10, None))
    again = backend.heads.get("t")
    assert again == dataclasses.replace(head, count=8, bytes=80, del_ver=2)
    f3 = backend.tail.get_frames(head, [1])[1]
    assert (f3.deleted, f3.deleted_count, f3.deleted_bytes) == (frozenset({1, 2, 3}), 3, 30)


def test_commit_delete_head_only_moves_earliest(backend: Backend, log3: Head) -> None:
    assert backend.tail.commit_delete(_delete(log3, [], 4, 40, 5))
    head = backend.heads.get("t")
    assert head == dataclasses.replace(log3, count=8, bytes=80, del_ver=1, earliest_seq=5)


def test_commit_delete_with_stale_del_ver_changes_nothing(backend: Backend, log3: Head) -> None:
    assert backend.tail.commit_delete(_delete(log3, [FrameDelete(1, (1,), 10, 0)], 1, 10, 2))
    moved = backend.heads.get("t")
    # stale del_ver (0): refused, frames untouched
    assert not backend.tail.commit_delete(_delete(log3, [FrameDelete(4, (4,), 10, 0)], 1, 10, None))
    assert backend.heads.get("t") == moved
    f7 = backend.tail.get_frames(log3, [4])[4]
    assert f7.deleted == frozenset() and f7.deleted_count == 0


def test_commit_delete_with_deleted_count_mismatch_changes_nothing(
    backend: Backend, log3: Head
) -> None:
    assert backend.tail.commit_delete(_delete(log3, [FrameDelete(1, (1,), 10, 0)], 1, 10, None))
    head = backend.heads.get("t")
    assert head is not None and head.del_ver == 1
    # right del_ver, but frame 3 has 1 deletion, not 0; frame 7's part must not land either
    bad = _delete(head, [FrameDelete(4, (4,), 10, 0), FrameDelete(1, (2,), 10, 0)], 2, 20, None)
    assert not backend.tail.commit_delete(bad)
    assert backend.heads.get("t") == head
    frames = backend.tail.get_frames(head, [1, 4])
    assert frames[1].deleted == frozenset({1}) and frames[4].deleted == frozenset()


def test_commit_delete_refuses_missing_frames_deleted_topics_and_wrong_epoch(
    backend: Backend, log3: Head
) -> None:
    # a frame key that does not exist: refused, and no ghost frame item appears
    assert not backend.tail.commit_delete(_delete(log3, [FrameDelete(5, (5,), 10, 0)], 1, 10, None))
    assert _no_frame(backend, log3, 5)
    assert not backend.tail.commit_delete(
        _delete(dataclasses.replace(log3, epoch=2), [], 1, 10, None)
    )
    assert backend.heads.mark_deleted(log3, if_empty=False)
    assert not backend.tail.commit_delete(_delete(log3, [], 1, 10, None))
    assert not backend.tail.commit_delete(_delete(Head("ghost", 1), [], 0, 0, 2))
    assert backend.heads.get("ghost") is None


# --- DynamoDB limits (real on DynamoDB Local; moto may not enforce them) ----------------------

# Does the backend enforce the 400 KB item limit? (moto 5.2 does; recorded so a moto upgrade
# that changes it shows up here rather than as silent leniency.)
ENFORCES_ITEM_SIZE = {"memory": True, "moto": True, "ddblocal": True, "motoserver": True}
# Does it refuse a transaction of more than 100 items?
ENFORCES_TXN_ITEMS = {"memory": True, "moto": True, "ddblocal": True, "motoserver": True}
LONG_TOPIC = "t" + "x" * 254  # the longest valid topic name (255)


_NONE = 0xFFFFFFFF
_ENTRY_BYTES = 20  # <IIIII: data, meta, node, tag lengths and size (engine/records.py)


def _raw_blob(total: int) -> bytes:
    """An uncompressed frame blob of exactly `total` bytes holding one record whose data is
    a JSON string (built by hand, so the format is pinned here too)."""
    data = b'"' + b"y" * (total - 1 - _ENTRY_BYTES - 2) + b'"'
    entry = struct.pack("<IIIII", len(data), _NONE, _NONE, _NONE, 10)
    blob = bytes([FRAME_FORMAT_RAW]) + entry + data
    assert len(blob) == total
    return blob


def test_frame_just_under_the_spill_threshold_fits_an_item(backend: Backend) -> None:
    # The largest spill threshold the settings accept must still fit a DynamoDB item.
    threshold = MAX_INLINE_FRAME_BYTES
    assert backend.settings.spill_threshold_bytes <= threshold
    head = create_topic(backend, LONG_TOPIC, 1)
    blob = _raw_blob(threshold)  # the largest blob the engine keeps inline
    after = append(backend, head, recs(1), blob=blob, tags=[TagEntry("z" * 256, 2, (2,))])
    frame = backend.tail.get_frames(after, [2])[2]
    assert len(frame.records[0].data) == threshold - 1 - _ENTRY_BYTES - 2
    # and the frame stays within the limit after record deletes grow it
    assert backend.tail.commit_delete(_delete(after, [FrameDelete(2, (2,), 10, 0)], 1, 10, 3))


def _assert_refused_as_invalid(b: Backend, err: StorageUnavailable) -> None:
    # storage refused the request itself (DynamoDB's ValidationException), so no attempt of
    # it ever applied; the adapters raise from the ClientError (the fakes have none)
    assert err.detail == {"aws_error": "ValidationException"}
    if b.clients is not None:
        cause = err.__cause__
        assert isinstance(cause, ClientError)
        assert cause.response["Error"]["Code"] == "ValidationException"


def test_oversized_inline_frame_is_rejected(backend: Backend) -> None:
    head = create_topic(backend, "t", 1)
    commit = append_commit(head, recs(1), blob=_raw_blob(420_000))
    if not ENFORCES_ITEM_SIZE[backend.name]:
        backend.tail.commit_append(commit)
        return
    with pytest.raises(StorageUnavailable) as err:
        backend.tail.commit_append(commit)
    _assert_refused_as_invalid(backend, err.value)
    assert backend.heads.get("t") == head
    assert _no_frame(backend, head, 2)


def test_transaction_of_100_items_commits(backend: Backend) -> None:
    # head + frame + 98 tag entries = 100 items, DynamoDB's transaction limit
    tags = [TagEntry(f"tag{i:03d}", 98, (i + 1,)) for i in range(98)]
    backend.tail.commit_append(creating_commit("t", recs(98), tags=tags))
    head = backend.heads.get("t")
    assert head is not None and head.head_seq == 98
    assert len(backend.tail.tag_lookup(head, "tag", True)) == 98


def test_transaction_of_101_items_is_refused(backend: Backend) -> None:
    tags = [TagEntry(f"tag{i:03d}", 99, (i + 1,)) for i in range(99)]
    commit = creating_commit("t", recs(99), tags=tags)
    if not ENFORCES_TXN_ITEMS[backend.name]:
        backend.tail.commit_append(commit)
        return
    with pytest.raises(StorageUnavailable) as err:
        backend.tail.commit_append(commit)
    _assert_refused_as_invalid(backend, err.value)
    assert backend.heads.get("t") is None


def test_guarded_append_is_conditional_on_ext_and_sets_it(backend: Backend) -> None:
    head = create_topic(backend, "g", 1)
    assert head.ext == ""
    # GIVEN an append that expects no ext yet and sets one: serialized, the head moves with
    # the frame (no reservation), so its seqs and its ext are never seen apart
    commit = dataclasses.replace(append_commit(head, recs(1)), ext_expected="", ext_new='{"a":1}')
    backend.tail.commit_append(commit)
    after = backend.heads.get("g")
    assert after is not None and after.ext == '{"a":1}' and after.head_seq == 2
    assert (after.count, after.bytes, after.appended) == (2, 2 * REC_SIZE, 2)
    # WHEN the ext changes alone (a close, say) under a writer that read it before
    assert backend.heads.put_ext(after, '{"a":2}')
    stale = dataclasses.replace(
        append_commit(after, recs(1, start=2)), ext_expected='{"a":1}', ext_new='{"a":3}'
    )
    # THEN that writer's append is a conflict and writes nothing, though head_seq is unchanged
    with pytest.raises(AppendRejected) as rej:
        backend.tail.commit_append(stale)
    assert rej.value.head_conflict and not rej.value.slot_lost
    now = backend.heads.get("g")
    assert now is not None and now.ext == '{"a":2}' and now.head_seq == 2
    assert _no_frame(backend, now, 3)
    # AND a reservation judged on the old ext is refused too
    with pytest.raises(AppendRejected) as rej:
        reserve(backend, after, recs(1), ext='{"a":1}')
    assert rej.value.current_head == now


def test_an_ext_change_commits_only_with_nothing_reserved_since_its_read(
    backend: Backend,
) -> None:
    """Everyone who judged on the old ext reserved before the change: a reservation after
    the writer's read refuses the change (it reads again and retries)."""
    head = create_topic(backend, "o", 1)
    reserve(backend, head, recs(1), ext="")  # seq 2: another writer, judged on ""
    change = dataclasses.replace(append_commit(head, recs(1)), ext_expected="", ext_new='{"c":1}')
    with pytest.raises(AppendRejected) as rej:
        backend.tail.commit_append(change)
    assert rej.value.head_conflict and not rej.value.slot_lost
    now = backend.heads.get("o")
    assert now is not None and now.ext == "" and now.head_seq == 2
    # on the head as it is now, the same change commits at seq 3, with the caps it checks
    capped = dataclasses.replace(
        append_commit(now, recs(1)), ext_expected="", ext_new='{"c":1}', max_count=1
    )
    with pytest.raises(AppendRejected):
        backend.tail.commit_append(capped)  # count 2 > 1
    backend.tail.commit_append(dataclasses.replace(capped, max_count=2))
    done = backend.heads.get("o")
    assert done is not None and (done.ext, done.head_seq, done.count) == ('{"c":1}', 3, 3)


def test_put_ext_needs_the_head_seq_and_ext_as_read(backend: Backend) -> None:
    head = create_topic(backend, "p", 1)
    assert backend.heads.put_ext(head, '{"v":1}')
    assert not backend.heads.put_ext(head, '{"v":2}')  # ext moved since `head` was read
    cur = backend.heads.get("p")
    assert cur is not None and cur.ext == '{"v":1}'
    moved = append(backend, cur, recs(1, start=1))
    assert not backend.heads.put_ext(cur, '{"v":3}')  # head_seq moved
    assert backend.heads.put_ext(moved, '{"v":3}')
    assert backend.heads.mark_deleted(moved, if_empty=False)
    gone = backend.heads.get("p")
    assert gone is not None and gone.deleted
    assert not backend.heads.put_ext(gone, '{"v":4}')  # no writes to a deleted marker
    # the ext round-trips through a create (a recreated stream starts with its own)
    fresh = dataclasses.replace(new_head("p", epoch=2), ext='{"v":5}')
    assert backend.heads.create(fresh, replacing=gone)
    assert backend.heads.get("p") == fresh


def test_dynamo_items_carry_a_ttl_and_a_spill_keeps_no_inline_copy(aws_backend: Backend) -> None:
    # The DynamoDB item layout only (the fakes keep values, not items, and judge expiry by
    # the `now` each call is given): an idempotency key carries DynamoDB's TTL attribute in
    # epoch seconds, past its expiry, and a spilled frame's item holds the pointer only.
    head = create_topic(aws_backend, "t", 1)
    aws_backend.blobs.put("spill/t/1/2-x", encode_records(recs(1)))
    after = append(
        aws_backend,
        head,
        recs(1),
        blob=None,
        spill_key="spill/t/1/2-x",
        idem=[IdemEntry("k1", 2, 2, T0 + 60_000)],
    )
    idem = _idem_item(aws_backend, after, "k1")
    assert idem is not None and idem["ttl"] == {"N": str((T0 + 60_000) // 1000 + 1)}
    frame = _frame_item(aws_backend, after, 2)
    assert frame is not None and frame["s3"] == {"S": "spill/t/1/2-x"} and "rb" not in frame
