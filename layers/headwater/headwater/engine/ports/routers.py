"""Router ports (engine/routers.py; storage/routers.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class RouterItem:
    """A stored router (spec §6): its definition, durable cursor (last source seq handled)
    and forwarded count. `filter` is the validated tuple as given, or None. `lease_owner` /
    `lease_expires_ms` are the forwarding lease as last read (None / 0: nobody holds it)."""

    name: str
    source: str
    dest: str
    preserve_node: bool = True
    preserve_tag: bool = True
    create_dest: bool = True
    filter: tuple[str, ...] | None = None
    allow_cycle: bool = False
    guarantee: str = "at_least_once"
    cursor: int = 0
    forwarded_total: int = 0
    lease_owner: str | None = None
    lease_expires_ms: int = 0


class RouterStore(Protocol):
    def list_all(self) -> list[RouterItem]: ...  # strongly consistent, ordered by name
    def get(self, name: str) -> RouterItem | None: ...
    def put(self, item: RouterItem) -> None: ...  # definition only; keeps cursor and count
    def delete(self, name: str) -> bool: ...
    def advance(self, name: str, expected_cursor: int, cursor: int, forwarded: int) -> bool: ...
    # Forwarding lease: take (or renew) it if free, expired or already ours; returns the
    # router as stored after the write, or None if another owner holds it (or it is gone).
    def acquire(self, name: str, owner: str, now_ms: int, ttl_ms: int) -> RouterItem | None: ...
    def release(self, name: str, owner: str) -> bool: ...
