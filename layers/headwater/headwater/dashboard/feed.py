"""The per-process dashboard feed: one follower of the sentiment topic however many streams
are open, holding the metrics tally and the recent `sentiment_update`s.

Building: the sentiment rollup (when the manifest's entry is of the topic's current history:
same epoch, delete version and floors) is the base, and the records after its
`through_seq` are read and folded; without a usable rollup the whole live log is read.
After that only new records are read: each poll (or at once when an append in this
process commits) reads the head, then the records since the last one folded. A head whose
history changed (records deleted or evicted, the topic recreated) is rebuilt the same way,
so the tally always counts exactly the live items and never rescans history on a tick.

Recent updates (the last `buffer_events` items) are the Last-Event-ID resume window: every
item with a seq above `floor` is in it. Streams follow the feed with an asyncio.Event that
is set after every change."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from headwater import jsoncodec
from headwater.dashboard.ids import EPOCH_MASK, Position, topic_check
from headwater.dashboard.items import parse_item
from headwater.dashboard.metrics import Tally
from headwater.engine import LogEngine
from headwater.engine.ports import Head
from headwater.rollups import RollupReader
from headwater.settings import DashboardSettings

log = logging.getLogger(__name__)

PAGE_RECORDS = 1_000
PAGE_BYTES = 4 << 20
RETRY_S = 1.0


@dataclass(frozen=True, slots=True)
class Update:
    seq: int
    ticker: str
    data: bytes  # the sentiment_update event's data (compact JSON)


def _state(head: Head) -> tuple[int, int, int, int]:
    return (head.epoch, head.del_ver, head.earliest_seq, head.evict_floor)


def _order(head: Head) -> tuple[int, int, int, int, int]:
    # Every field only grows within an epoch: an eventually consistent read may return a
    # head older than one already folded, which must not roll the feed back.
    return (head.epoch, int(head.deleted), head.head_seq, head.del_ver, head.earliest_seq)


class DashboardFeed:
    def __init__(
        self, engine: LogEngine, settings: DashboardSettings, clock: Callable[[], int]
    ) -> None:
        self.engine = engine
        self.settings = settings
        self.topic = settings.topic
        self.check = topic_check(settings.topic)
        self.clock = clock
        self.reader = RollupReader(engine.blobs, settings.rollup_prefix)
        self.tally = Tally()
        self.epoch = 0
        self.cursor = 0  # the last seq folded into the tally
        self.floor = 0  # every item with seq > floor (up to cursor) is in `updates`
        self.updates: deque[Update] = deque()
        self.version = 0  # bumped on every change of the tally or the updates
        self.built = False
        self._state: tuple[int, int, int, int] | None = None
        self._seen: Head | None = None  # the newest head synced to
        self._followers: set[asyncio.Event] = set()
        self._task: asyncio.Task[None] | None = None
        self._sync_lock: asyncio.Lock | None = None
        self._ready: asyncio.Event | None = None
        self.error: BaseException | None = None  # the last sync failure (cleared on success)

    # --- following -----------------------------------------------------------------------
    @contextlib.contextmanager
    def follow(self, wake: asyncio.Event) -> Iterator[None]:
        """Set `wake` after every change while in the block (starts the follower task)."""
        self._followers.add(wake)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
        try:
            yield
        finally:
            self._followers.discard(wake)
            if not self._followers and self._task is not None:
                self._task.cancel()
                self._task = None

    def wake_all(self) -> None:
        for wake in list(self._followers):
            wake.set()

    async def ready(self, timeout_s: float) -> None:
        """Wait until the first build is done (TimeoutError, or the build's error)."""
        if self.built:
            return
        if self._ready is None:
            self._ready = asyncio.Event()
        async with asyncio.timeout(timeout_s):
            while not self.built:
                if self.error is not None:
                    raise self.error
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.1):
                        await self._ready.wait()

    async def _run(self) -> None:
        woke: bool | None = None  # first: a strongly consistent head read
        while True:
            try:
                await self.sync(woke=woke)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # storage trouble: keep following, a little later
                self.error = exc
                log.warning("dashboard feed sync failed: %r; retrying", exc)
                self.wake_all()
                await asyncio.sleep(RETRY_S)
                woke = None
                continue
            woke = await self.engine.notifier.wait(self.topic, self.settings.poll_ms / 1000)

    # --- syncing -------------------------------------------------------------------------
    async def sync(self, *, woke: bool | None = None) -> None:
        """Fold everything up to the topic's head (one sync at a time). `woke` None: the
        head is read strongly; True: an append in this process woke us (its committed head
        is known without a read); False: a poll (an eventually consistent read: appends of
        other processes show up within a poll or two)."""
        if self._sync_lock is None:
            self._sync_lock = asyncio.Lock()
        async with self._sync_lock:
            head = self.engine.head_hint(self.topic) if woke else None
            if head is None or (self.built and head.head_seq <= self.cursor):
                head = await self.engine.head_of(self.topic, consistent=woke is None)
            seen = self._seen
            if seen is not None and (head is None or _order(head) < _order(seen)):
                head = seen  # a stale eventually consistent read (deletes leave a marker)
            changed = await self._sync_to(head)
            self._seen = head
            self.error = None
            if not self.built:
                self.built = True
                if self._ready is not None:
                    self._ready.set()
                changed = True
        if changed:
            self.version += 1
            self.wake_all()

    async def _sync_to(self, head: Head | None) -> bool:
        if head is None or head.deleted:
            if self._state is None and self.built:
                return False
            self._reset(Tally(), 0, 0, None)
            self.updates.clear()
            return True
        if _state(head) != self._state:
            await self._rebuild(head)
            return True
        if head.head_seq <= self.cursor:
            return False
        tally = self.tally
        fresh = await self._read(head, self.cursor, tally)
        self._push(fresh)
        self.cursor = head.head_seq
        tally.prune(self.clock())
        return True

    def _reset(
        self, tally: Tally, epoch: int, cursor: int, state: tuple[int, int, int, int] | None
    ) -> None:
        self.tally, self.epoch, self.cursor, self._state = tally, epoch, cursor, state
        self.floor = cursor

    async def _rebuild(self, head: Head) -> None:
        tally = Tally()
        start = 0
        manifest = await self.engine.run_io(self.reader.manifest)
        entry = manifest.topics.get(self.topic) if manifest is not None else None
        if (
            entry is not None
            and entry.sentiment is not None
            and entry.epoch == head.epoch
            and entry.state is not None
            and entry.state
            == {
                "epoch": head.epoch,
                "del_ver": head.del_ver,
                "earliest_seq": head.earliest_seq,
                "evict_floor": head.evict_floor,
            }
            and entry.through_seq <= head.head_seq
        ):
            raw = await self.engine.find_blob(entry.sentiment)
            if raw is not None:
                tally.add_rollup(jsoncodec.loads(raw))
                start = entry.through_seq
        fresh = await self._read(head, start, tally)
        buffer = self.settings.buffer_events
        if len(fresh) < buffer and start > 0:
            # The resume window reaches back into what the rollup covers: read it too.
            older = await self._read(head, max(0, start - buffer), None, upto=start)
            fresh = older + fresh
            floor = max(0, start - buffer)
        else:
            floor = start
        tally.prune(self.clock())
        self._reset(tally, head.epoch, head.head_seq, _state(head))
        self.floor = floor
        self.updates.clear()
        self._push(fresh)
        log.info(
            "dashboard feed built for %s: %d items (rollup through %d, read %d..%d)",
            self.topic,
            tally.items,
            start,
            start + 1,
            head.head_seq,
        )

    async def _read(
        self, head: Head, after: int, tally: Tally | None, upto: int | None = None
    ) -> list[Update]:
        """The items in (after, upto or head], folded into `tally` when given."""
        out: list[Update] = []
        end = head.head_seq if upto is None else upto
        while after < end:
            page = await self.engine.read_range(
                self.topic, after, PAGE_RECORDS, PAGE_BYTES, head=head, upto=end
            )
            for rec in page.records:
                try:
                    data = jsoncodec.loads(rec.data_raw)
                except ValueError:
                    continue
                item = parse_item(data, rec.ts)
                if item is None:
                    continue
                if tally is not None:
                    tally.add(item, rec.ts)
                out.append(Update(rec.seq, item.ticker, jsoncodec.dumps(item.as_json())))
            if page.next_seq <= after:
                break
            after = page.next_seq
        return out

    def _push(self, fresh: list[Update]) -> None:
        self.updates.extend(fresh)
        while len(self.updates) > self.settings.buffer_events:
            self.floor = self.updates.popleft().seq

    # --- reading -------------------------------------------------------------------------
    def resumes(self, pos: Position | None) -> bool:
        """Whether a stream at `pos` can resume from the buffer: same incarnation, and no
        item after it has left the buffer."""
        return (
            pos is not None
            and self._state is not None
            and pos.epoch == self.epoch & EPOCH_MASK
            and pos.seq >= self.floor
        )

    def updates_after(self, seq: int) -> list[Update]:
        """The buffered updates with a seq above `seq`, oldest first."""
        out: list[Update] = []
        for u in reversed(self.updates):
            if u.seq <= seq:
                break
            out.append(u)
        out.reverse()
        return out

    def metrics(self) -> bytes:
        return jsoncodec.dumps(self.tally.metrics(self.clock()))
