"""Stream and server inspection (protocol §7B): ``_routing_keys``, ``_index_status``,
``_details``, ``/v1/server/_details`` and ``/v1/server/_mem``.

``_routing_keys`` answers from the lexicon runs and the segments' index companions where they
are current and scans the rest; ``_index_status`` reports coverage from the index catalogue.
Fields of the reference that describe Bun/SQLite internals (heap,
SQLite allocator, forced GC, mmap'd files) are reported as null or zero (see
docs/durable-streams.md)."""

from __future__ import annotations

import bisect
import hashlib
import json
import os
import resource
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final, Protocol

from headwater import allocator
from headwater.durable import profiles
from headwater.durable.offsets import encode_offset
from headwater.durable.scan import Coverage, Deadline, SearchError, monotonic, scan
from headwater.durable.service import FILTER_SCAN_CAP, DurableStreams, payload_bytes
from headwater.durable.state import StreamState, name_of
from headwater.engine.ports import Head, SegmentItem
from headwater.engine.ports.catalogue import Catalogue

ROUTING_DEFAULT_LIMIT: Final = 100
ROUTING_MAX_LIMIT: Final = 500
ROUTING_TIMEOUT_MS: Final = 3000
ROUTING_SCAN_CAP: Final = FILTER_SCAN_CAP  # payload bytes one page may examine
_STARTED = time.time()


# --------------------------------------------------------------------------- routing keys
class KeyRun(Protocol):
    """A lexicon run as a page of routing keys reads it (index/runs.py's LexiconRun): the
    sorted distinct keys of a run of consecutive sealed segments, usable for listing while
    the stream's segments it spans are still exactly the ones it was built over."""

    @property
    def first_seq(self) -> int: ...

    @property
    def keys(self) -> Sequence[str]: ...

    def listable(self, by_first: dict[int, SegmentItem]) -> bool: ...


class KeyIndex(Protocol):
    """The routing keys a sealed segment's index companion holds (None: no usable one), and
    the lexicon run over it (None: none); index/reader.py's StreamIndex. Typed here, so
    durable sits below the index and never imports it."""

    async def keys_of(self, seg: SegmentItem) -> Sequence[str] | None: ...

    async def run_for(self, seg: SegmentItem) -> KeyRun | None: ...


class _Page:
    """The first `size` distinct keys (in order) greater than `after` seen so far: a page
    of routing keys plus one, to tell whether a next page exists."""

    def __init__(self, after: str | None, size: int) -> None:
        self.after, self.size = after, size
        self.keys: set[str] = set()
        self.bound: str | None = None  # the largest kept key once the page is full

    def add(self, key: str) -> None:
        if (self.after is not None and key <= self.after) or key in self.keys:
            return
        if self.bound is not None and key >= self.bound:
            return
        self.keys.add(key)
        if len(self.keys) >= 2 * self.size:  # trim in batches: sorting per key is quadratic
            self._trim()

    def add_sorted(self, keys: Sequence[str]) -> None:
        """A segment's key list (sorted): only its first `size` keys past `after` can be
        in the page."""
        i = bisect.bisect_right(keys, self.after) if self.after is not None else 0
        for key in keys[i : i + self.size]:
            if self.bound is not None and key >= self.bound:
                break
            self.keys.add(key)
        if len(self.keys) > self.size:
            self._trim()

    def _trim(self) -> None:
        kept = sorted(self.keys)[: self.size]
        self.keys = set(kept)
        self.bound = kept[-1]

    def sorted(self) -> list[str]:
        return sorted(self.keys)[: self.size]


