"""Tiering adapters (segment items, frame summaries, evict/trim commits, deletes of sealed
seqs), run against every backend in conftest.BACKENDS."""

from __future__ import annotations

import dataclasses

import pytest
from adapter_helpers import T0, Backend, build_log

from headwater.engine.ports import (
    DeleteCommit,
    EvictCommit,
    FrameDelete,
    Head,
    SealCommit,
    SegmentItem,
    SegmentStore,
)

pytestmark = pytest.mark.adapters


def _segment(first: int, last: int, **kw: object) -> SegmentItem:
    base = dict(
        first_seq=first,
        last_seq=last,
        key=f"segments/x/1/{first}-{last}",
        index=b"\x01\x02\x00\xff",
        count=last - first + 1,
        bytes=10 * (last - first + 1),
        min_ts=T0,
        max_ts=T0 + 5,
        created_ms=T0 + 9,
    )
    base.update(kw)
    return SegmentItem(**base)  # type: ignore[arg-type]


def _store(b: Backend) -> SegmentStore:
    return b.segments


def _head(b: Backend, topic: str) -> Head:
    head = b.heads.get(topic)
    assert head is not None
    return head


def test_a_seal_commits_once_per_head_and_segments_list_in_order(backend: Backend) -> None:
    head = build_log(backend, "s", [3, 3, 4])
    store = _store(backend)
    seg = _segment(1, 6, deleted=frozenset({2}), deleted_count=1, deleted_bytes=10)
    assert store.commit_seal(SealCommit(head, seg, 60))
    # The same head again (another sealer that read it): refused, nothing written twice.
    assert not store.commit_seal(SealCommit(head, _segment(1, 10), 100))
    after = _head(backend, "s")
    assert after.sealed_through == 6
    assert after.unsealed_bytes == head.unsealed_bytes - 60
    assert store.commit_seal(SealCommit(after, _segment(7, 10), 40))
    items = store.after(_head(backend, "s"), 0, 10)
    assert [(i.first_seq, i.last_seq) for i in items] == [(1, 6), (7, 10)]
    assert items[0] == seg
    assert [i.last_seq for i in store.after(after, 6, 10)] == [10]
    assert [i.last_seq for i in store.after(after, 5, 1)] == [6]
    # A record delete in between (dv moved) also refuses a seal made from the older head.
    stale = _head(backend, "s")
    assert backend.tail.commit_delete(
        DeleteCommit("s", 1, stale.del_ver, [], 0, 0, 2, expected_sealed=stale.sealed_through)
    )
    assert not store.commit_seal(SealCommit(stale, _segment(11, 12), 0))
    store.delete_items(stale, [6])
    assert [i.last_seq for i in store.after(stale, 0, 10)] == [10]


def test_deletes_mark_sealed_seqs_on_the_segment_item(backend: Backend) -> None:
    head = build_log(backend, "d", [5])
    store = _store(backend)
    assert store.commit_seal(SealCommit(head, _segment(1, 5), 50))
    head = _head(backend, "d")
    mark = FrameDelete(5, (2, 4), 20, 0)
    # A delete planned before the seal (sealed_through 0) is refused: it would mark the
    # tail frame, which readers no longer consult.
    assert not backend.tail.commit_delete(
        DeleteCommit("d", 1, head.del_ver, [mark], 2, 20, None, expected_sealed=0)
    )
    assert backend.tail.commit_delete(
        DeleteCommit("d", 1, head.del_ver, [], 2, 20, None, expected_sealed=5, segments=[mark])
    )
    (item,) = store.after(head, 0, 10)
    assert (item.deleted, item.deleted_count, item.deleted_bytes) == (frozenset({2, 4}), 2, 20)
    after = _head(backend, "d")
    assert (after.count, after.bytes, after.del_ver) == (3, 30, head.del_ver + 1)
    # Marks are conditional on the item's delete count, like frames.
    assert not backend.tail.commit_delete(
        DeleteCommit("d", 1, after.del_ver, [], 1, 10, None, expected_sealed=5, segments=[mark])
    )


def test_frame_summaries_evict_and_trim(backend: Backend) -> None:
    head = build_log(backend, "e", [2, 3, 4])
    summaries = backend.tail.frame_summaries(head, 0, 9, 100)
    assert [(f.first_seq, f.last_seq, f.bytes) for f in summaries] == [
        (1, 2, 20),
        (3, 5, 30),
        (6, 9, 40),
    ]
    assert [f.last_seq for f in backend.tail.frame_summaries(head, 2, 5, 100)] == [5]
    assert [f.last_seq for f in backend.tail.frame_summaries(head, 0, 9, 1)] == [2]
    commit = EvictCommit(head, 6, 6, 5, 50, 50, ((5, "cap"),))
    assert backend.tail.commit_evict(commit)
    assert not backend.tail.commit_evict(commit)  # earliest_seq moved: the head changed
    after = _head(backend, "e")
    assert (after.earliest_seq, after.evict_floor, after.count, after.bytes) == (6, 6, 4, 40)
    assert after.evictions == ((5, "cap"),)
    assert after.unsealed_bytes == head.unsealed_bytes - 50
    backend.tail.delete_frames(after, [1, 3])  # frames are keyed by their first seq
    # the chain stops where nothing stands; every item in the span is there to delete
    assert backend.tail.frame_summaries(after, 0, 9, 100) == []
    assert [f.last_seq for f in backend.tail.frame_summaries(after, 5, 9, 100)] == [9]
    assert [f.last_seq for f in backend.tail.frame_summaries(after, 0, 9, 100, every=True)] == [9]
    assert backend.tail.set_trimmed(after, 5)
    assert not backend.tail.set_trimmed(after, 7)  # trimmed_through moved since
    assert _head(backend, "e").trimmed_through == 5
    assert backend.tail.set_trimmed(dataclasses.replace(after, trimmed_through=5), 9)
