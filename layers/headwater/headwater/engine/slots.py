"""Slots reserved and not yet written: readers wait for them, and fill the ones whose writer
is overdue (docs/storage.md "The sequencer"; CORFU's hole filling).

Seqs come from the topic's counter, so a head may name seqs whose frame is still on its way
(the writer reserved, then sends one put), or never comes (the writer died in between, or
botocore re-sent a reservation that had applied). A read never skips such a slot: the chain
of frames stops before it, and the reader waits here for the frame to appear. If it has not
appeared `hole_timeout_ms` after this process first found the log stalled at or before it,
the reader puts a hole there (a conditional put: whoever is first owns the key). A late
writer's put then fails, and it reserves again; its append was never acknowledged. So no
read waits longer than the hole timeout on a slot, and none ever returns records past a slot
that can still commit.

One process resolves a slot once: concurrent readers of the same slot wait on the first."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from headwater.engine.cache import FrameCache
from headwater.engine.ports import Head, HeadStore, KnownRecords, LogTailStore
from headwater.engine.records import Frame
from headwater.engine.retention import frame_expiry_s
from headwater.engine.sealed import StaleHead
from headwater.settings import Settings

log = logging.getLogger(__name__)

FIRST_POLL_S = 0.002
MAX_POLL_S = 0.05
STALL_MEMORY_S = 60.0  # a stall older than this is forgotten (a new one starts its clock)


class SlotResolver:
    def __init__(
        self,
        heads: HeadStore,
        tail: LogTailStore,
        cache: FrameCache,
        settings: Settings,
        clock: Callable[[], int],
    ) -> None:
        self.heads = heads
        self.tail = tail
        self.cache = cache
        self.settings = settings
        self.clock = clock
        self._lock = threading.Lock()
        self._inflight: dict[tuple[str, int], Future[Frame]] = {}
        # log key -> (when this process found it stalled, the head seq it knew then): every
        # seq up to that head seq was reserved by then.
        self._stalls: dict[str, tuple[float, int]] = {}
        self.waits = 0  # slots this process found pending (for tests and metrics)
        self.filled = 0  # holes this process put

    def read_chain(
        self,
        head: Head,
        after_seq: int,
        upto_seq: int,
        max_records: int,
        max_bytes: int = 0,
        known: KnownRecords | None = None,
    ) -> list[Frame]:
        """LogTailStore.read_frames, through pending slots: the chain from after_seq + 1 up
        to `upto_seq` (a seq the head has reserved) or the budget, resolving every slot it
        stops at. Raises StaleHead when the log moved under `head`."""
        out: list[Frame] = []
        covered = after_seq
        got = nbytes = 0
        while covered < upto_seq:
            budget = max(1, max_bytes - nbytes) if max_bytes else 0
            fetched = self.tail.read_frames(
                head, covered, upto_seq, max(1, max_records - got), budget, known
            )
            fetched = [f for f in fetched if f.last_seq > covered]
            for f in fetched:
                got += f.last_seq - max(f.first_seq, covered + 1) + 1
                nbytes += f.payload_bytes
                covered = f.last_seq
            out.extend(fetched)
            if covered >= upto_seq or got >= max_records or 0 < max_bytes <= nbytes:
                break
            frame = self.resolve(head, covered + 1)
            self.cache.put(head.log_key, frame, head.del_ver)
            got += frame.last_seq - covered
            nbytes += frame.payload_bytes
            covered = frame.last_seq
            out.append(frame)
        return out

    def resolve(self, head: Head, key: int) -> Frame:
        """The frame (or hole) at `key`, a seq `head` has reserved that the chain stopped
        at: waits for its writer, then fills it. Raises StaleHead when the head moved so that
        `key` is no longer a slot to wait on (sealed, evicted, deleted)."""
        slot = (head.log_key, key)
        with self._lock:
            fut = self._inflight.get(slot)
            owner = fut is None
            if fut is None:
                fut = self._inflight[slot] = Future()
        if not owner:
            return fut.result()
        try:
            frame = self._resolve(head, key)
        except BaseException as exc:
            fut.set_exception(exc)
            raise
        else:
            fut.set_result(frame)
            return frame
        finally:
            with self._lock:
                self._inflight.pop(slot, None)

    def _deadline(self, head: Head, key: int) -> float:
        timeout = self.settings.hole_timeout_ms / 1000
        now = time.monotonic()
        with self._lock:
            stall = self._stalls.get(head.log_key)
            if stall is None or stall[1] < key or now - stall[0] > STALL_MEMORY_S:
                if len(self._stalls) > 1024:
                    self._stalls = {
                        k: v for k, v in self._stalls.items() if now - v[0] <= STALL_MEMORY_S
                    }
                stall = self._stalls[head.log_key] = (now, head.head_seq)
        return stall[0] + timeout

    def _resolve(self, head: Head, key: int) -> Frame:
        deadline = self._deadline(head, key)
        checked = False
        delay = FIRST_POLL_S
        counted = False
        while True:
            got = self.tail.get_frames(head, [key]).get(key)
            if got is not None:
                return got
            if not checked:
                # Is it still a slot? The log may have moved under an old head: sealed or
                # evicted past it, or deleted.
                fresh = self.heads.get(head.topic)
                if (
                    fresh is None
                    or fresh.deleted
                    or fresh.epoch != head.epoch
                    or key < fresh.earliest_seq
                    or key <= fresh.sealed_through
                    or key > fresh.head_seq
                ):
                    raise StaleHead
                checked = True
            if not counted:
                self.waits += 1
                counted = True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, MAX_POLL_S)
        # Overdue. A cursor can only stop inside a frame whose holder the chain missed if the
        # log moved; look once more before putting a hole.
        for f in self.tail.read_frames(head, key - 1, key, 1):
            if f.first_seq <= key <= f.last_seq:
                return f
        expires = frame_expiry_s(head.cfg, self.settings.tiering, self.clock())
        frame = self.tail.fill_hole(head, key, None, 0, expires)
        if frame.hole and frame.first_seq == key:
            self.filled += 1
            log.info("filled an overdue slot of %s at seq %d", head.log_key, key)
        return frame
