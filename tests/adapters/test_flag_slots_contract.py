"""ConnectionSlots contract (DynamoFlagSlots, the in-memory fake), run against every backend
in conftest.BACKENDS: a token's `cap` connection slots, each held by one owner until its
lease expires, renewed and released only by that owner. Times come from the wall clock: the
items carry a DynamoDB TTL an hour past their lease, and DynamoDB Local deletes expired
items."""

from __future__ import annotations

import time

import pytest
from adapter_helpers import Backend

pytestmark = pytest.mark.adapters

LEASE = 10_000


def test_a_token_holds_at_most_cap_slots(backend: Backend) -> None:
    slots, now = backend.flag_slots, int(time.time() * 1000)
    got = {slots.acquire("tok", 3, f"o{i}", now, LEASE) for i in range(3)}
    assert got == {0, 1, 2}
    assert slots.acquire("tok", 3, "o4", now, LEASE) is None
    assert slots.acquire("other", 3, "o4", now, LEASE) is not None  # per token


def test_an_expired_lease_frees_its_slot_and_only_the_owner_keeps_it(backend: Backend) -> None:
    slots, now = backend.flag_slots, int(time.time() * 1000)
    slot = slots.acquire("tok", 1, "a", now, LEASE)
    assert slot == 0
    assert slots.renew("tok", 0, "a", now + 5_000, LEASE)  # held to now + 15 s
    assert slots.acquire("tok", 1, "b", now + 12_000, LEASE) is None
    assert not slots.renew("tok", 0, "b", now, LEASE)
    assert slots.acquire("tok", 1, "b", now + 15_001, LEASE) == 0  # expired: b takes it
    assert not slots.renew("tok", 0, "a", now + 15_002, LEASE)  # a lost it
    slots.release("tok", 0, "a")  # not a's: nothing happens
    assert slots.acquire("tok", 1, "c", now + 15_003, LEASE) is None
    slots.release("tok", 0, "b")
    assert slots.acquire("tok", 1, "c", now + 15_004, LEASE) == 0