class _KeysFromIndex:
    """A scan pruner that answers a segment from the lexicon run over it (all of the run's
    segments at once, when the run still spans exactly the stream's segments) or else from
    its companion's routing keys, adding them to the page and so skipping its read; a
    segment with neither is scanned."""

    families: frozenset[str] = frozenset({"rk"})

    def __init__(self, index: KeyIndex, page: _Page, segments: Sequence[SegmentItem]) -> None:
        self.index, self.page = index, page
        self.by_first = {s.first_seq: s for s in segments}
        self.ms = 0
        self.runs_loaded = 0  # lexicon runs used
        self.companions_loaded = 0  # segments answered by their own companion
        self._runs: dict[int, bool] = {}  # run first seq -> usable (its keys added)

    async def __call__(self, seg: SegmentItem) -> frozenset[int] | None:
        t0 = monotonic()
        try:
            run = await self.index.run_for(seg)
            if run is not None:
                usable = self._runs.get(run.first_seq)
                if usable is None:
                    usable = self._runs[run.first_seq] = run.listable(self.by_first)
                    if usable:
                        self.page.add_sorted(run.keys)
                        self.runs_loaded += 1
                if usable:
                    return frozenset()
            got = await self.index.keys_of(seg)
            if got is None:
                return None
            self.page.add_sorted(got)
            self.companions_loaded += 1
            return frozenset()
        finally:
            self.ms += round((monotonic() - t0) * 1000)


async def routing_keys(
    streams: DurableStreams,
    head: Head,
    reg: Mapping[str, Any],
    limit: int,
    after: str | None,
    index: KeyIndex | None = None,
) -> dict[str, Any]:
    """One alphabetical page of distinct routing keys: from the routing-key sections of the
    sealed segments' index companions where `index` has a current one, by scanning the
    stream's records elsewhere (the key is each record's stored tag). complete=false if the
    deadline or the scan cap stopped the scan before the end."""
    if not reg.get("routingKey"):
        raise SearchError("_routing_keys needs a schema that declares routingKey")
    deadline = Deadline(ROUTING_TIMEOUT_MS)
    cov = Coverage(head, await streams.segments(head))
    found = _Page(after, limit + 1)  # one past the page: is there a next page
    scanned_bytes = 0
    capped = False
    t0 = monotonic()
    from_index = _KeysFromIndex(index, found, cov.segments) if index is not None else None
    async for doc in scan(streams, cov, deadline, None, 0, head.head_seq, "asc", from_index):
        scanned_bytes += len(doc.rec.data_raw)
        tag = doc.rec.tag_json
        if tag is not None:
            key = json.loads(tag)
            if isinstance(key, str):
                found.add(key)
        if scanned_bytes >= ROUTING_SCAN_CAP and doc.rec.seq < head.head_seq:
            capped = True
            cov.missing.append((doc.rec.seq, head.head_seq))
            break
    scan_ms = round((monotonic() - t0) * 1000)
    index_ms = from_index.ms if from_index is not None else 0
    page = found.sorted()
    complete = not cov.missing
    more = len(page) > limit
    page = page[:limit]
    missing = cov.missing_counts()
    local = head.sealed_through < head.head_seq
    return {
        "stream": name_of(head.topic),
        "source": "index" if cov.indexed_segments and not cov.scanned_segments else "scan",
        "took_ms": deadline.took_ms(),
        "coverage": {
            "complete": complete,
            "indexed_segments": cov.indexed_segments,
            "scanned_uploaded_segments": len(cov.scanned_segments),
            "scanned_local_segments": 0,
            "scanned_wal_rows": cov.scanned_tail_docs,
            "possible_missing_uploaded_segments": missing["possible_missing_uploaded_segments"],
            "possible_missing_local_segments": 0,
            "scan_limit_reached": capped,
            "timed_out": cov.timed_out,
        },
        "timing": {
            "lexicon_run_get_ms": index_ms,
            "lexicon_decode_ms": 0,
            "lexicon_enumerate_ms": 0,
            "lexicon_merge_ms": 0,
            "fallback_scan_ms": max(0, scan_ms - index_ms),
            "fallback_segment_get_ms": round(cov.scanned_segment_time_ms),
            "fallback_wal_scan_ms": round(cov.scanned_tail_time_ms) if local else 0,
            "lexicon_runs_loaded": (
                from_index.runs_loaded + from_index.companions_loaded if from_index else 0
            ),
        },
        "keys": page,
        "next_after": page[-1] if page and (more or not complete) else None,
    }


# --------------------------------------------------------------------------- index status
FAMILIES: Final = ("col", "fts", "agg", "mblk")


