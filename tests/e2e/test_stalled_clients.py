"""Stalled clients against a real uvicorn server process (headwater.dev.server, the protocol
of headwater.http.serving): SSE readers and a WebSocket that never read are cut off after
the write deadline, the socket is really closed (reset) and the stream slot comes back; a
slowloris socket is closed after the header deadline while a normal client is served; a
kept-alive idle connection is not (that is timeout_keep_alive's business). Small limits
keep each test to seconds."""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
import time
from collections.abc import Callable
from urllib.parse import urlparse

import httpx
import pytest

from tests.e2e.conftest import ServerProcess
from tests.e2e.test_watch_sse import SSE, append, put, watch

pytestmark = [pytest.mark.serial, pytest.mark.alone, pytest.mark.e2e, pytest.mark.timeout(120)]

FAST = {
    "HEADWATER_SLOW_CONSUMER_TIMEOUT_MS": "1000",
    "HEADWATER_SSE_BUFFER_GRACE_MS": "200",
    "HEADWATER_HEADER_TIMEOUT_MS": "1000",
}
TCP_ESTABLISHED = 1
BLOB = "z" * 50_000


def _connect(base: str, rcvbuf: int = 4096) -> socket.socket:
    u = urlparse(base)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.connect((u.hostname, u.port))
    return sock


def _tcp_state(sock: socket.socket) -> int:
    """The kernel's TCP state of our end (first byte of TCP_INFO), read without reading
    the socket: a never-reading client still learns that the server closed or reset it."""
    return int(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0])


def _stream_slots(http: httpx.Client, base: str) -> int:
    gauges = http.get(f"{base}/v0/metrics", headers={"Accept": "application/json"}).json()
    return int(gauges["gauges"]["topics_sse_connections"])


def _wait(cond: Callable[[], bool], timeout_s: float, what: str) -> float:
    start = time.monotonic()
    while not cond():
        assert time.monotonic() - start < timeout_s, what
        time.sleep(0.05)
    return time.monotonic() - start


def _stalled_get(base: str, path: str) -> socket.socket:
    sock = _connect(base)
    head = "".join(f"{k}: {v}\r\n" for k, v in SSE.items())
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: t\r\n{head}\r\n".encode())
    return sock


