"""Engine request/result values (frozen, slotted)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from headwater.engine.records import NewRecord
from headwater.storage.ports import Head


@dataclass(frozen=True, slots=True)
class AppendRequest:
    records: list[NewRecord]
    idempotency_key: str | None = None
    create: bool | None = None
    config: dict[str, Any] | None = None  # validated patch, applied only on create


@dataclass(frozen=True, slots=True)
class AppendResult:
    first_seq: int
    last_seq: int
    head_seq: int
    created: bool
    deduped: bool


@dataclass(frozen=True, slots=True)
class DiffRequest:
    from_seq: int = 0
    limit: int = 256
    nodes: frozenset[str] = frozenset()
    include_tags: bool = False
    include_meta: bool = True
    wait_ms: int = 0
    max_bytes: int = 1 << 20
    # "eventual": a live reader may start from the head this process last saw (kept fresh
    # by commits and the HeadHub) instead of a strongly consistent head read.
    consistency: str = "strong"


@dataclass(frozen=True, slots=True)
class Tombstone:
    gap_from: int
    gap_to: int
    reason: str
    missed_estimate: int
    earliest_seq: int
    head_seq: int


@dataclass(frozen=True, slots=True)
class DiffResult:
    records: list[bytes]  # each a rendered JSON object (see StoredRecord.render)
    next_from_seq: int
    head: Head
    scanned: int
    tombstone: Tombstone | None = None

    @property
    def caught_up(self) -> bool:
        return self.next_from_seq >= self.head.head_seq


@dataclass(frozen=True, slots=True)
class TagMatch:
    value: str
    prefix: bool  # Glob "X*" → prefix "X"


@dataclass(frozen=True, slots=True)
class DeleteResult:
    deleted: int
    head: Head


@dataclass(frozen=True, slots=True)
class TopicPage:
    heads: list[Head]
    next_after: str | None
