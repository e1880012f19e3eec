"""StreamFunction's entry (functions/stream/run.sh) serves through headwater.http.serving's
protocol: a slowloris socket is closed after the header deadline while a normal request is
answered. Started as the Lambda Web Adapter starts it (the fixture of test_stream_entry)."""

from __future__ import annotations

import socket
import subprocess
import time

import httpx
import pytest
from tests.infra.test_stream_entry import RUN_SH, _stop, _wait_http, lambda_env

pytestmark = pytest.mark.infra

__all__ = ["lambda_env"]  # the fixture, imported for this module's tests


def test_run_sh_closes_a_slowloris_socket_after_the_header_deadline(
    lambda_env: dict[str, str],
) -> None:
    env = {**lambda_env, "HEADWATER_HEADER_TIMEOUT_MS": "1000"}
    proc = subprocess.Popen(
        [str(RUN_SH)],
        cwd=env["LAMBDA_TASK_ROOT"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    port = int(env["AWS_LWA_PORT"])
    try:
        assert _wait_http(f"http://127.0.0.1:{port}/v0/health", proc, 30).status_code == 200
        # GIVEN a socket that starts a request head and never finishes it
        loris = socket.create_connection(("127.0.0.1", port), timeout=5)
        loris.sendall(b"GET /v0/health HTTP/1.1\r\nHost: t\r\n")
        started = time.monotonic()
        # WHILE a normal request is answered
        assert httpx.get(f"http://127.0.0.1:{port}/v0/health", timeout=5).status_code == 200
        # THEN the server answers it 408 and closes it soon after the 1 s deadline
        got = b""
        while chunk := loris.recv(4096):
            got += chunk
        assert got.startswith(b"HTTP/1.1 408"), got
        assert time.monotonic() - started < 5
        loris.close()
    finally:
        code = _stop(proc)
        output = proc.stdout.read().decode() if proc.stdout else ""
    assert code in (0, -15), output
    assert "Traceback" not in output, output


def test_every_server_keeps_idle_connections_longer_than_its_clients_pools() -> None:
    """The deployed entry and `make run` share KEEP_ALIVE_S, and it outlasts the pools that
    reuse their connections (httpx's default expiry, the adapter's 60 s): a server closing
    an idle connection as a client reuses it fails that request with a reset."""
    import re

    from fastapi import FastAPI

    from headwater.dev.server import uvicorn_config
    from headwater.http.serving import KEEP_ALIVE_S
    from headwater.settings import Settings

    match = re.search(r"--timeout-keep-alive (\d+)", RUN_SH.read_text())
    assert match is not None and int(match.group(1)) == KEEP_ALIVE_S
    assert uvicorn_config(FastAPI(), Settings.from_env()).timeout_keep_alive == KEEP_ALIVE_S
    assert KEEP_ALIVE_S > 60 and (httpx.Limits().keepalive_expiry or 0) < KEEP_ALIVE_S
