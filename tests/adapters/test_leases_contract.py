"""LeaseStore contract (DynamoLeaseStore, the in-memory fake), run against every backend in
conftest.BACKENDS. DynamoDB Local checks what moto may not: the condition and update
expressions, the transaction item limits, and the cancellation reasons the engine reads
positions from."""

from __future__ import annotations

import pytest
from adapter_helpers import T0, Backend, creating_commit, recs

from headwater.engine.ports import CONFLICT, Head
from headwater.engine.ports.queue import Guard, Lease, LeaseCommit, LeaseStore, queue_key

pytestmark = pytest.mark.adapters

QK = queue_key("jobs", 1)


def lease(seq: int, node: str | None = "w1", lid: str = "lease_a", due: int = T0 + 1000) -> Lease:
    # the test topic's five records are one frame ending at seq 5, 10 bytes each
    return Lease(seq, node, lid, due, 1, 5, 10)


def setup(backend: Backend) -> tuple[LeaseStore, Head]:
    backend.tail.commit_append(creating_commit("jobs", recs(5), config={"type": "queue"}))
    head = backend.heads.get("jobs")
    assert head is not None
    return backend.leases, head


def test_fresh_claim_moves_the_cursor_and_creates_leases(backend: Backend) -> None:
    store, _ = setup(backend)
    empty = store.load(QK)
    assert (empty.cursor, empty.dead_lettered, empty.leases, empty.outstanding) == (0, 0, [], 0)
    assert store.claim(QK, (0, 2), [lease(1), lease(2, lid="lease_b")], []) == set()
    state = store.load(QK)
    assert state.cursor == 2
    assert state.leases == [lease(1), lease(2, lid="lease_b")]
    # a second pass that read cursor 0 loses: nothing it wrote stays
    assert store.claim(QK, (0, 3), [lease(3, node="w2")], []) == {0}
    assert store.load(QK) == state
    # from the cursor it read, it wins
    assert store.claim(QK, (2, 3), [lease(3)], []) == set()
    assert store.load(QK).cursor == 3


def test_reclaim_is_guarded_by_the_lease_seen(backend: Backend) -> None:
    store, _ = setup(backend)
    store.claim(QK, (0, 2), [lease(1), lease(2)], [])
    again = Lease(1, "w2", "lease_n", T0 + 5000, 2, 5, 10)
    stale = Guard(lease_id="lease_x", due=T0 + 1000)
    retimed = Guard(lease_id="lease_a", due=T0 + 999)  # the same lease, re-timed since
    seen = Guard(lease_id="lease_a", due=T0 + 1000)
    # positions for a reclaim-only transaction start at 1 (0 is the cursor's place)
    assert store.claim(QK, None, [], [(again, stale)]) == {1}
    assert store.claim(QK, None, [], [(again, retimed)]) == {1}
    assert store.claim(QK, None, [], [(again, seen)]) == set()
    assert store.load(QK).leases[0] == again
    # the same guard again fails: the lease changed under it
    assert store.claim(QK, None, [], [(Lease(1, "w3", "lease_z", 1, 3, 5, 10), seen)]) == {1}


def test_update_releases_and_extends_on_the_holder(backend: Backend) -> None:
    store, _ = setup(backend)
    store.claim(QK, (0, 2), [lease(1), lease(2)], [])
    # extend seq 1 (holder kept); release seq 2 (holder removed); the wrong node fails
    assert store.update(QK, [(1, Guard(node="w9"), T0 + 9, "w9")]) == {0}
    done = store.update(
        QK, [(1, Guard(node="w1"), T0 + 7000, "w1"), (2, Guard(node="w1"), T0 + 50, None)]
    )
    assert done == set()
    one, two = store.load(QK).leases
    assert (one.node, one.due) == ("w1", T0 + 7000)
    assert (two.node, two.due) == (None, T0 + 50)
    # a released lease is held by nobody: a fenced update on it fails
    assert store.update(QK, [(2, Guard(node="w1", lease_id="lease_a"), 1, None)]) == {0}


