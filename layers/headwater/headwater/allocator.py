"""The C allocator of a serving process that stays up (uvicorn: `make run`, the streaming
function behind the Web Adapter, Managed Instances): docs/configuration.md "Memory budgets".

The caches and buffers have byte budgets, but the RSS a budget costs is glibc's to decide.
glibc gives each thread that allocates its own arena (up to 8 per core) and keeps what is
freed in them for reuse; a server's ~60 threads (the storage pool, the background pool,
uvicorn) each hold on to their peak. The soak (bench/bench_soak.py) found ~170 MB in thread
arenas, ~50 MB of it free memory `malloc_trim` gave back, most of it kept after the first
seals (a segment's encode is a few MB of transient buffers on a pool thread). So a serving
process caps the arenas (`mallopt(M_ARENA_MAX)`, before its pools start threads: arenas
made later obey it) and returns free memory every `malloc_trim_ms`. It can also fix the
mmap threshold (`mallopt(M_MMAP_THRESHOLD)`, `malloc_mmap_threshold`; off by default): glibc's
own rises to the size of each large block freed, up to 32 MiB, so after a seal the next large
buffers come from the heap, which gives memory back only from its top. In the soak a fixed
threshold moved RSS's steps earlier rather than lower, so it stays a knob.

Only on glibc (Linux, as on Lambda); elsewhere both are no-ops. The buffered function (Mangum)
never calls this: it runs one request at a time and its environment is recycled."""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import os
import sys

log = logging.getLogger(__name__)

M_ARENA_MAX = -8  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
_libc: ctypes.CDLL | None = None
_looked = False


def _glibc() -> ctypes.CDLL | None:
    global _libc, _looked
    if not _looked:
        _looked = True
        if sys.platform.startswith("linux"):
            try:
                lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                if hasattr(lib, "mallopt") and hasattr(lib, "malloc_trim"):
                    _libc = lib
            except OSError:
                _libc = None
    return _libc


def rss_bytes() -> int | None:
    """This process's resident memory now (Linux /proc; None elsewhere)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def limit_arenas(n: int) -> bool:
    """Cap glibc's arenas at `n` (0: leave glibc's default). True when applied."""
    lib = _glibc()
    if n <= 0 or lib is None:
        return False
    return bool(lib.mallopt(M_ARENA_MAX, n))


def fix_mmap_threshold(n: int) -> bool:
    """Serve every allocation of `n` bytes or more from its own mmap (0: leave glibc's
    dynamic threshold). True when applied."""
    lib = _glibc()
    if n <= 0 or lib is None:
        return False
    return bool(lib.mallopt(M_MMAP_THRESHOLD, n))


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
            "uordblks", "fordblks", "keepcost",
        )
    ]  # fmt: skip


def heap() -> dict[str, int] | None:
    """glibc's own view of its heap (mallinfo2, every arena): what it holds from the OS, what
    of that is in use and free, what is mapped on its own (None without glibc 2.33+)."""
    lib = _glibc()
    if lib is None or not hasattr(lib, "mallinfo2"):
        return None
    lib.mallinfo2.restype = _MallInfo2
    mi = lib.mallinfo2()
    return {
        "heap_bytes": mi.arena,
        "in_use_bytes": mi.uordblks,
        "free_bytes": mi.fordblks,
        "mmapped_bytes": mi.hblkhd,
        "top_releasable_bytes": mi.keepcost,
    }


def trim() -> bool:
    """Give the free memory glibc keeps back to the OS (True when it released some)."""
    lib = _glibc()
    return lib is not None and bool(lib.malloc_trim(0))


async def trim_timer(interval_s: float) -> None:
    """`trim` every `interval_s`, on a worker thread (it walks the heap: a few ms)."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await asyncio.to_thread(trim)
        except Exception:  # never let upkeep of memory end the server
            log.warning("malloc_trim failed", exc_info=True)
