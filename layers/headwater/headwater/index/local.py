"""The in-process indexer: what gives `make run` (and any long-running server process)
indexed streams with no extra step. Every tiering interval it walks the live streams, and for
each one whose schema registry has a search config or a routing key it runs one incremental
pass of headwater.index.build.index_stream: the same per-segment build and the same
conditional catalogue publish as the Glue job (glue_jobs/indexer), so the two can run at once
against one deployment and write the same bytes.

On AWS the scheduled Glue job is the indexer; the buffered Lambda never starts this timer."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from headwater.durable.state import TOPIC_PREFIX, state_of
from headwater.engine.log import LogEngine
from headwater.engine.ports.catalogue import IndexCatalogueStore
from headwater.errors import HeadwaterError
from headwater.index.build import Progress, SegmentLister, index_stream

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

    def sweep(self) -> dict[str, Progress]:
        """One pass over every live stream with sealed segments and an index plan."""
        out: dict[str, Progress] = {}
        after: str | None = None
        while True:
            # streams' topics only: other protocols (flag namespaces) keep their own ext
            page = self.engine.heads.list_live(TOPIC_PREFIX, after, PAGE)
            for head in page:
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
                    continue
                if progress.generation:
                    out[head.topic] = progress
            if len(page) < PAGE:
                return out
            after = page[-1].topic

    async def timer(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await asyncio.to_thread(self.sweep)
            except Exception:  # storage trouble: the next sweep tries again
                log.warning("index sweep failed", exc_info=True)
