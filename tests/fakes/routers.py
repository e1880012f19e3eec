"""In-memory RouterStore: routers of a MemoryAccount, one row per router holding its
definition, durable cursor, forwarded count and forwarding lease, written as
storage/routers.py writes the router's item: `put` keeps the cursor and the count, `advance`
is conditional on the cursor read, the lease is taken only when free, expired or already
the caller's. Every read is strong (the adapter's are consistent reads)."""

from __future__ import annotations

import dataclasses

from headwater.engine.ports.routers import RouterItem
from tests.fakes.storage import MemoryAccount


class MemoryRouterStore:
    def __init__(self, account: MemoryAccount) -> None:
        self._a = account

    def list_all(self) -> list[RouterItem]:
        with self._a.lock:
            return [self._a.routers[name] for name in sorted(self._a.routers)]

    def get(self, name: str) -> RouterItem | None:
        with self._a.lock:
            return self._a.routers.get(name)

    def put(self, item: RouterItem) -> None:
        with self._a.lock:
            old = self._a.routers.get(item.name)
            if old is None:  # a new router starts at the cursor given, nothing forwarded
                stored = dataclasses.replace(
                    item, forwarded_total=0, lease_owner=None, lease_expires_ms=0
                )
            else:  # the definition only: the cursor, the count and the lease stay
                stored = dataclasses.replace(
                    item,
                    cursor=old.cursor,
                    forwarded_total=old.forwarded_total,
                    lease_owner=old.lease_owner,
                    lease_expires_ms=old.lease_expires_ms,
                )
            self._a.routers[item.name] = stored

    def delete(self, name: str) -> bool:
        with self._a.lock:
            return self._a.routers.pop(name, None) is not None

    def advance(self, name: str, expected_cursor: int, cursor: int, forwarded: int) -> bool:
        with self._a.lock:
            old = self._a.routers.get(name)
            if old is None or old.cursor != expected_cursor:
                return False
            self._a.routers[name] = dataclasses.replace(
                old, cursor=cursor, forwarded_total=old.forwarded_total + forwarded
            )
            return True

    def acquire(self, name: str, owner: str, now_ms: int, ttl_ms: int) -> RouterItem | None:
        with self._a.lock:
            old = self._a.routers.get(name)
            if old is None:
                return None
            free = old.lease_owner is None or old.lease_owner == owner
            if not free and old.lease_expires_ms >= now_ms:
                return None
            new = dataclasses.replace(old, lease_owner=owner, lease_expires_ms=now_ms + ttl_ms)
            self._a.routers[name] = new
            return new

    def release(self, name: str, owner: str) -> bool:
        with self._a.lock:
            old = self._a.routers.get(name)
            if old is None or old.lease_owner != owner:
                return False
            self._a.routers[name] = dataclasses.replace(old, lease_owner=None, lease_expires_ms=0)
            return True
