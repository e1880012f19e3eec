"""Node-local object-store request counters per stream (`_details.object_store_requests`).

Every S3 request the blob adapter makes for a stream's objects is counted here, by the
stream (the key's name component: keys are `<prefix><base32 name>/<epoch>/...`) and by
artifact: `segments` (sealed log segments), `indexes` (their index companions), `schema`
(schema registry revisions) and `wal` (spilled tail frames). PUTs count as puts; GETs (whole
or ranged) as reads. The counts are this process's since it started, as the protocol asks
("node-local"): on Lambda each instance counts its own. A bounded map: past MAX_STREAMS
streams it starts over (it is a diagnostic, not a bill)."""

from __future__ import annotations

import threading
import time
from typing import Any, Final

from headwater.engine.ports import (
    COMPANION_SUFFIX,
    INDEX_PREFIX,
    LEXICON_RUN_SUFFIX,
    REGISTRY_PREFIX,
    SEGMENT_PREFIX,
    SPILL_PREFIX,
)
from headwater.names import object_key_component

ARTIFACTS: Final = ("segments", "indexes", "schema", "wal")
_PREFIXES: Final = (
    (SEGMENT_PREFIX, "segments"),
    (INDEX_PREFIX, "indexes"),
    (REGISTRY_PREFIX, "schema"),
    (SPILL_PREFIX, "wal"),
)
MAX_STREAMS: Final = 4096
PUT, READ = 0, 1


def classify(key: str) -> tuple[str, str] | None:
    """(stream name component, artifact) of an object key, None for other objects."""
    for prefix, artifact in _PREFIXES:
        if key.startswith(prefix):
            component, sep, _ = key[len(prefix) :].partition("/")
            if not sep or not component:
                return None
            if artifact == "segments" and key.endswith((COMPANION_SUFFIX, LEXICON_RUN_SUFFIX)):
                artifact = "indexes"
            return component, artifact
    return None


class RequestCounts:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by: dict[str, dict[str, list[int]]] = {}
        self.since_ms = int(time.time() * 1000)

    def note(self, key: str, kind: int) -> None:
        got = classify(key)
        if got is None:
            return
        component, artifact = got
        with self._lock:
            per = self._by.get(component)
            if per is None:
                if len(self._by) >= MAX_STREAMS:
                    self._by.clear()
                per = self._by[component] = {}
            counts = per.setdefault(artifact, [0, 0])
            counts[kind] += 1

    def of(self, topic: str) -> dict[str, Any]:
        """The counters of one stream (its engine topic), in the `_details` shape."""
        with self._lock:
            per = {a: list(c) for a, c in self._by.get(object_key_component(topic), {}).items()}
        by = {
            a: {"puts": per.get(a, [0, 0])[PUT], "reads": per.get(a, [0, 0])[READ]}
            for a in ARTIFACTS
        }
        return {
            "scope": "node",
            "since": _iso(self.since_ms),
            "puts": sum(v["puts"] for v in by.values()),
            "reads": sum(v["reads"] for v in by.values()),
            "by_artifact": by,
        }


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


COUNTS: Final = RequestCounts()  # this process's
