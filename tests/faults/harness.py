"""Start and steer the fault proxy (tests/faults/proxy.py) from a test."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from headwater.dev.emulator import die_with_parent, free_port, stop_process

REPO = Path(__file__).resolve().parents[2]


class FaultProxyProcess:
    def __init__(self, upstream: str, **plan: Any) -> None:
        self.upstream = upstream
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.plan = plan
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> FaultProxyProcess:
        args = [sys.executable, "-m", "tests.faults.proxy", "--upstream", self.upstream]
        args += ["--port", str(self.port)]
        for name, value in self.plan.items():
            args += [f"--{name.replace('_', '-')}", str(value)]
        self._proc = subprocess.Popen(
            args,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
        )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if b"ready" not in line:
            raise RuntimeError(f"fault proxy did not start: {line!r}")
        return self

    def set(self, **plan: Any) -> dict[str, Any]:
        """Replace parts of the plan (e.g. every probability 0 to end the faults)."""
        r = httpx.post(f"{self.url}/__faults__", json=plan, timeout=10)
        r.raise_for_status()
        return dict(r.json())

    def calm(self) -> dict[str, Any]:
        return self.set(drop=0.0, timeout=0.0, error=0.0, throttle=0.0, slow=0.0, stall=0.0)

    def stats(self) -> dict[str, Any]:
        r = httpx.get(f"{self.url}/__faults__", timeout=10)
        r.raise_for_status()
        return dict(r.json()["stats"])

    def stop(self) -> None:
        stop_process(self._proc, grace_s=5)
        self._proc = None

    def __enter__(self) -> FaultProxyProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def wait_until(check: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)
