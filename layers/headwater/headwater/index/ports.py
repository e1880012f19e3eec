"""What the stream indexer (index/build.py) and the lexicon-run compaction (index/runs.py)
need of the stores: the segment list, the object store and the index catalogue, as
Protocols the storage adapters (storage/segments.py, storage/blobs.py,
storage/index_catalogue.py) and the tests' fakes satisfy. Their own module, so build and
runs both import them and neither imports the other for its types."""

from __future__ import annotations

from typing import Protocol

from headwater.engine.ports import Head, SegmentItem
from headwater.engine.ports.catalogue import Catalogue


class SegmentLister(Protocol):
    """The segment port's `after` (storage/segments.py)."""

    def after(self, head: Head, after_seq: int, limit: int) -> list[SegmentItem]: ...


class BlobPort(Protocol):
    def get(self, key: str) -> bytes: ...
    def put(self, key: str, body: bytes) -> None: ...


class CataloguePort(Protocol):
    def get(self, topic: str, epoch: int) -> Catalogue | None: ...
    def publish(
        self, topic: str, epoch: int, expected: Catalogue | None, new: Catalogue
    ) -> bool: ...