def _desired(reg: Mapping[str, Any]) -> dict[str, bool]:
    """Which bundled families the search config would have built (reference planning)."""
    search = reg.get("search") or {}
    fields = (search.get("fields") or {}).values()
    return {
        "col": any(f.get("column") for f in fields),
        "fts": any(f.get("kind") == "text" or f.get("prefix") for f in fields),
        "agg": bool(search.get("rollups")),
        "mblk": search.get("profile") == "metrics",
    }


def index_status(
    head: Head,
    state: StreamState,
    reg: Mapping[str, Any],
    segments: list[SegmentItem],
    now: int,
    catalogue: Catalogue | None = None,
    generation: str | None = None,
) -> dict[str, Any]:
    """`catalogue`: the stream's index catalogue (storage/index_catalogue.py), `generation`:
    the plan generation its search config asks for. Companions cover the segments through
    the catalogue's covered_through when its generation is that one; one built for another
    plan is stale (stale_configuration) and counts as no coverage."""
    current = catalogue is not None and generation is not None
    current = current and catalogue.generation == generation  # type: ignore[union-attr]
    covered_through = catalogue.covered_through if current and catalogue else 0
    covered = sum(1 for s in segments if s.last_seq <= covered_through)
    at_rest = str(catalogue.bytes) if current and catalogue else "0"
    stale = bool(catalogue is not None and generation and not current)
    uncovered = [s for s in segments if s.last_seq > covered_through]
    lag = len(uncovered)
    oldest = min((s.created_ms for s in uncovered), default=None)
    lag_ms = max(0, now - oldest) if oldest is not None else 0

    def family() -> dict[str, Any]:
        return {
            "indexed_segment_count": covered,
            "lag_segments": lag,
            "lag_ms": lag_ms,
            "bytes_at_rest": at_rest,
        }

    search = reg.get("search") or {}
    exact_fields = sorted(n for n, f in (search.get("fields") or {}).items() if f.get("exact"))
    desired = _desired(reg)
    return {
        "stream": name_of(head.topic),
        "profile": (state.profile or profiles.DEFAULT_PROFILE).get("kind", "generic"),
        "segments": {
            "total_count": len(segments),
            "uploaded_count": len(segments),
            "sealed_through": encode_offset(head.epoch, head.sealed_through),
            "uploaded_through": encode_offset(head.epoch, head.sealed_through),
            "bytes": str(sum(s.bytes for s in segments)),
        },
        "manifest": {
            "generation": None,
            "last_uploaded_at": None,
            "last_uploaded_size_bytes": None,
        },
        "routing_key_index": {"configured": bool(reg.get("routingKey")), **family()},
        "routing_key_lexicon": {"configured": bool(reg.get("routingKey")), **family()},
        "exact_indexes": [
            {"name": n, "stale_configuration": stale, **family()} for n in exact_fields
        ],
        "bundled_companions": {
            "desired_families": [f for f in FAMILIES if desired[f]],
            "covered_segment_count": covered,
            "lag_segments": lag if any(desired.values()) else 0,
            "bytes_at_rest": at_rest,
        },
        "search_families": [
            {"family": f, "contiguous_covered_segment_count": covered, **family()}
            for f in FAMILIES
            if desired[f]
        ],
    }


def stream_summary(head: Head, state: StreamState) -> dict[str, Any]:
    return {
        "name": name_of(head.topic),
        "content_type": state.content_type,
        "profile": (state.profile or profiles.DEFAULT_PROFILE).get("kind", "generic"),
        "created_at": state.created_ms,
        "expires_at": state.expires_text or None,
        "ttl_seconds": state.ttl_ms // 1000 if state.ttl_ms else None,
        "closed": state.closed,
        "epoch": head.epoch,
        "next_offset": encode_offset(head.epoch, head.head_seq),
        "sealed_through": encode_offset(head.epoch, head.sealed_through),
        "uploaded_through": encode_offset(head.epoch, head.sealed_through),
        "total_size_bytes": str(payload_bytes(head)),
        "entries": head.count,
        "schema_version": state.schema_version,
        "forked_from": state.fork.src if state.fork is not None else None,
    }


