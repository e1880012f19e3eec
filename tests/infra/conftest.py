"""Shared fixtures for the infra tier: repo paths, the parsed template, fake AWS env."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "template.yaml"

FAKE_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled",
}

# Env vars from the developer's shell that would redirect or authenticate clients.
LEAKY_ENV = (
    "AWS_PROFILE",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_DYNAMODB",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ENDPOINT_URL_SSM",
    "TOPICS_API_KEYS",
    "HEADWATER_API_KEYS_PARAMETER",
)


@pytest.fixture(scope="session")
def template() -> dict[str, Any]:
    from cfnlint.decode import decode

    tpl, errors = decode(str(TEMPLATE))
    assert not errors, errors
    assert tpl is not None
    return tpl


@pytest.fixture(autouse=True)
def _core_loggers_restored() -> Iterator[None]:
    """Importing a function's handler points the core's loggers at that function's JSON
    handler (headwater/obs.py); put them back after each test, so later tests (caplog
    included) see the usual propagation to the root logger."""
    core = logging.getLogger("headwater")
    handlers, propagate, level = list(core.handlers), core.propagate, core.level
    yield
    core.handlers[:] = handlers
    core.propagate = propagate
    core.setLevel(level)


@pytest.fixture
def fake_aws_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for name in LEAKY_ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in FAKE_AWS_ENV.items():
        monkeypatch.setenv(name, value)
    return dict(FAKE_AWS_ENV)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def free_port() -> Callable[[], int]:
    return _free_port


@pytest.fixture
def moto_server(fake_aws_env: dict[str, str]) -> Iterator[str]:
    """A moto server on loopback (for code running in other processes); yields its URL."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, f"moto server exited with {proc.returncode}"
            try:
                httpx.get(f"{endpoint}/moto-api/", timeout=1.0)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "moto server not ready after 30s"
                time.sleep(0.1)
        yield endpoint
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
