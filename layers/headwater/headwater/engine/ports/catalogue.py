"""The per-stream index catalogue port (index/; storage/index_catalogue.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Catalogue:
    """What is indexed: `segments` sealed segments through seq `covered_through`, built for
    plan `generation`, `bytes` of companions at rest; `updated_ms` when it last moved;
    `runs` the (first seq, last seq, last segment's object name) of each lexicon run."""

    generation: str
    covered_through: int = 0
    segments: int = 0
    bytes: int = 0
    updated_ms: int = 0
    runs: tuple[tuple[int, int, str], ...] = ()


class IndexCatalogueStore(Protocol):
    """The per-stream index catalogue (storage/index_catalogue.py): coverage moves by a
    conditional write from exactly what the writer read."""

    def get(self, topic: str, epoch: int) -> Catalogue | None: ...
    def publish(
        self, topic: str, epoch: int, expected: Catalogue | None, new: Catalogue
    ) -> bool: ...
    def delete(self, topic: str, epoch: int) -> None: ...
