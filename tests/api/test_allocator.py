"""A serving process caps glibc's arenas and gives free memory back on a timer
(headwater/allocator.py; issue 42's soak: RSS kept in thread arenas)."""

from __future__ import annotations

import dataclasses
import sys
import time

import pytest
from fastapi.testclient import TestClient

from headwater import allocator
from headwater.http.app import create_app
from headwater.settings import Settings
from headwater.storage.clients import AwsClients

pytestmark = pytest.mark.api


def test_settings_default_to_two_arenas_and_a_trim_a_minute() -> None:
    assert (Settings.from_env({}).malloc_arena_max, Settings.from_env({}).malloc_trim_ms) == (
        2,
        60_000,
    )
    off = Settings.from_env({"HEADWATER_MALLOC_ARENA_MAX": "0", "HEADWATER_MALLOC_TRIM_MS": "0"})
    assert (off.malloc_arena_max, off.malloc_trim_ms) == (0, 0)


def test_the_serving_process_caps_arenas_before_its_services_and_trims_on_a_timer(
    settings: Settings, aws: AwsClients, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(allocator, "limit_arenas", lambda n: calls.append(f"arenas {n}") or True)
    monkeypatch.setattr(allocator, "trim", lambda: calls.append("trim") or True)
    app = create_app(dataclasses.replace(settings, malloc_arena_max=3, malloc_trim_ms=20), aws)
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
    assert built_first and built_first[0] == ["arenas 3"]
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
    assert isinstance(allocator.trim(), bool)
