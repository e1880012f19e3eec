"""In-process cache of decoded frames. Frames are immutable except for their deleted-seq set,
and every record delete bumps the head's del_ver, so a cached frame is valid exactly while
the head's del_ver equals the one it was cached under. Used from the engine's I/O threads
and the event loop at once, so every method holds one lock."""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from headwater.engine.records import Frame

# Measured with tracemalloc on Python 3.11-3.13 (tests/unit/test_memory_budgets.py).
RECORD_COST = 240
FRAME_COST = 700


@dataclass(slots=True)
class _TopicFrames:
    """One topic's cached frames, keyed by last seq, and their keys in order."""

    keys: list[int] = field(default_factory=list)  # sorted frame last_seqs
    frames: dict[int, tuple[Frame, int]] = field(default_factory=dict)


class FrameCache:
    """Decoded frames by topic, least recently used dropped first once what they hold passes
    `max_bytes` (HEADWATER_FRAME_CACHE_BYTES)."""

    def __init__(self, max_bytes: int) -> None:
        self._max = max_bytes
        self._bytes = 0
        self._topics: dict[str, _TopicFrames] = {}
        self._lru: OrderedDict[tuple[str, int], int] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def _cost(frame: Frame) -> int:
        """What a cached frame holds in memory, as tracemalloc measures it (within ~5%:
        tests/unit/test_memory_budgets.py): its records' bytes (payload_bytes), each record's
        tuple, ints and bytes headers (RECORD_COST), and the frame object, its list and set
        and this cache's LRU and index entries for it (FRAME_COST)."""
        return frame.payload_bytes + RECORD_COST * len(frame.records) + FRAME_COST

    def put(self, log_key: str, frame: Frame, del_ver: int) -> None:
        if self._max <= 0:
            return
        with self._lock:
            self._put(log_key, frame, del_ver)

    def _put(self, log_key: str, frame: Frame, del_ver: int) -> None:
        t = self._topics.setdefault(log_key, _TopicFrames())
        if frame.last_seq in t.frames:
            self._bytes -= self._lru.pop((log_key, frame.last_seq), 0)
        else:
            bisect.insort(t.keys, frame.last_seq)
        t.frames[frame.last_seq] = (frame, del_ver)
        cost = self._cost(frame)
        self._lru[(log_key, frame.last_seq)] = cost
        self._bytes += cost
        while self._bytes > self._max and self._lru:
            (k, seq), c = self._lru.popitem(last=False)
            self._bytes -= c
            tf = self._topics.get(k)
            if tf is not None and seq in tf.frames:
                del tf.frames[seq]
                tf.keys.pop(bisect.bisect_left(tf.keys, seq))
                if not tf.keys:
                    del self._topics[k]

    def run(self, log_key: str, after_seq: int, del_ver: int) -> list[Frame]:
        """Cached frames that contiguously cover seqs after `after_seq`, valid for del_ver."""
        with self._lock:
            return self._run(log_key, after_seq, del_ver)

    def _run(self, log_key: str, after_seq: int, del_ver: int) -> list[Frame]:
        t = self._topics.get(log_key)
        if t is None:
            return []
        out: list[Frame] = []
        i = bisect.bisect_right(t.keys, after_seq)
        expect = after_seq + 1
        while i < len(t.keys):
            frame, ver = t.frames[t.keys[i]]
            if ver != del_ver or frame.first_seq > expect:
                break
            out.append(frame)
            self._lru.move_to_end((log_key, frame.last_seq))
            expect = frame.last_seq + 1
            i += 1
        return out

    def frame(self, log_key: str, last_seq: int, del_ver: int) -> Frame | None:
        """The cached frame ending at `last_seq`, if valid for del_ver."""
        with self._lock:
            t = self._topics.get(log_key)
            entry = t.frames.get(last_seq) if t is not None else None
            if entry is None or entry[1] != del_ver:
                return None
            self._lru.move_to_end((log_key, last_seq))
            return entry[0]

    def frame_from(self, log_key: str, first_seq: int, del_ver: int) -> Frame | None:
        """The cached frame starting at `first_seq` (a tail frame's key), if valid."""
        with self._lock:
            t = self._topics.get(log_key)
            if t is None:
                return None
            i = bisect.bisect_left(t.keys, first_seq)
            if i == len(t.keys):
                return None
            frame, ver = t.frames[t.keys[i]]
            if ver != del_ver or frame.first_seq != first_seq:
                return None
            self._lru.move_to_end((log_key, frame.last_seq))
            return frame

    @property
    def bytes(self) -> int:
        """What the cached frames hold now (at most max_bytes)."""
        return self._bytes

    @property
    def max_bytes(self) -> int:
        return self._max

    def drop_topic(self, log_key: str) -> None:
        with self._lock:
            self._drop_topic(log_key)

    def _drop_topic(self, log_key: str) -> None:
        t = self._topics.pop(log_key, None)
        if t is None:
            return
        for seq in t.keys:
            self._bytes -= self._lru.pop((log_key, seq), 0)
