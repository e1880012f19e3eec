"""`GET /api/v1/events`: one SSE connection per process, many namespaces.

Wake-ups: a per-process `FlagHub` runs one watcher per namespace topic however many
connections follow it (commits in this process wake it at once; other processes' commits are
seen by the engine's head polling), and sets every follower's event. A connection then
compares each namespace's head with what it last delivered and computes its own event.

Per namespace, a connection tracks the version and closure it last delivered (digests only;
contents are fetched from the store's cache when an inline event needs them). Rules:
- first event: `delivery: snapshot` at the current version, prev fields null (spec);
- a newer head: the closure at the new version; byte-identical -> no event (the namespace
  is still marked seen); else an inline delta, or a snapshot when the prior version is past
  retention, the churn budget or the inline budget is exceeded. Intermediate versions that
  commit between two wake-ups are folded into one event (versions stay strictly increasing
  and each event's prev_* are the previous event's version and hash);
- after an inline event, a prior version past retention is `resync` `version_too_old`
  instead (the spec: resync only once inline state exists);
- a head whose history went backwards (restored or recreated: lower version or another
  epoch) is `resync` `unknown_since` at its current version;
- `:keepalive` after `keepalive_sec` (<= 30) without a frame;
- the stream ends at `max_connection_sec` (24 h; on Lambda just inside the invocation
  limit), on server shutdown, and when a namespace is deleted; clients reconnect and their
  next first event is again a snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field

from headwater.engine import LogEngine
from headwater.engine.ports import Head
from headwater.flags.delta import (
    KEEPALIVE_FRAME,
    DeliveryPolicy,
    FileChange,
    Op,
    ResyncReason,
    SnapshotRef,
    SseEvent,
    plan_version_event,
    resync_event,
)
from headwater.flags.principals import Principal
from headwater.flags.snapshot import snapshot_url
from headwater.flags.store import Closure, Lru, ManifestStore, TreeIndex, topic_of
from headwater.flags.subscription import NamespaceSubscription
from headwater.flags.tokens import SnapshotScope, SnapshotSigner

log = logging.getLogger(__name__)
WATCH_TIMEOUT_S = 30.0


@dataclass(slots=True)
class _Watch:
    head: Head | None
    followers: set[asyncio.Event] = field(default_factory=set)
    task: asyncio.Task[None] | None = None


class FlagHub:
    """One watcher task per followed namespace topic in this process."""

    def __init__(self, engine: LogEngine) -> None:
        self.engine = engine
        self._watches: dict[str, _Watch] = {}
        # (label, subscription, prev version, prev tree, version, tree) -> the inline event
        self.inline_events: Lru[tuple[str, str, int, str, int, str], SseEvent] = Lru(8 << 20)

    def wake_all(self) -> None:
        """Wake every connection (server shutdown: they see it and end)."""
        for watch in self._watches.values():
            for wake in watch.followers:
                wake.set()

    def latest(self, topic: str) -> Head | None:
        watch = self._watches.get(topic)
        return watch.head if watch is not None else None

    @contextlib.contextmanager
    def follow(self, heads: Sequence[Head], wake: asyncio.Event) -> Iterator[None]:
        """Set `wake` whenever one of these topics' heads moves, while in the block."""
        for head in heads:
            watch = self._watches.get(head.topic)
            if watch is None:
                watch = self._watches[head.topic] = _Watch(head)
            elif watch.head is None or _newer(head, watch.head):
                watch.head = head
            watch.followers.add(wake)
            if watch.task is None or watch.task.done():
                watch.task = asyncio.get_running_loop().create_task(self._run(head.topic))
        try:
            yield
        finally:
            for head in heads:
                watch = self._watches.get(head.topic)
                if watch is None:
                    continue
                watch.followers.discard(wake)
                if not watch.followers:
                    if watch.task is not None:
                        watch.task.cancel()
                    del self._watches[head.topic]

    async def _run(self, topic: str) -> None:
        while True:
            watch = self._watches.get(topic)
            if watch is None or watch.head is None:
                return
            try:
                moved = await self.engine.wait_change(topic, watch.head, WATCH_TIMEOUT_S)
            except asyncio.CancelledError:
                raise
            except Exception:  # storage trouble: keep following, a little later
                log.exception("flag namespace watcher for %s failed; retrying", topic)
                await asyncio.sleep(1.0)
                continue
            watch = self._watches.get(topic)
            if watch is None:
                return
            if moved is None:
                continue
            watch.head = moved
            for wake in list(watch.followers):
                wake.set()
            if moved.deleted:
                return


