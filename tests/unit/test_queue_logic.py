"""The pure parts of the queue engine: cohort shares, counters, the claimed[] rendering."""

from __future__ import annotations

import json

import pytest

from headwater.engine.ports import Head
from headwater.engine.ports.queue import Lease, QueueState
from headwater.engine.queue_claims import _share
from headwater.engine.queue_core import Job, clamp_lease_ms, counters
from headwater.engine.records import StoredRecord


@pytest.mark.parametrize(
    ("available", "wants", "cohort", "expected"),
    [
        (10, [4, 4, 4], False, [4, 4, 2]),  # greedy: first arrivals drain the head
        (6, [4, 4, 4], True, [2, 2, 2]),  # cohort: an even split
        (12, [4, 4, 4], True, [4, 4, 4]),  # enough for everyone
        (6, [8, 4], True, [4, 2]),  # proportional to each max
        (5, [1, 1, 1, 1, 1, 1, 1], True, [1, 1, 1, 1, 1, 0, 0]),  # remainders round-robin
        (0, [3, 3], True, [0, 0]),
        (7, [3, 3, 3], True, [3, 2, 2]),
    ],
)
def test_share(available: int, wants: list[int], cohort: bool, expected: list[int]) -> None:
    got = _share(available, wants, cohort)
    assert got == expected
    assert sum(got) == min(available, sum(wants))
    assert all(0 <= g <= w for g, w in zip(got, wants, strict=True))


def test_counters() -> None:
    now = 1_000
    head = Head(topic="q", epoch=1, head_seq=10, count=8)
    leases = [
        Lease(1, "w1", "lease_1", now + 5, 1, 1, 1),  # held
        Lease(2, "w1", "lease_2", now - 1, 1, 2, 1),  # expired (now > deadline): claimable
        Lease(5, "w1", "lease_5", now, 1, 2, 1),  # at its deadline: still held
        Lease(3, None, "lease_3", now, 2, 3, 1),  # released, visible from now: claimable
        Lease(4, None, "lease_4", now + 100, 2, 4, 1),  # released with a delay: neither
    ]
    c = counters(head, QueueState(cursor=6, dead_lettered=3, leases=leases, outstanding=5), now)
    # fresh = live records above the cursor: min(count - outstanding, head - cursor) = 3
    assert (c.ready, c.in_flight, c.dead_lettered) == (2 + 3, 2, 3)
    # records deleted above the cursor (count is lower) shrink the fresh part
    low = Head(topic="q", epoch=1, head_seq=10, count=5)
    assert counters(low, QueueState(6, 0, leases, 5), now).ready == 2 + 0


def test_counters_from_a_partial_load() -> None:
    # A load "at" a time lists only released and expired leases; the held ones are counted.
    now = 1_000
    head = Head(topic="q", epoch=1, head_seq=10, count=10)
    listed = [
        Lease(2, "w1", "lease_2", now - 1, 1, 2, 1),  # expired
        Lease(4, None, "lease_4", now + 100, 2, 4, 1),  # delayed nack
    ]
    c = counters(head, QueueState(cursor=6, dead_lettered=0, leases=listed, outstanding=6), now)
    # 6 outstanding = 1 expired + 1 delayed + 4 held; fresh = min(10 - 6, 10 - 6) = 4
    assert (c.ready, c.in_flight) == (1 + 4, 4)


def test_clamp_lease_ms() -> None:
    assert [clamp_lease_ms(v) for v in (0, 100, 5000, 10**12)] == [100, 100, 5000, 86_400_000]


def test_job_render_splices_lease_fields() -> None:
    rec = StoredRecord(7, 123, b'{"a":1}', None, b'"t1"', b'{"m":2}', 30)
    job = Job(7, "lease_ab", 999, 2, rec)
    body = json.loads(job.render())
    assert body == {
        "$seq": 7,
        "$ts": 123,
        "$tag": "t1",
        "data": {"a": 1},
        "meta": {"m": 2},
        "lease_id": "lease_ab",
        "deadline": 999,
        "deliveries": 2,
    }
    framed = json.loads(job.render(b'"jobs"'))
    assert framed["topic"] == "jobs" and framed["$seq"] == 7
