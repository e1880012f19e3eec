"""The in-process indexer: what gives `make run` (and any long-running server process)
indexed streams with no extra step. Every tiering interval it walks the live streams, and for
each one whose schema registry has a search config or a routing key it runs one incremental
pass of headwater.index.build.index_stream: the same per-segment build and the same
conditional catalogue publish as the Glue job (glue_jobs/indexer), so the two can run at once
against one deployment and write the same bytes.

On AWS the scheduled Glue job is the indexer; the buffered Lambda never starts this timer."""

from __future__ import annotations

import json
import logging
from typing import Any

from headwater.durable.state import TOPIC_PREFIX, state_of
from headwater.engine import LogEngine, SweepPlan, live_heads
from headwater.engine.ports import Head
from headwater.engine.ports.catalogue import IndexCatalogueStore
from headwater.errors import HeadwaterError
from headwater.index.build import Progress, index_stream
from headwater.index.ports import SegmentLister

log = logging.getLogger(__name__)

PAGE = 100


class LocalIndexer:
    def __init__(
        self,
        engine: LogEngine,
        segments: SegmentLister,
        catalogue: IndexCatalogueStore,
        max_segments: int = 16,
    ) -> None:
        self.engine = engine
        self.segments = segments
        self.catalogue = catalogue
        self.max_segments = max_segments
        self.behind: list[str] = []  # streams a pass did not finish: the next pass goes on

    def sweep(self) -> dict[str, Progress]:
        """One pass over every live stream with sealed segments and an index plan."""
        out: dict[str, Progress] = {}
        after: str | None = None
        while True:
            # streams' topics only: other protocols (flag namespaces) keep their own ext
            page = self.engine.heads.list_live(TOPIC_PREFIX, after, PAGE)
            self._visit(page, out)
            if len(page) < PAGE:
                return out
            after = page[-1].topic

    def sweep_topics(self, topics: list[str]) -> dict[str, Progress]:
        """The same pass over these streams only (those this process changed: engine/sweeps.py)."""
        out: dict[str, Progress] = {}
        streams = [t for t in topics if t.startswith(TOPIC_PREFIX)]
        self._visit(live_heads(self.engine.heads, streams), out)
        return out

    def _visit(self, heads: list[Head], out: dict[str, Progress]) -> None:
        visited = {h.topic for h in heads}
        self.behind = [t for t in self.behind if t not in visited]
        for head in heads:
            state = state_of(head)
            if state is None or not state.registry_key or not head.sealed_through:
                continue
            try:
                reg: dict[str, Any] = json.loads(self.engine.blobs.get(state.registry_key))
                progress = index_stream(
                    head,
                    reg,
                    segments=self.segments,
                    blobs=self.engine.blobs,
                    catalogue=self.catalogue,
                    now_ms=self.engine.clock(),
                    max_segments=self.max_segments,
                )
            except HeadwaterError:
                log.warning("indexing %s failed; the next sweep tries again", head.topic)
                self.behind.append(head.topic)
                continue
            if progress.generation:
                out[head.topic] = progress
            if progress.lost_race or progress.built >= self.max_segments:
                self.behind.append(head.topic)  # max_segments per pass: the next one goes on

    def tick(self, plan: SweepPlan) -> dict[str, Progress]:
        """One pass of the timer (blocking): over every stream when the plan says so, else
        over the streams it names and those a pass left behind (none: no storage call)."""
        topics = plan.next(self.engine.clock())
        try:
            if topics is None:
                out = self.sweep()
            elif topics or self.behind:
                out = self.sweep_topics(sorted({*topics, *self.behind}))
            else:
                return {}
        except Exception:
            plan.failed(topics)
            raise
        plan.visited(topics or (), {})  # those a failed pass named are done with too
        return out