def _newer(a: Head, b: Head) -> bool:
    return (a.epoch, a.head_seq) > (b.epoch, b.head_seq)


@dataclass(slots=True)
class _Namespace:
    sub: NamespaceSubscription
    topic: str
    epoch: int = 0
    seen: int = 0  # newest version looked at
    version: int = 0  # version of the last event sent (0: none yet)
    closure: Closure | None = None
    index: TreeIndex | None = None
    inline_sent: bool = False


class EventStream:
    """The frames of one `/api/v1/events` connection."""

    def __init__(
        self,
        *,
        store: ManifestStore,
        hub: FlagHub,
        signer: SnapshotSigner,
        policy: DeliveryPolicy,
        principal: Principal,
        namespaces: Sequence[NamespaceSubscription],
        heads: Sequence[Head],
        base_url: str,
        keepalive_s: float,
        max_duration_s: float,
        shutdown: asyncio.Event,
        clock_ms: Callable[[], int],
    ) -> None:
        self.store = store
        self.hub = hub
        self.signer = signer
        self.policy = policy
        self.principal = principal
        self.states = [_Namespace(s, topic_of(s.tenant, s.slug)) for s in namespaces]
        self.heads = list(heads)
        self.base_url = base_url
        self.keepalive_s = keepalive_s
        self.max_duration_s = max_duration_s
        self.shutdown = shutdown
        self.clock_ms = clock_ms

    async def frames(self) -> AsyncIterator[bytes]:
        wake = asyncio.Event()
        started = time.monotonic()
        with self.hub.follow(self.heads, wake):
            for state, head in zip(self.states, self.heads, strict=True):
                state.epoch = head.epoch
                yield (await self._first(state, head)).frame()
            last_frame = time.monotonic()
            while not self.shutdown.is_set():
                wake.clear()
                for state in self.states:
                    latest = self.hub.latest(state.topic)
                    if latest is None:
                        continue
                    if latest.deleted or latest.head_seq < 1 or not latest.ext:
                        return  # the namespace is gone: fatal, the client reconnects
                    if latest.epoch == state.epoch and latest.head_seq == state.seen:
                        continue
                    event = await self._advance(state, latest)
                    if event is not None:
                        yield event.frame()
                        last_frame = time.monotonic()
                now = time.monotonic()
                if now - started >= self.max_duration_s:
                    return
                if now - last_frame >= self.keepalive_s:
                    yield KEEPALIVE_FRAME
                    last_frame = now
                timeout = min(
                    self.keepalive_s - (now - last_frame),
                    self.max_duration_s - (now - started),
                )
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(0.0, timeout)):
                        await wake.wait()  # shutdown sets it too (FlagHub.wake_all)

    # --- events ---------------------------------------------------------------------------
    async def _state_at(self, state: _Namespace, head: Head) -> tuple[TreeIndex, Closure]:
        sub = state.sub
        index = await self.store.index(sub.tenant, sub.slug, head.ext)
        return index, self.store.closure(index, sub.selection)

    def _snapshot(self, state: _Namespace, version: int, closure: Closure) -> SnapshotRef:
        sub = state.sub
        token = self.signer.issue(
            SnapshotScope(
                self.principal.id, sub.tenant, sub.slug, version, sub.selection.canonical()
            )
        )
        url = snapshot_url(
            self.base_url,
            tenant=sub.tenant,
            slug=sub.slug,
            version=version,
            selection=sub.selection,
            token=token,
        )
        return SnapshotRef(url, closure.tar_size)

    def _mark(
        self, state: _Namespace, head: Head, index: TreeIndex, closure: Closure, sent: bool
    ) -> None:
        state.epoch, state.seen = head.epoch, head.head_seq
        if sent:
            state.version, state.closure, state.index = head.head_seq, closure, index

    async def _first(self, state: _Namespace, head: Head) -> SseEvent:
        index, closure = await self._state_at(state, head)
        event = plan_version_event(
            label=state.sub.label,
            version=head.head_seq,
            prev_version=None,
            prev_closure_hash=None,
            closure_hash=closure.hash,
            changes=None,
            snapshot=lambda: self._snapshot(state, head.head_seq, closure),
            policy=self.policy,
        )
        assert event is not None
        self._mark(state, head, index, closure, sent=True)
        return event

    async def _advance(self, state: _Namespace, head: Head) -> SseEvent | None:
        index, closure = await self._state_at(state, head)
        sub, version = state.sub, head.head_seq
        if head.epoch != state.epoch or version < state.version:
            # The namespace's history went backwards (restored, or deleted and recreated):
            # the client's tracked version means nothing here any more.
            self._mark(state, head, index, closure, sent=True)
            state.inline_sent = False
            return resync_event(
                label=sub.label,
                current_version=version,
                reason=ResyncReason.UNKNOWN_SINCE,
                snapshot_url=self._snapshot(state, version, closure).url,
            )
        assert state.closure is not None and state.index is not None
        if version == state.version:
            state.seen = version
            return None
        prior_retained = await self.store.is_retained(head, state.version, self.clock_ms())
        if not prior_retained and state.inline_sent and closure.hash != state.closure.hash:
            self._mark(state, head, index, closure, sent=True)
            state.inline_sent = False
            return resync_event(
                label=sub.label,
                current_version=version,
                reason=ResyncReason.VERSION_TOO_OLD,
                snapshot_url=self._snapshot(state, version, closure).url,
            )
        # Connections in the same state with the same subscription get the same inline event
        # (it holds nothing per connection): one publish computes it once, not once each.
        key = (
            sub.label,
            sub.selection.canonical(),
            state.version,
            state.index.tree_hash,
            version,
            index.tree_hash,
        )
        if prior_retained:
            shared = self.hub.inline_events.get(key)
            if shared is not None:
                self._mark(state, head, index, closure, sent=True)
                state.inline_sent = True
                return shared
        changes: list[FileChange] | None = None
        if prior_retained:
            changes = await self._changes(state, index, closure)
        event = plan_version_event(
            label=sub.label,
            version=version,
            prev_version=state.version,
            prev_closure_hash=state.closure.hash,
            closure_hash=closure.hash,
            changes=changes,
            snapshot=lambda: self._snapshot(state, version, closure),
            policy=self.policy,
        )
        self._mark(state, head, index, closure, sent=event is not None)
        if event is not None and event.delivery == "inline":
            state.inline_sent = True
            self.hub.inline_events.put(key, event, len(event.data) + 200)
        return event

    async def _changes(
        self, state: _Namespace, index: TreeIndex, closure: Closure
    ) -> list[FileChange]:
        """The delta from the last delivered closure; contents are fetched only when the
        churn budget still allows an inline event (over it, `plan_version_event` answers a
        snapshot before it looks at any content)."""
        assert state.closure is not None and state.index is not None
        old, new = state.closure.digests, closure.digests
        ops: list[tuple[str, Op]] = []
        for path in new.keys() - old.keys():
            ops.append((path, Op.ENTER if path in state.index.files else Op.ADDED))
        for path in new.keys() & old.keys():
            if new[path] != old[path]:
                ops.append((path, Op.MODIFIED))
        for path in old.keys() - new.keys():
            ops.append((path, Op.LEAVE if path in index.files else Op.REMOVED))
        ops.sort(key=lambda item: item[0].encode("utf-8"))
        if len(ops) > self.policy.churn_max_entries:
            return [FileChange(path, op) for path, op in ops]
        wanted = [new[path] for path, op in ops if op in (Op.ADDED, Op.MODIFIED, Op.ENTER)]
        sub = state.sub
        got = await self.store.contents(sub.tenant, sub.slug, wanted)
        return [
            FileChange(
                path, op, got[new[path]] if op in (Op.ADDED, Op.MODIFIED, Op.ENTER) else None
            )
            for path, op in ops
        ]
