"""The flag surface's own storage port (flags/service.py; storage/flag_slots.py)."""

from __future__ import annotations

from typing import Protocol


class ConnectionSlots(Protocol):
    """The per-token connection cap's storage (headwater.storage.flag_slots)."""

    def acquire(
        self, principal_id: str, cap: int, owner: str, now_ms: int, lease_ms: int
    ) -> int | None: ...
    def renew(
        self, principal_id: str, slot: int, owner: str, now_ms: int, lease_ms: int
    ) -> bool: ...
    def release(self, principal_id: str, slot: int, owner: str) -> None: ...
