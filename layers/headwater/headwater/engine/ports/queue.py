"""Work-queue ports (engine/queue.py; storage/leases.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from headwater.engine.ports import Head


@dataclass(frozen=True, slots=True)
class Lease:
    """A work-queue job handed out and not yet completed (spec §10). `node` is the holder,
    None once released by a nack; `due` is the deadline while held, the time it becomes
    claimable again once released. `frame`/`size` locate and size its record."""

    seq: int
    node: str | None
    lease_id: str
    due: int
    deliveries: int
    frame: int  # the key (first seq) of the tail frame holding the record
    size: int


@dataclass(frozen=True, slots=True)
class QueueState:
    cursor: int  # every seq <= cursor was handed out at least once
    dead_lettered: int
    # Ascending by seq: every outstanding lease, or (a load "at" a time) only those released
    # or expired by then; the rest are held.
    leases: list[Lease]
    outstanding: int  # all outstanding leases


@dataclass(frozen=True, slots=True)
class Guard:
    """What a lease write is conditional on: the exact lease seen (lease id and due), or the
    holder (node, plus the lease id when the caller fenced with one)."""

    lease_id: str | None = None
    due: int | None = None
    node: str | None = None


@dataclass(frozen=True, slots=True)
class LeaseCommit:
    """Jobs finished in one transaction: lease items deleted on their guards, the records
    still live deleted from the log (frame key: its first seq, seq, size), and a dead-letter
    count."""

    qkey: str
    head: Head
    leases: list[tuple[int, Guard]]
    records: list[tuple[int, int, int]]
    dead_lettered: int = 0
    # Read-back after a lost response (storage/leases.py): each lease's deadline as the
    # finisher saw it, and the engine clock when it sent the commit. A lease that is gone
    # although nobody else could have ended it yet (held by us, not yet expired) was ended
    # by an earlier attempt of this commit.
    held_until: dict[int, int] = field(default_factory=dict)
    now_ms: int = 0


class LeaseStore(Protocol):
    def load(self, qkey: str, at: int | None = None) -> QueueState: ...
    def get(self, qkey: str, seqs: Sequence[int]) -> dict[int, Lease]: ...
    def claim(
        self,
        qkey: str,
        cursor: tuple[int, int] | None,
        fresh: Sequence[Lease],
        reclaimed: Sequence[tuple[Lease, Guard]],
    ) -> set[int]: ...
    def update(
        self, qkey: str, changes: Sequence[tuple[int, Guard, int, str | None]]
    ) -> set[int]: ...
    def complete(self, c: LeaseCommit) -> set[int]: ...
    def clear(self, qkey: str) -> int: ...


def queue_key(topic: str, epoch: int) -> str:
    return f"q#{topic}#{epoch}"
