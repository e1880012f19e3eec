"""The frame cache is shared by the engine's I/O threads and the event loop: concurrent puts
(with evictions) and reads must never corrupt it or raise."""

from __future__ import annotations

import threading
import time

import pytest

from headwater.engine.cache import FrameCache
from headwater.engine.records import Frame, NewRecord, stored

pytestmark = pytest.mark.unit


def _frame(seq: int) -> Frame:
    rec = stored(NewRecord(seq, size=8), seq, 0)
    return Frame(first_seq=seq, last_seq=seq, ts=0, records=[rec], payload_bytes=8)


def test_concurrent_puts_evictions_and_reads() -> None:
    cache = FrameCache(max_bytes=40 * 168)  # room for ~40 one-record frames: constant eviction
    errors: list[BaseException] = []
    stop = time.monotonic() + 1.0

    def writer(offset: int) -> None:
        try:
            seq = offset
            while time.monotonic() < stop:
                cache.put("t#1", _frame(seq), 0)
                seq += 2
                if seq % 500 == 0:
                    cache.drop_topic("t#1")
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    def reader() -> None:
        try:
            while time.monotonic() < stop:
                for f in cache.run("t#1", 0, 0):
                    assert f.first_seq == f.last_seq
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in (1, 2)]
    threads += [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    frames = cache.run("t#1", 0, 0)
    seqs = [f.last_seq for f in frames]
    assert seqs == sorted(seqs) and len(seqs) == len(set(seqs))
