"""A serving process caps glibc's arenas and gives free memory back on a timer
(headwater/allocator.py; issue 42's soak: RSS kept in thread arenas)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time

import pytest
from fastapi.testclient import TestClient

from headwater import allocator
from headwater.http.app import create_app
from headwater.settings import Settings
from headwater.storage.clients import AwsClients

pytestmark = pytest.mark.api


def test_settings_default_to_two_arenas_a_trim_a_minute_and_glibc_s_mmap_threshold() -> None:
    on = Settings.from_env({})
    assert (on.malloc_arena_max, on.malloc_trim_ms, on.malloc_mmap_threshold) == (
        2,
        60_000,
        0,
    )
    set_ = Settings.from_env(
        {
            "HEADWATER_MALLOC_ARENA_MAX": "0",
            "HEADWATER_MALLOC_TRIM_MS": "0",
            "HEADWATER_MALLOC_MMAP_THRESHOLD": "131072",
        }
    )
    assert (set_.malloc_arena_max, set_.malloc_trim_ms, set_.malloc_mmap_threshold) == (
        0,
        0,
        131072,
    )


def test_the_serving_process_caps_arenas_before_its_services_and_trims_on_a_timer(
    settings: Settings, aws: AwsClients, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(allocator, "limit_arenas", lambda n: calls.append(f"arenas {n}") or True)
    monkeypatch.setattr(
        allocator, "fix_mmap_threshold", lambda n: calls.append(f"mmap {n}") or True
    )
    monkeypatch.setattr(allocator, "trim", lambda: calls.append("trim") or True)
    app = create_app(
        dataclasses.replace(
            settings, malloc_arena_max=3, malloc_trim_ms=20, malloc_mmap_threshold=4096
        ),
        aws,
    )
    built_first = []
    real_get = app.state.services.get

    def get():  # the services (and their thread pools) are built after the cap
        built_first.append(list(calls))
        return real_get()

    monkeypatch.setattr(app.state.services, "get", get)
    with TestClient(app) as client:
        assert client.get("/healthz").status_code == 200
        deadline = time.monotonic() + 10
        while calls.count("trim") < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
    assert built_first and built_first[0] == ["arenas 3", "mmap 4096"]
    assert calls.count("trim") >= 2
    # the timer stops with the app
    stopped = calls.count("trim")
    time.sleep(0.1)
    assert calls.count("trim") == stopped


def test_no_trim_timer_when_turned_off(
    settings: Settings, aws: AwsClients, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(allocator, "trim", lambda: calls.append("trim") or True)
    app = create_app(dataclasses.replace(settings, malloc_trim_ms=0), aws)
    with TestClient(app) as client:
        assert client.get("/healthz").status_code == 200
        time.sleep(0.1)
    assert calls == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_on_glibc_the_calls_reach_the_allocator() -> None:
    assert allocator._glibc() is not None
    assert allocator.limit_arenas(0) is False  # 0 leaves glibc's default
    assert allocator.fix_mmap_threshold(0) is False
    assert isinstance(allocator.trim(), bool)


# Run in a process of its own: glibc's threshold is process-wide state.
_MMAP_PROBE = """
import ctypes, sys
from headwater import allocator

class Info(ctypes.Structure):  # struct mallinfo2 (glibc 2.33+)
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]

lib = ctypes.CDLL("libc.so.6")
lib.mallinfo2.restype = Info
lib.malloc.restype = ctypes.c_void_p
lib.malloc.argtypes = [ctypes.c_size_t]
lib.free.argtypes = [ctypes.c_void_p]
if sys.argv[1] == "fixed":
    assert allocator.fix_mmap_threshold(128 << 10)
lib.free(lib.malloc(8 << 20))  # a large transient, as a segment's encode makes
before = lib.mallinfo2().hblks
block = lib.malloc(1 << 20)
print(lib.mallinfo2().hblks - before)
lib.free(block)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
@pytest.mark.parametrize(("mode", "mmapped"), [("dynamic", 0), ("fixed", 1)])
def test_a_fixed_mmap_threshold_keeps_large_blocks_out_of_the_heap(mode: str, mmapped: int) -> None:
    """glibc raises its mmap threshold to the size of each mmapped block freed, so after one
    8 MiB transient a 1 MiB block comes from the heap, which only shrinks from its top (the
    soak's RSS steps at the first seals). With the threshold fixed it is mapped on its own
    and unmapped when freed."""
    out = subprocess.run(
        [sys.executable, "-c", _MMAP_PROBE, mode], capture_output=True, text=True, check=True
    )
    assert int(out.stdout.strip()) == mmapped
