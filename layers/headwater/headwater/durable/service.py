"""Durable Streams on the log engine: the façade over its parts, as engine/log.py is the
log engine's. Each stream is a topic (`~ds/<name>`) whose head carries the stream's state
(durable/state.py) in its ext attribute.

Each capability lives in its own module and shares one StreamsCore (core.py):
- lifecycle.py  list, create, fork, delete (and the references forks hold on sources)
- append.py     appends and closes: the write guard, idempotent producers, close-only writes
- config.py     the schema registry and profile, shaping entries on append, promoting on read
- reads.py      catch-up pages, query windows, entries at seqs, filtered reads, seeks, waits
- values.py     the values they and the HTTP surface pass each other

The query features (scan.py, search.py, aggregate.py, inspect.py, touch/) and the HTTP surface use
only this class's public methods (import contract `durable-parts`)."""

from __future__ import annotations

from collections.abc import Callable

from headwater.durable.append import StreamAppends
from headwater.durable.config import StreamConfigs
from headwater.durable.core import StreamsCore
from headwater.durable.lifecycle import StreamLifecycle
from headwater.durable.reads import FILTER_SCAN_CAP, StreamReads
from headwater.durable.values import (
    Entry,
    ForkRequest,
    SegmentPruner,
    StreamConfig,
    Written,
    descriptor,
    payload_bytes,
)
from headwater.engine import LogEngine, wall_ms

__all__ = [
    "FILTER_SCAN_CAP",
    "DurableStreams",
    "Entry",
    "ForkRequest",
    "SegmentPruner",
    "StreamConfig",
    "Written",
    "descriptor",
    "payload_bytes",
]


class DurableStreams:
    def __init__(self, engine: LogEngine, clock: Callable[[], int] = wall_ms) -> None:
        self._core = core = StreamsCore(engine, clock)
        reads = StreamReads(core)
        configs = StreamConfigs(core)
        appends = StreamAppends(core, configs)
        life = StreamLifecycle(core, reads)
        # The parts' public methods, bound once: the façade adds no call of its own.
        self.lookup = core.lookup
        self.touch = core.touch
        self.list_streams = life.list_streams
        self.create = life.create
        self.delete = life.delete
        self.append = appends.append
        self.registry = configs.registry
        self.update_schema = configs.update_schema
        self.update_profile = configs.update_profile
        self.commit_conf_blob = configs.commit_conf_blob
        self.promoter = configs.promoter
        self.read = reads.read
        self.read_window = reads.read_window
        self.read_entries = reads.read_entries
        self.segments = reads.segments
        self.read_filtered = reads.read_filtered
        self.seek = reads.seek
        self.wait = reads.wait

    @property
    def engine(self) -> LogEngine:
        return self._core.engine

    @property
    def clock(self) -> Callable[[], int]:
        """The parts' clock (a test moves time for all of them by setting it here)."""
        return self._core.clock

    @clock.setter
    def clock(self, clock: Callable[[], int]) -> None:
        self._core.clock = clock
