"""The log engine: topics, append with group commit, diff reads, record deletes, and its
sibling engines (queues, routers, watch sessions, tiering's sweeps).

This module is the engine's API for the surfaces (durable/, notify/, flags/, dashboard/,
index/, rollups.py, access/, v0/, ws/, http/): they import the names below from
`headwater.engine` and the storage ports from `headwater.engine.ports`, nothing else of the
engine (import contract `engine-api`). The names load lazily, on first use (PEP 562
`__getattr__`): importing the package costs nothing, and a function that uses only the
queue engine never imports the watch engine.

The engine's modules import asyncio inside the coroutines and loop callbacks that use it,
not at their top: SealerFunction runs the engine's synchronous upkeep and never an event
loop, and asyncio is ~5 ms of its cold start (docs/operations.md "Cold start"; checked by
tests/infra/test_handler_imports.py)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from headwater.engine.config import validate_config_patch
    from headwater.engine.log import LogEngine, wall_ms
    from headwater.engine.priority import effective_priority
    from headwater.engine.queue_core import LEASE_MAX_MS, Counters, LeaseOpResult, clamp_lease_ms
    from headwater.engine.quotas import WATCH_SESSIONS, WS_CONNECTIONS, Quotas, cap_hit
    from headwater.engine.records import (
        RECORD_OVERHEAD_BYTES,
        NewRecord,
        StoredRecord,
        encoded_size,
        json_literal,
    )
    from headwater.engine.routers import RouterNotFound
    from headwater.engine.segment import companion_key, decode_segment, lexicon_run_key
    from headwater.engine.sweeps import SweepPlan, live_heads, run_timer
    from headwater.engine.values import (
        Admit,
        AppendRequest,
        AppendResult,
        ClaimRefused,
        DiffRequest,
        DiffResult,
        Guard,
        ProducerClaim,
        RangeRead,
        Settle,
        TagMatch,
    )
    from headwater.engine.watch import TopicFeed, WatchEngine, resolve_starts
    from headwater.engine.watch_values import TopicRequest, WatchEvent, WatchSpec

# name -> the module that defines it
_WHERE: dict[str, str] = {
    **dict.fromkeys(["validate_config_patch"], "config"),
    **dict.fromkeys(["LogEngine", "wall_ms"], "log"),
    **dict.fromkeys(["effective_priority"], "priority"),
    **dict.fromkeys(["LEASE_MAX_MS", "Counters", "LeaseOpResult", "clamp_lease_ms"], "queue_core"),
    **dict.fromkeys(["WATCH_SESSIONS", "WS_CONNECTIONS", "Quotas", "cap_hit"], "quotas"),
    **dict.fromkeys(
        ["RECORD_OVERHEAD_BYTES", "NewRecord", "StoredRecord", "encoded_size", "json_literal"],
        "records",
    ),
    **dict.fromkeys(["RouterNotFound"], "routers"),
    **dict.fromkeys(["companion_key", "decode_segment", "lexicon_run_key"], "segment"),
    **dict.fromkeys(["SweepPlan", "live_heads", "run_timer"], "sweeps"),
    **dict.fromkeys(
        [
            "Admit",
            "AppendRequest",
            "AppendResult",
            "ClaimRefused",
            "DiffRequest",
            "DiffResult",
            "Guard",
            "ProducerClaim",
            "RangeRead",
            "Settle",
            "TagMatch",
        ],
        "values",
    ),
    **dict.fromkeys(["TopicFeed", "WatchEngine", "resolve_starts"], "watch"),
    **dict.fromkeys(["TopicRequest", "WatchEvent", "WatchSpec"], "watch_values"),
}

__all__ = [
    "LEASE_MAX_MS",
    "RECORD_OVERHEAD_BYTES",
    "WATCH_SESSIONS",
    "WS_CONNECTIONS",
    "Admit",
    "AppendRequest",
    "AppendResult",
    "ClaimRefused",
    "Counters",
    "DiffRequest",
    "DiffResult",
    "Guard",
    "LeaseOpResult",
    "LogEngine",
    "NewRecord",
    "ProducerClaim",
    "Quotas",
    "RangeRead",
    "RouterNotFound",
    "Settle",
    "StoredRecord",
    "SweepPlan",
    "TagMatch",
    "TopicFeed",
    "TopicRequest",
    "WatchEngine",
    "WatchEvent",
    "WatchSpec",
    "cap_hit",
    "clamp_lease_ms",
    "companion_key",
    "decode_segment",
    "effective_priority",
    "encoded_size",
    "json_literal",
    "lexicon_run_key",
    "live_heads",
    "resolve_starts",
    "run_timer",
    "validate_config_patch",
    "wall_ms",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
