"""Read side of the rollup Glue job (glue_jobs/rollup): the manifest and a topic's minute or
hour windows, over the BlobStore port. The job writes every rollup object before the manifest
that points at them, so whatever manifest is read, its objects exist."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from headwater.engine.ports import BlobStore

DEFAULT_PREFIX = "rollups/v1/"
MANIFEST_NAME = "manifest.json"
GRANULARITY_MS = {"minute": 60_000, "hour": 3_600_000}


@dataclass(frozen=True, slots=True)
class TopicEntry:
    epoch: int
    through_seq: int
    records: int
    keys: dict[str, str]  # granularity -> object key
    # The history the rollup was computed from (catalogue mode): epoch, del_ver,
    # earliest_seq, evict_floor. None in listing mode.
    state: dict[str, int] | None = None
    sentiment: str | None = None  # key of the dashboard's sentiment rollup, if computed


@dataclass(frozen=True, slots=True)
class Manifest:
    generated_at: int
    segments: int
    topics: dict[str, TopicEntry]


@dataclass(frozen=True, slots=True)
class TopicRollups:
    epoch: int
    through_seq: int
    generated_at: int
    windows: list[dict[str, Any]]


def _manifest(raw: bytes) -> Manifest:
    doc = json.loads(raw)
    topics = {
        name: TopicEntry(
            epoch=int(t["epoch"]),
            through_seq=int(t["through_seq"]),
            records=int(t.get("records", 0)),
            keys={g: str(t[g]) for g in GRANULARITY_MS if g in t},
            state={k: int(v) for k, v in t["state"].items()} if t.get("state") else None,
            sentiment=str(t["sentiment"]) if t.get("sentiment") else None,
        )
        for name, t in doc.get("topics", {}).items()
    }
    return Manifest(int(doc["generated_at"]), int(doc.get("segments", 0)), topics)


def overlaps(window_start: int, size_ms: int, from_ms: int | None, to_ms: int | None) -> bool:
    """Whether [window_start, window_start + size_ms) overlaps [from_ms, to_ms)."""
    if from_ms is not None and window_start + size_ms <= from_ms:
        return False
    return to_ms is None or window_start < to_ms


class RollupReader:
    def __init__(self, blobs: BlobStore, prefix: str = DEFAULT_PREFIX) -> None:
        self._blobs = blobs
        self._prefix = prefix

    def manifest(self) -> Manifest | None:
        raw = self._blobs.find(self._prefix + MANIFEST_NAME)
        return None if raw is None else _manifest(raw)

    def topic(
        self,
        topic: str,
        granularity: str,
        *,
        from_ms: int | None = None,
        to_ms: int | None = None,
        epoch: int | None = None,
    ) -> TopicRollups | None:
        """The topic's windows of `granularity` overlapping [from_ms, to_ms), or None when no
        rollup covers it yet (no manifest, topic absent, or `epoch` given and not the one
        rolled up: a recreated topic's old rollups describe its deleted incarnation)."""
        size_ms = GRANULARITY_MS[granularity]
        manifest = self.manifest()
        entry = manifest.topics.get(topic) if manifest is not None else None
        if manifest is None or entry is None or granularity not in entry.keys:
            return None
        if epoch is not None and entry.epoch != epoch:
            return None
        raw = self._blobs.find(entry.keys[granularity])
        windows: list[dict[str, Any]] = json.loads(raw) if raw is not None else []
        return TopicRollups(
            epoch=entry.epoch,
            through_seq=entry.through_seq,
            generated_at=manifest.generated_at,
            windows=[
                w for w in windows if overlaps(int(w["window_start"]), size_ms, from_ms, to_ms)
            ],
        )
