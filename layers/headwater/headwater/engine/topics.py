"""Topic lifecycle: create and configure (put), read, list, touch, ext changes, delete, and
the background purge of a deleted incarnation's sealed history."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from functools import partial
from typing import Any

from headwater.engine import config as topic_config
from headwater.engine.core import MAX_ATTEMPTS, LogCore
from headwater.engine.ports import AppendRejected, Head, ProducerClaim
from headwater.engine.quotas import TOPICS, TOTAL_BYTES
from headwater.engine.segment import object_keys
from headwater.engine.values import ClaimRefused, TopicPage
from headwater.errors import (
    StorageUnavailable,
    TopicExistsIncompatible,
    TopicNotEmpty,
    TopicNotFound,
)

# Topics whose names start with this belong to a protocol layer (/v1 Durable Streams keep
# theirs under "~ds/"); no /v0 topic name can start with it.
PROTOCOL_TOPIC_MARK = "~"
TOUCH_INTERVAL_MS = 1000
log = logging.getLogger(__name__)


class Topics:
    def __init__(self, core: LogCore) -> None:
        self.core = core
        self._touched: dict[str, int] = {}
        # Called with a deleted incarnation's head once its sealed history is purged (the
        # index catalogue registers its own clean-up here: services.py).
        self.on_purged: list[Callable[[Head], None]] = []

    # --- create and configure ---------------------------------------------------------
    def put_sync(self, topic: str, patch: dict[str, Any]) -> tuple[Head, bool]:
        """Create the topic with `patch` or merge `patch` into its config, on the calling
        thread: (head, created)."""
        c = self.core
        for _ in range(MAX_ATTEMPTS):
            head = c.heads.get(topic)
            if head is None or head.deleted:
                new = self.fresh_head(topic, head, topic_config.resolve(patch))
                if self.create_head(new, head):
                    return new, True
                continue
            if "type" in patch and patch["type"] != head.cfg.type:
                raise TopicExistsIncompatible(
                    f"topic {topic!r} is a {head.cfg.type}; type is immutable",
                    detail={"topic": topic, "field": "type"},
                )
            merged = topic_config.resolve(patch, base=head.config)
            if merged == head.config:
                return head, False
            if c.heads.put_config(head, merged):
                c.head_cache.pop(topic, None)
                return dataclasses.replace(head, config=merged), False
        raise StorageUnavailable("topic configure kept conflicting; retry")

    def create_head(self, new: Head, replacing: Head | None) -> bool:
        """Put a new head (over a deleted marker, if any) holding a max_topics slot, which
        is given back if another writer won the race."""
        c = self.core
        c.quota_reserve(TOPICS, 1)
        created = False
        try:
            created = c.heads.create(new, replacing=replacing)
        finally:
            if not created:
                c.quota_release(TOPICS, 1)
        return created

    def fresh_head(
        self, topic: str, old: Head | None, cfg: dict[str, Any], base_seq: int = 0
    ) -> Head:
        """A new, empty head; its log starts after `base_seq` (0 but for forks)."""
        epoch = old.epoch + 1 if old is not None else 1
        prev = old.prev_head_seq if old is not None else 0
        return Head(
            topic=topic,
            epoch=epoch,
            config=cfg,
            created_ms=self.core.clock(),
            prev_head_seq=prev,
            head_seq=base_seq,
            earliest_seq=base_seq + 1,
            evict_floor=base_seq + 1,
            sealed_through=base_seq,
            trimmed_through=base_seq,
            partitions=self.core.settings.log_partitions,
        )

    async def create_with_ext(
        self, topic: str, ext: str, replacing: Head | None, base_seq: int = 0
    ) -> Head | None:
        if not ext:
            raise ValueError("ext must not be empty")
        c = self.core

        def run() -> Head | None:
            new = dataclasses.replace(
                self.fresh_head(topic, replacing, topic_config.resolve({}), base_seq), ext=ext
            )
            if not self.create_head(new, replacing):
                return None
            c.known.note(new)
            c.head_cache[topic] = new  # the first append judges on it without a read
            return new

        head = await c.io(run)
        if head is not None:
            c.notifier.notify(topic)
        return head

    async def put_ext(
        self, head: Head, ext: str, claim: ProducerClaim | None = None
    ) -> Head | None:
        """The ext iff the head is as read (None: it moved); with an idempotent producer's
        claim, the two at once (ClaimRefused when the producer does not take it)."""
        c = self.core
        try:
            ok = await c.io(c.heads.put_ext, head, ext, claim)
        except AppendRejected as rej:
            if claim is None or claim.producer not in rej.claim_hits:
                raise
            stored = rej.claim_hits[claim.producer]
            raise ClaimRefused(
                claim.producer, None if stored is None else (stored[0], stored[1])
            ) from None
        if not ok:
            return None
        new = dataclasses.replace(head, ext=ext)
        c.head_cache[head.topic] = new
        c.known.note(new)
        c.notifier.notify(head.topic)
        return new

    # --- read, list, touch ------------------------------------------------------------
    async def get(self, topic: str, *, touch: bool) -> Head:
        head = await self.core.io(self.core.heads.get, topic)
        if head is None or head.deleted:
            raise TopicNotFound(topic)
        if touch:
            head = await self.touch(head)
        return head

    async def head_of(self, topic: str, *, consistent: bool) -> Head | None:
        return await self.core.io(partial(self.core.heads.get, topic, consistent=consistent))

    async def touch(self, head: Head) -> Head:
        now = self.core.clock()
        # Recency clocks are advisory: write at most once a second per topic per process.
        if now - self._touched.get(head.topic, 0) >= TOUCH_INTERVAL_MS:
            self._touched[head.topic] = now
            await self.core.io(self.core.heads.touch_read, head, now)
            return dataclasses.replace(head, last_read_ts=now)
        return head

    async def page(self, prefixes: list[str], after: str | None, limit: int) -> TopicPage:
        heads = self.core.heads

        def run() -> TopicPage:
            merged: list[Head] = []
            for p in prefixes:
                found = heads.list_live(p, after, limit + 1)
                if not p.startswith(PROTOCOL_TOPIC_MARK):
                    # Protocol-owned topics ("~ds/..." streams) sort after every topic name
                    # and are not topics to /v0: the listing ends where they begin.
                    found = [h for h in found if not h.topic.startswith(PROTOCOL_TOPIC_MARK)]
                merged.extend(found)
            merged.sort(key=lambda h: h.topic)
            page = merged[: limit + 1]
            more = len(page) > limit
            page = page[:limit]
            return TopicPage(page, page[-1].topic if more and page else None)

        return await self.core.io(run)

    async def every(self, max_topics: int) -> tuple[list[Head], bool]:
        out: list[Head] = []
        after: str | None = None
        while len(out) < max_topics:
            page = await self.page([""], after, min(1000, max_topics - len(out)))
            out.extend(page.heads)
            if page.next_after is None:
                return out, False
            after = page.next_after
        return out, True

    # --- delete -------------------------------------------------------------------------
    async def delete(self, topic: str, *, if_empty: bool, if_ext: str | None) -> Head | None:
        c = self.core

        def run() -> Head | None:
            for _ in range(MAX_ATTEMPTS):
                head = c.heads.get(topic)
                if head is None or head.deleted:
                    return None
                if if_ext is not None and head.ext != if_ext:
                    return None
                if if_empty and head.count > 0:
                    raise TopicNotEmpty(
                        f"topic {topic!r} has {head.count} records",
                        detail={"topic": topic, "count": head.count},
                    )
                if c.heads.mark_deleted(head, if_empty=if_empty, if_ext=if_ext):
                    c.known.note(dataclasses.replace(head, deleted=True))
                    c.quota_release(TOPICS, 1)
                    c.quota_release(TOTAL_BYTES, head.bytes)
                    c.head_cache.pop(topic, None)
                    c.cache.drop_topic(head.log_key)
                    return head
            raise StorageUnavailable("topic delete kept conflicting; retry")

        deleted = await c.io(run)
        c.notifier.notify(topic)
        if deleted is not None and deleted.sealed_through > 0 and c.segments is not None:
            c.submit_io(self.purge_sealed, deleted)
        return deleted

    def purge_sealed(self, head: Head) -> int:
        """Remove a deleted incarnation's sealed history: its segment objects, their index
        companions and lexicon runs, its segment items, then what `on_purged` forgets (its
        index catalogue) (nothing reads them any more: a stream that forks
        still read is held, not deleted). In the background after the delete; a process
        that dies part way leaves the rest (objects nothing points at). Segments removed."""
        c = self.core
        store = c.segments
        if store is None:
            return 0
        removed = 0
        try:
            while True:
                segs = store.after(head, 0, 256)
                if not segs:
                    break
                c.blobs.delete_many([k for s in segs for k in object_keys(s.key)])
                store.delete_items(head, [s.last_seq for s in segs])
                removed += len(segs)
        except Exception:  # best effort: the delete itself has happened
            log.warning("purging %s's sealed history stopped", head.log_key, exc_info=True)
            return removed
        if c.sealed is not None:
            c.sealed.forget(head)
        for forget in self.on_purged:
            try:
                forget(head)
            except Exception:  # best effort, as above
                log.warning("forgetting %s's indexes stopped", head.log_key, exc_info=True)
        return removed
