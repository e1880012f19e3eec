"""In-memory ConnectionSlots: the per-token connection slots of `/api/v1/events` in a
MemoryAccount, answering as storage/flag_slots.py does (a slot is taken when absent or its
lease expired; renewed and released only by its owner)."""

from __future__ import annotations

import random

from tests.fakes.storage import MemoryAccount


class MemoryFlagSlots:
    def __init__(self, account: MemoryAccount) -> None:
        self._a = account

    def acquire(
        self, principal_id: str, cap: int, owner: str, now_ms: int, lease_ms: int
    ) -> int | None:
        with self._a.lock:
            slots = self._a.flag_slots.setdefault(principal_id, {})
            start = random.randrange(cap) if cap > 0 else 0
            for i in range(cap):
                slot = (start + i) % cap
                held = slots.get(slot)
                if held is None or held[1] < now_ms:
                    slots[slot] = (owner, now_ms + lease_ms)
                    return slot
            return None

    def renew(self, principal_id: str, slot: int, owner: str, now_ms: int, lease_ms: int) -> bool:
        with self._a.lock:
            slots = self._a.flag_slots.get(principal_id, {})
            held = slots.get(slot)
            if held is None or held[0] != owner:
                return False
            slots[slot] = (owner, now_ms + lease_ms)
            return True

    def release(self, principal_id: str, slot: int, owner: str) -> None:
        with self._a.lock:
            slots = self._a.flag_slots.get(principal_id, {})
            held = slots.get(slot)
            if held is not None and held[0] == owner:
                del slots[slot]