def test_sse_readers_that_never_read_are_reset_and_free_their_slots(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    (srv,) = start_servers(1, **FAST)
    base = srv.url
    with httpx.Client(timeout=30) as http:
        put(http, base, "firehose")
        octets = {"Content-Type": "application/octet-stream"}
        assert http.put(f"{base}/v1/stream/durable", headers=octets).status_code == 201
        wids = [watch(http, base, {"topics": {"firehose": {}}})["wid"] for _ in range(3)]
        # GIVEN three /v0/watch streams and one /v1 live=sse stream whose clients never read
        stalled = [_stalled_get(base, f"/v0/watch/{wid}") for wid in wids]
        stalled.append(_stalled_get(base, "/v1/stream/durable?offset=-1&live=sse"))
        _wait(lambda: _stream_slots(http, base) == 4, 10, "every stream holds a slot")
        # WHEN megabytes are written to what they watch
        for _ in range(4):
            append(http, base, "firehose", [{"data": {"pad": BLOB}} for _ in range(10)])
            r = http.post(f"{base}/v1/stream/durable", content=BLOB.encode() * 10, headers=octets)
            assert r.status_code in (200, 204), r.text
        # THEN within the write deadline (1 s) plus the final frame's and the close's grace
        # every stream is over: slots back to zero, and each client's socket was reset
        took = _wait(lambda: _stream_slots(http, base) == 0, 15, "stalled streams keep slots")
        _wait(
            lambda: all(_tcp_state(s) != TCP_ESTABLISHED for s in stalled),
            15,
            "the server never closed the stalled sockets",
        )
        assert took < 15
        # AND the server still serves
        assert http.get(f"{base}/v0/health").status_code == 200
    for s in stalled:
        s.close()


def _ws_frame(text: str) -> bytes:
    """A masked client text frame (RFC 6455)."""
    payload = text.encode()
    mask = os.urandom(4)
    assert len(payload) < 126, "a short command"
    head = struct.pack("!BB", 0x81, 0x80 | len(payload))
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def test_a_websocket_that_never_reads_is_reset_and_frees_its_slot(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    (srv,) = start_servers(1, **FAST)
    base = srv.url
    with httpx.Client(timeout=30) as http:
        put(http, base, "wsfire")
        # GIVEN a WebSocket subscribed to a topic, whose client then never reads
        sock = _connect(base)
        key = base64.b64encode(os.urandom(16)).decode()
        sock.sendall(
            (
                "GET /v0/ws HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        sock.settimeout(10)
        assert sock.recv(12) == b"HTTP/1.1 101"
        cmd = {"op": "subscribe", "request_id": "s", "topic": "wsfire", "tail": False}
        sock.sendall(_ws_frame(json.dumps(cmd)))
        _wait(lambda: _stream_slots(http, base) == 1, 10, "the socket holds a slot")
        # WHEN megabytes are appended to its topic
        for _ in range(4):
            append(http, base, "wsfire", [{"data": {"pad": BLOB}} for _ in range(10)])
        # THEN the connection ends: its slot comes back and its socket is reset
        _wait(lambda: _stream_slots(http, base) == 0, 20, "a stalled WebSocket kept its slot")
        _wait(lambda: _tcp_state(sock) != TCP_ESTABLISHED, 15, "the socket was never closed")
        assert http.get(f"{base}/v0/health").status_code == 200
    sock.close()


def _closed_by_server(sock: socket.socket) -> bool:
    """True once the server closed (EOF, a reset, or its 408 then EOF)."""
    sock.settimeout(0.01)
    try:
        while True:
            data = sock.recv(4096)
            if not data:
                return True
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_slowloris_sockets_are_closed_after_the_header_deadline_while_others_are_served(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    (srv,) = start_servers(1, **FAST)
    base = srv.url
    # GIVEN sockets that send a request head a byte at a time and never finish it, and one
    # that sends nothing at all
    loris = [_connect(base) for _ in range(20)]
    for s in loris:
        s.sendall(b"GET /v0/health HTTP/1.1\r\nHost: t\r\n")
    silent = _connect(base)
    opened = time.monotonic()
    closed_at: dict[int, float] = {}
    with httpx.Client(timeout=5) as http:
        while len(closed_at) < len(loris) + 1 and time.monotonic() - opened < 10:
            for i, s in enumerate([*loris, silent]):
                if i in closed_at:
                    continue
                if _closed_by_server(s):
                    closed_at[i] = time.monotonic() - opened
                elif s is not silent:
                    try:
                        s.sendall(b"X")  # one more byte of a header name
                    except OSError:
                        closed_at[i] = time.monotonic() - opened
            # WHILE a normal client is served promptly
            t0 = time.monotonic()
            assert http.get(f"{base}/v0/health").status_code == 200
            assert time.monotonic() - t0 < 1.0
            time.sleep(0.2)
    # THEN every one of them was closed by the server soon after the 1 s header deadline
    assert len(closed_at) == len(loris) + 1, closed_at
    assert max(closed_at.values()) < 5, closed_at
    assert min(closed_at.values()) >= 0.9, closed_at
    for s in [*loris, silent]:
        s.close()


def _response(sock: socket.socket) -> bytes:
    """One whole response (Content-Length framed) from a kept-alive socket."""
    raw = b""
    while b"\r\n\r\n" not in raw:
        raw += sock.recv(65536)
    head, _, body = raw.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.lower().split(b"\r\n")
        if b"content-length" in line
    )
    while len(body) < length:
        body += sock.recv(65536)
    return head


def test_the_header_deadline_spares_kept_alive_idle_connections_but_not_a_slow_second_head(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    (srv,) = start_servers(1, **FAST)
    sock = _connect(srv.url, rcvbuf=65536)
    sock.settimeout(5)
    request = b"GET /v0/health HTTP/1.1\r\nHost: t\r\n\r\n"
    sock.sendall(request)
    assert _response(sock).startswith(b"HTTP/1.1 200")
    # GIVEN a kept-alive connection idle for longer than the header deadline (uvicorn's
    # keep-alive timeout is KEEP_ALIVE_S) WHEN the next request comes whole THEN it is served
    time.sleep(2.0)
    sock.sendall(request)
    assert _response(sock).startswith(b"HTTP/1.1 200")
    # WHEN the next head starts but never completes THEN the deadline runs from its first
    # byte: a 408, then the server closes
    sock.sendall(b"GET /v0/health HTTP/1.1\r\n")
    started = time.monotonic()
    got = b""
    while chunk := sock.recv(65536):
        got += chunk
    assert got.startswith(b"HTTP/1.1 408"), got
    assert 0.9 <= time.monotonic() - started < 4
    sock.close()