def details(
    head: Head,
    state: StreamState,
    reg: Mapping[str, Any],
    segments: list[SegmentItem],
    now: int,
    catalogue: Catalogue | None = None,
    generation: str | None = None,
    requests: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """`requests`: this process's object-store request counters for the stream
    (storage/requests.py), reported as `object_store_requests`."""
    seg_bytes = sum(s.bytes for s in segments)
    status = index_status(head, state, reg, segments, now, catalogue, generation)
    companions = status["bundled_companions"]
    return {
        "stream": stream_summary(head, state),
        "profile": profiles.resource(state.profile),
        "schema": reg,
        "index_status": status,
        "storage": {
            "object_storage": {
                "segments_bytes": str(seg_bytes),
                "segment_objects": len(segments),
                "indexes_bytes": companions["bytes_at_rest"],
                "index_objects": companions["covered_segment_count"],
                "metadata_objects": 1 if state.registry_key else 0,
            },
            "local_storage": {
                "wal_bytes": str(max(0, head.unsealed_bytes)),
                "pending_sealed_segment_bytes": "0",
                "segment_cache_bytes": None,
                "routing_index_cache_bytes": "0",
                "exact_index_cache_bytes": "0",
                "lexicon_index_cache_bytes": "0",
                "companion_cache_bytes": "0",
                "sqlite_shared_bytes": None,
            },
            "companion_families": {f: "0" for f in FAMILIES},
        },
        "object_store_requests": dict(requests) if requests is not None else None,
    }


def _stable(value: Any) -> Any:
    """The descriptor without what moves with the clock or with reads alone (lag_ms, the
    node-local request counters)."""
    if isinstance(value, Mapping):
        return {
            k: _stable(v) for k, v in value.items() if k not in ("lag_ms", "object_store_requests")
        }
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def etag(head: Head, body: Mapping[str, Any]) -> str:
    """A weak validator of the descriptor as of `head` (the head it was built from): changes
    with the stream's position (every append, whether or not the descriptor shows it:
    `_index_status` reports only sealed segments, and §7B ends a long-poll on any append),
    the schema, profile, segments and index progress, not with the clock."""
    text = json.dumps([head.epoch, head.head_seq, _stable(body)], sort_keys=True)
    digest = hashlib.sha256(text.encode()).hexdigest()[:32]
    return f'W/"{digest}"'


# --------------------------------------------------------------------------- server
def _limit_mb() -> int | None:
    raw = os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE")
    return int(raw) if raw and raw.isdigit() else None


def mem(counts: Mapping[str, int], cache_bytes: int, cache_budget: int) -> dict[str, Any]:
    rss = allocator.rss_bytes()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    return {
        "ts": int(time.time() * 1000),
        "process": {
            "rss_bytes": rss,
            "heap_total_bytes": None,
            "heap_used_bytes": None,
            "external_bytes": None,
            "array_buffers_bytes": None,
        },
        "process_breakdown": {
            "rss_bytes": rss,
            "tracked_cache_bytes": cache_bytes,
            "unattributed_rss_bytes": None if rss is None else max(0, rss - cache_bytes),
        },
        "sqlite": None,
        "gc": None,
        "high_water": {"rss_bytes": peak, "at": None},
        "counters": dict(counts),
        "runtime_counts": dict(counts),
        "runtime_bytes": {
            "heap_estimates": {"frame_cache_bytes": cache_bytes},
            "mapped_files": {},
            "disk_caches": {},
            "configured_budgets": {"frame_cache_bytes": cache_budget},
            "pipeline_buffers": {},
            "sqlite_runtime": {},
        },
        "runtime_totals": {
            "heap_estimate_bytes": cache_bytes,
            "mapped_file_bytes": 0,
            "disk_cache_bytes": 0,
            "configured_budget_bytes": cache_budget,
            "pipeline_buffer_bytes": 0,
            "sqlite_runtime_bytes": 0,
        },
        "top_streams": [],
        "uptime_ms": int((time.time() - _STARTED) * 1000),
    }
