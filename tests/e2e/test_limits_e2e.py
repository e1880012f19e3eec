"""Resource caps and slow consumers over real HTTP (spec §7.5, §11): a stream cap hit answers
429 and its slot comes back when a holder disconnects (even abruptly); a client that stops
reading gets a final error frame and loses nothing on resume; a slow-but-alive client is
paced with an advisory frame and still receives everything."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest

from tests.e2e.conftest import ServerProcess
from tests.e2e.test_watch_sse import SSE, append, open_stream, put, watch

pytestmark = [pytest.mark.serial, pytest.mark.alone, pytest.mark.e2e]

FRAME_RE = re.compile(rb"(?:id: ([^\n]*)\n)?event: ([a-z-]+)\ndata: ([^\n]*)\n\n")


class RawStream:
    """An SSE GET over a bare socket, so the test decides when (and whether) to read."""

    def __init__(self, base: str, path: str, headers: dict[str, str], rcvbuf: int = 0) -> None:
        u = urlparse(base)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.connect((u.hostname, u.port))
        head = "".join(f"{k}: {v}\r\n" for k, v in {**SSE, **headers}.items())
        self.sock.sendall(f"GET {path} HTTP/1.1\r\nHost: t\r\n{head}\r\n".encode())
        self.raw = b""

    def read_some(self, n: int = 65536, timeout_s: float = 5.0) -> bytes:
        self.sock.settimeout(timeout_s)
        try:
            chunk = self.sock.recv(n)
        except TimeoutError:
            return b""
        self.raw += chunk
        return chunk

    def read_until(self, done: Callable[[bytes], bool], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not done(self.body()):
            if not self.read_some(timeout_s=max(0.05, deadline - time.monotonic())) and done(
                self.body()
            ):
                return
        assert done(self.body()), self.body()[-2000:]

    def status(self) -> int:
        return int(self.raw.split(b" ", 2)[1])

    def body(self) -> bytes:
        """The de-chunked body received so far (complete chunks only)."""
        _head, sep, rest = self.raw.partition(b"\r\n\r\n")
        if not sep:
            return b""
        out = bytearray()
        while True:
            line, sep, after = rest.partition(b"\r\n")
            if not sep:
                break
            size = int(line, 16)
            if size == 0 or len(after) < size + 2:
                break
            out += after[:size]
            rest = after[size + 2 :]
        return bytes(out)

    def frames(self) -> list[tuple[str | None, str, Any]]:
        return [
            (m[1].decode() if m[1] else None, m[2].decode(), json.loads(m[3]))
            for m in FRAME_RE.finditer(self.body())
        ]

    def close(self) -> None:
        self.sock.close()


def _error(resp: httpx.Response, status: int, limit: str, cap: int) -> None:
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert err["code"] == "throttled"
    assert err["detail"] == {"limit": limit, "max": cap}
    assert int(resp.headers["retry-after"]) >= 1


def _stream_status(base: str, wid: str, headers: dict[str, str] | None = None) -> int:
    with (
        httpx.Client(timeout=10) as http,
        http.stream("GET", f"{base}/v0/watch/{wid}", headers={**SSE, **(headers or {})}) as r,
    ):
        return r.status_code


def test_stream_cap_hit_answers_429_and_a_disconnect_frees_the_slot(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    (srv,) = start_servers(1, TOPICS_MAX_SSE_CONNECTIONS="2")
    base = srv.url
    with httpx.Client(timeout=10) as http:
        put(http, base, "cap")
        wids = [watch(http, base, {"topics": {"cap": {}}})["wid"] for _ in range(3)]
        clean = http.stream("GET", f"{base}/v0/watch/{wids[0]}", headers=SSE)
        first = clean.__enter__()
        assert first.status_code == 200
        abrupt = RawStream(base, f"/v0/watch/{wids[1]}", {})
        abrupt.read_until(lambda b: b"retry: 2000" in b, 10)
        assert abrupt.status() == 200
        refused = http.get(f"{base}/v0/watch/{wids[2]}", headers=SSE)
        _error(refused, 429, "max_sse_connections", 2)
        gauges = http.get(f"{base}/v0/metrics", headers={"Accept": "application/json"}).json()
        assert gauges["gauges"]["topics_sse_connections"] == 2, gauges
        # Broken pipe: the holder's socket just goes away. Its slot comes back.
        abrupt.sock.setsockopt(
            socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
        )
        abrupt.close()
        deadline = time.monotonic() + 10
        while _stream_status(base, wids[2]) != 200:
            assert time.monotonic() < deadline, "the abruptly closed stream kept its slot"
            time.sleep(0.1)
        # A clean close frees its slot too: then two streams fit again.
        clean.__exit__(None, None, None)
        deadline = time.monotonic() + 10
        while True:
            with (
                open_stream(http, f"{base}/v0/watch/{wids[0]}"),
                open_stream(http, f"{base}/v0/watch/{wids[1]}"),
            ):
                break
        assert time.monotonic() < deadline


def test_per_key_stream_cap_with_auth(start_servers: Callable[..., list[ServerProcess]]) -> None:
    (srv,) = start_servers(1, TOPICS_API_KEYS="k1,k2", TOPICS_MAX_SSE_CONNECTIONS_PER_KEY="1")
    base = srv.url
    h1 = {"Authorization": "Bearer k1"}
    h2 = {"Authorization": "Bearer k2"}
    with httpx.Client(timeout=10) as http:
        assert http.put(f"{base}/v0/topics/pk", json={}, headers=h1).status_code == 201
        w1 = [watch(http, base, {"topics": {"pk": {}}}, headers=h1)["wid"] for _ in range(2)]
        w2 = watch(http, base, {"topics": {"pk": {}}}, headers=h2)["wid"]
        with open_stream(http, f"{base}/v0/watch/{w1[0]}", h1):
            refused = http.get(f"{base}/v0/watch/{w1[1]}", headers={**SSE, **h1})
            _error(refused, 429, "max_sse_connections_per_key", 1)
            with open_stream(http, f"{base}/v0/watch/{w2}", h2):
                pass  # another key has its own allowance
        # the first stream's close gives the key its slot back, once the server has seen the
        # disconnect (a request sent right after the close can still find the slot held)
        deadline = time.monotonic() + 10
        while _stream_status(base, w1[1], h1) != 200:
            assert time.monotonic() < deadline, "the closed stream kept its key's slot"
            time.sleep(0.1)


def _record_seqs(frames: list[tuple[str | None, str, Any]]) -> list[int]:
    return [r["$seq"] for _, name, data in frames if name == "record" for r in data["records"]]


def test_a_client_that_stops_reading_gets_a_final_error_and_resumes_without_loss(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    (srv,) = start_servers(
        1, HEADWATER_SLOW_CONSUMER_TIMEOUT_MS="1500", HEADWATER_SSE_BUFFER_GRACE_MS="200"
    )
    base = srv.url
    blob = "z" * 100_000
    total = 80  # ~8 MB: more than the socket buffers and the outbound queue hold
    with httpx.Client(timeout=30) as http:
        put(http, base, "slow")
        wid = watch(http, base, {"topics": {"slow": {}}})["wid"]
        stuck = RawStream(base, f"/v0/watch/{wid}", {}, rcvbuf=4096)
        stuck.read_until(lambda b: b"retry: 2000" in b, 10)
        for i in range(0, total, 10):
            append(http, base, "slow", [{"data": {"i": j, "pad": blob}} for j in range(i, i + 10)])
        time.sleep(4)  # the client reads nothing for longer than the slow-consumer timeout
        stuck.read_until(lambda b: b'"code":408' in b, 60)
        frames = stuck.frames()
        stuck.close()
        assert frames[-1][1] == "error" and frames[-1][2]["code"] == 408, frames[-1]
        assert frames[-1][2]["terminal"] is True
        got = _record_seqs(frames)
        assert got == list(range(1, len(got) + 1))  # in order, no gaps, no repeats
        assert len(got) < total  # it really was cut short
        last_id = [fid for fid, name, _ in frames if name == "record"][-1]
        # Resume: the session survived; Last-Event-ID rewinds to what the client processed.
        with open_stream(http, f"{base}/v0/watch/{wid}", {"Last-Event-ID": last_id}) as s:
            events = s.until(lambda e: e.name == "caught-up", 30)
        rest = [r["$seq"] for e in events if e.name == "record" for r in e.data["records"]]
        assert got + rest == list(range(1, total + 1))


def test_a_slow_but_alive_client_is_paced_and_gets_everything(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    (srv,) = start_servers(
        1, HEADWATER_SLOW_CONSUMER_TIMEOUT_MS="20000", HEADWATER_SSE_BUFFER_GRACE_MS="200"
    )
    base = srv.url
    blob = "q" * 100_000
    total = 60
    with httpx.Client(timeout=30) as http:
        put(http, base, "paced")
        wid = watch(http, base, {"topics": {"paced": {}}})["wid"]
        slow = RawStream(base, f"/v0/watch/{wid}", {}, rcvbuf=4096)
        slow.read_until(lambda b: b"retry: 2000" in b, 10)
        for i in range(0, total, 10):
            append(http, base, "paced", [{"data": {"i": j, "pad": blob}} for j in range(i, i + 10)])
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            chunk = slow.read_some(32_768, timeout_s=2)
            time.sleep(0.01)  # ~3 MB/s at most: slower than the server can produce
            if b"caught-up" in chunk and any(
                n == "caught-up" and d["head_seq"] == total for _, n, d in slow.frames()
            ):
                break
        frames = slow.frames()
        slow.close()
        assert _record_seqs(frames) == list(range(1, total + 1))
        advisories = [d for _, n, d in frames if n == "error"]
        assert advisories, "no pacing advisory was sent"
        assert all(d["code"] == 429 and d["topics"] == ["paced"] for d in advisories), advisories
        assert frames[-1][1] == "caught-up"  # the stream stayed open


def test_a_client_closing_mid_backlog_frees_its_slot_at_once(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    # A regression: a cancellation lost inside the stream loop (asyncio.wait_for on 3.11)
    # left a closed stream running, holding its slot and its unsaved cursors, until the
    # server stopped. Several rounds, because the race needs an unlucky moment.
    (srv,) = start_servers(1)
    base = srv.url
    topics = ("m1", "m2", "m3")
    with httpx.Client(timeout=10) as http:
        for t in topics:
            put(http, base, t)
        for _ in range(4):
            wid = watch(http, base, {"topics": {t: {} for t in topics}, "limit": 7})["wid"]
            stop = threading.Event()

            def produce(stop: threading.Event = stop) -> None:
                with httpx.Client(timeout=10) as p:
                    while not stop.is_set():
                        for t in topics:
                            append(p, base, t, [{"data": k} for k in range(4)])

            producer = threading.Thread(target=produce)
            producer.start()
            try:
                with open_stream(http, f"{base}/v0/watch/{wid}") as s:
                    s.until(lambda e: e.name == "record")
                    time.sleep(0.3)  # stop reading while the server keeps sending
            finally:
                stop.set()
                producer.join(10)
            deadline = time.monotonic() + 3
            while True:
                gauges = http.get(f"{base}/v0/metrics", headers={"Accept": "application/json"})
                if gauges.json()["gauges"]["topics_sse_connections"] == 0:
                    break
                assert time.monotonic() < deadline, "a closed stream kept its slot"
                time.sleep(0.05)
