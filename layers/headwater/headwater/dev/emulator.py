"""A moto server on loopback, run as a child process (so several servers and tests can share
it, and it never competes with the app for the GIL)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from types import TracebackType

FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled",
}

ENDPOINT_VARS = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_S3")


@contextlib.contextmanager
def endpoints_restored() -> Iterator[None]:
    """Put the AWS_ENDPOINT_URL* variables back as they were when the block ends."""
    saved = {v: os.environ.get(v) for v in ENDPOINT_VARS}
    try:
        yield
    finally:
        for var, value in saved.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value


def die_with_parent() -> None:
    """Linux: the child gets SIGTERM when the process that started it dies (no orphans)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def stop_process(proc: subprocess.Popen[bytes] | None, grace_s: float = 10) -> int | None:
    """SIGTERM, wait `grace_s`, then SIGKILL. Returns the exit code (None if no process)."""
    if proc is None:
        return None
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    return proc.returncode


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def external_endpoint_configured(env: dict[str, str] | None = None) -> bool:
    e = os.environ if env is None else env
    return any(e.get(v) for v in ENDPOINT_VARS)


class MotoServer:
    def __init__(self, port: int | None = None, env: dict[str, str] | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._proc: subprocess.Popen[bytes] | None = None
        self._extra_env = env or {}

    def start(self, timeout_s: float = 30.0) -> MotoServer:
        env = {**os.environ, **FAKE_CREDENTIALS, **self._extra_env}
        self._proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "headwater.dev.moto_serialized",
                "-H",
                "127.0.0.1",
                "-p",
                str(self.port),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=die_with_parent if sys.platform == "linux" else None,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"moto server exited with {self._proc.returncode}")
            try:
                with urllib.request.urlopen(f"{self.url}/moto-api/", timeout=1):
                    return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"moto server did not start on {self.url}")

    def stop(self) -> None:
        stop_process(self._proc)
        self._proc = None

    def reset(self) -> None:
        req = urllib.request.Request(f"{self.url}/moto-api/reset", method="POST")
        with urllib.request.urlopen(req, timeout=10):
            pass

    def env(self) -> dict[str, str]:
        return {**FAKE_CREDENTIALS, "AWS_ENDPOINT_URL": self.url}

    def __enter__(self) -> MotoServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