def test_complete_deletes_records_and_leases_atomically(backend: Backend) -> None:
    store, head = setup(backend)
    store.claim(QK, (0, 3), [lease(1), lease(2), lease(3, node="w2")], [])
    commit = LeaseCommit(
        QK,
        head,
        [(1, Guard(node="w1")), (3, Guard(node="w1"))],  # seq 3 is held by w2
        [(1, 1, 10), (1, 3, 10)],  # (frame key: its first seq, seq, size)
    )
    # positions: 0 head, 1 the frame, 2 and 3 the leases: only seq 3's lease fails
    assert store.complete(commit) == {3}
    assert [x.seq for x in store.load(QK).leases] == [1, 2, 3]
    after = backend.heads.get("jobs")
    assert after is not None and after.count == 5  # nothing was written
    ok = LeaseCommit(
        QK, head, [(1, Guard(node="w1")), (2, Guard(node="w1"))], [(1, 1, 10), (1, 2, 10)]
    )
    assert store.complete(ok) == set()
    after = backend.heads.get("jobs")
    assert after is not None
    assert (after.count, after.bytes, after.del_ver) == (3, head.bytes - 20, head.del_ver + 1)
    frame = backend.tail.get_frames(after, [1])[1]
    assert frame.deleted == frozenset({1, 2})
    assert [x.seq for x in store.load(QK).leases] == [3]
    # deleting an already deleted record fails on the frame (position 1): no double count
    store.claim(QK, (3, 4), [lease(4)], [])
    again = LeaseCommit(QK, after, [(4, Guard(node="w1"))], [(1, 1, 10)])
    assert store.complete(again) == {1}


def test_complete_dead_letter_counts_and_checks_the_topic(backend: Backend) -> None:
    store, head = setup(backend)
    store.claim(QK, (0, 1), [lease(1)], [])
    seen = Guard(lease_id="lease_a", due=T0 + 1000)
    assert store.complete(LeaseCommit(QK, head, [(1, seen)], [(1, 1, 10)], 1)) == set()
    assert store.load(QK).dead_lettered == 1
    # an orphan finish (no record) on a topic of another epoch fails on the head check
    store.claim(QK, (1, 2), [lease(2)], [])
    other = Head(topic="jobs", epoch=7)
    assert store.complete(LeaseCommit(QK, other, [(2, Guard(node="w1"))], [])) == {0}


def test_load_at_a_time_lists_only_claimable_and_released(backend: Backend) -> None:
    store, _ = setup(backend)
    held = lease(1, due=T0 + 1000)
    expired = lease(2, due=T0 - 1)
    at_deadline = lease(3, due=T0)  # held until now > deadline
    store.claim(QK, (0, 5), [held, expired, at_deadline, lease(4), lease(5)], [])
    store.update(QK, [(4, Guard(node="w1"), T0 + 50, None)])  # released, visible later
    state = store.load(QK, T0)
    assert (state.cursor, state.outstanding) == (5, 5)
    assert [x.seq for x in state.leases] == [2, 4]
    assert store.load(QK).outstanding == 5 and len(store.load(QK).leases) == 5
    got = store.get(QK, [5, 1, 9, 1])
    assert sorted(got) == [1, 5] and got[1] == held


def test_transaction_limit_and_clear(backend: Backend) -> None:
    store, _ = setup(backend)
    many = [Lease(s, "w1", f"lease_{s:x}", T0, 1, 5, 10) for s in range(1, 100)]
    assert store.claim(QK, (0, 99), many, []) == set()  # 100 items: the DynamoDB maximum
    assert len(store.load(QK).leases) == 99
    assert store.clear(QK) == 100
    cleared = store.load(QK)
    assert (cleared.cursor, cleared.leases) == (0, [])


def test_conflict_marker_is_not_a_position() -> None:
    assert CONFLICT < 0
