"""The /work push stream (spec §10.8) against real uvicorn server processes: establishment
(SSE headers, retry + heartbeat first, 400/404/406/409), push with backpressure at `max`,
refills on ack in this process and in another one, instant release of the connection's
leases on a clean close and on an abrupt client death (leases from a separate claim poll
untouched), two streams sharing a queue, the terminal error frame when the queue becomes a
log, prompt delivery of appends made in either process, release of jobs leased to a stalled
stream but not yet written, and an expired lease freeing its stream's slot.

The stream client is a raw socket read by a background thread, so a test can wait for
frames with a deadline, assert that none arrive for a while, and drop the connection at a
chosen moment (or from a child process that dies)."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

REPO = Path(__file__).resolve().parents[2]
HTTP_TIMEOUT = httpx.Timeout(15.0)
SSE = {"accept": "text/event-stream"}
LONG_LEASE_MS = 60_000  # far longer than any wait below: a lease that comes back was released


# --- a raw-socket SSE client ------------------------------------------------------------


@dataclass
class Event:
    name: str  # an event name, or "comment" / "retry"
    data: Any = None
    id: str | None = None
    comment: str | None = None
    retry: int | None = None


def parse_frame(block: str) -> Event | None:
    fields: dict[str, str] = {}
    comment = None
    for line in block.split("\n"):
        if not line:
            continue
        if line.startswith(":"):
            comment = line[1:].strip()
            continue
        name, _, value = line.partition(":")
        fields[name] = value[1:] if value.startswith(" ") else value
    if "event" in fields:
        data = json.loads(fields["data"]) if "data" in fields else None
        return Event(fields["event"], data, fields.get("id"))
    if "retry" in fields:
        return Event("retry", retry=int(fields["retry"]), comment=comment)
    if comment is not None:
        return Event("comment", comment=comment)
    return None


class WorkStream:
    """GET /v0/topics/:q/work over a plain socket. Frames are parsed by a reader thread into
    a queue; `raw` holds the decoded body bytes received so far."""

    def __init__(
        self,
        base: str,
        path: str,
        headers: dict[str, str] | None = None,
        accept: str | None = "text/event-stream",
        *,
        read: bool = True,
        rcvbuf: int | None = None,
    ) -> None:
        """`read=False`: a stalled worker that never reads the body (with `rcvbuf`, a small
        receive buffer, so the server's writes back up quickly)."""
        url = httpx.URL(base)
        assert url.host and url.port
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(15)
        self.sock.connect((url.host, url.port))
        lines = [f"GET {path} HTTP/1.1", f"Host: {url.host}:{url.port}"]
        if accept is not None:
            lines.append(f"Accept: {accept}")
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError(f"connection closed before the response head: {buf!r}")
            buf += chunk
        head, self._rest = buf.split(b"\r\n\r\n", 1)
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        self.status = int(status_line.split()[1])
        self.headers: dict[str, str] = {}
        for h in header_lines:
            k, _, v = h.partition(":")
            self.headers[k.strip().lower()] = v.strip()
        self.raw = bytearray()
        self.frames: queue.Queue[Event | None] = queue.Queue()
        self.ended = threading.Event()
        self.body: Any = None
        self.sock.settimeout(None)
        if self.status != 200:
            self.body = json.loads(self._read_all())
            self.sock.close()
            return
        if read:
            self._thread = threading.Thread(target=self._read, daemon=True)
            self._thread.start()

    # transport
    def _recv(self) -> bytes:
        try:
            return self.sock.recv(65536)
        except OSError:
            return b""

    def _body_chunks(self) -> Iterator[bytes]:
        buf = self._rest
        if self.headers.get("transfer-encoding", "").lower() != "chunked":
            if buf:
                yield buf
            while data := self._recv():
                yield data
            return
        while True:
            while b"\r\n" not in buf:
                data = self._recv()
                if not data:
                    return
                buf += data
            size_line, buf = buf.split(b"\r\n", 1)
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                return
            while len(buf) < size + 2:
                data = self._recv()
                if not data:
                    return
                buf += data
            yield buf[:size]
            buf = buf[size + 2 :]

    def _read_all(self) -> bytes:
        if "content-length" in self.headers:
            n = int(self.headers["content-length"])
            buf = self._rest
            while len(buf) < n:
                data = self._recv()
                if not data:
                    break
                buf += data
            return buf[:n]
        return b"".join(self._body_chunks())

    def _read(self) -> None:
        text = ""
        try:
            for chunk in self._body_chunks():
                self.raw += chunk
                text += chunk.decode()
                while "\n\n" in text:
                    block, text = text.split("\n\n", 1)
                    event = parse_frame(block)
                    if event is not None:
                        self.frames.put(event)
        finally:
            self.ended.set()
            self.frames.put(None)

    # reading frames
    def next(self, timeout: float) -> Event:
        """The next frame (comments and retry included); TimeoutError, or EOFError at the end."""
        try:
            event = self.frames.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no frame within {timeout} s") from None
        if event is None:
            self.frames.put(None)  # stay at the end for later calls
            raise EOFError("stream ended")
        return event

    def next_event(self, timeout: float) -> Event:
        """The next named event, skipping heartbeats and retry."""
        deadline = time.monotonic() + timeout
        while True:
            event = self.next(max(0.01, deadline - time.monotonic()))
            if event.name not in ("comment", "retry"):
                return event

    def jobs(self, n: int, timeout: float) -> list[Event]:
        """Exactly the next `n` job events, within `timeout` seconds in all."""
        deadline = time.monotonic() + timeout
        out: list[Event] = []
        while len(out) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"got {len(out)} of {n} jobs in {timeout} s: {out}")
            try:
                event = self.next_event(left)
            except TimeoutError:
                raise TimeoutError(f"got {len(out)} of {n} jobs in {timeout} s: {out}") from None
            assert event.name == "job", event
            out.append(event)
        return out

    def quiet(self, seconds: float) -> list[Event]:
        """Every named event that arrives within `seconds` (the caller asserts it is none)."""
        deadline = time.monotonic() + seconds
        out: list[Event] = []
        while (left := deadline - time.monotonic()) > 0:
            try:
                event = self.next_event(left)
            except TimeoutError:
                break
            out.append(event)
        return out

    def close(self) -> None:
        """Clean close: FIN to the server, then drop the socket."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        if hasattr(self, "_thread"):
            self._thread.join(5)


def work_path(topic: str, **query: Any) -> str:
    qs = "&".join(f"{k}={v}" for k, v in query.items())
    return f"/v0/topics/{topic}/work" + (f"?{qs}" if qs else "")


# --- REST helpers ---------------------------------------------------------------------


def make_queue(http: httpx.Client, base: str, name: str, **cfg: Any) -> None:
    r = http.put(f"{base}/v0/topics/{name}", json={"type": "queue", **cfg})
    assert r.status_code == 201, r.text


def produce(http: httpx.Client, base: str, name: str, n: int, start: int = 0) -> list[int]:
    records = [{"data": {"i": start + i}} for i in range(n)]
    r = http.post(f"{base}/v0/topics/{name}", json={"records": records})
    assert r.status_code in (200, 201), r.text
    return list(r.json()["seqs"])


def claim(http: httpx.Client, base: str, name: str, node: str, n: int) -> list[dict[str, Any]]:
    r = http.post(f"{base}/v0/topics/{name}/claim", json={"node": node, "max": n})
    assert r.status_code == 200, r.text
    jobs: list[dict[str, Any]] = r.json()["claimed"]
    return jobs


def ack(http: httpx.Client, base: str, name: str, node: str, seqs: list[int]) -> dict[str, Any]:
    r = http.post(f"{base}/v0/topics/{name}/ack", json={"node": node, "seqs": seqs})
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def queue_state(http: httpx.Client, base: str, name: str) -> dict[str, Any]:
    r = http.get(f"{base}/v0/topics/{name}")
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def wait_for(check: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """Poll `check` until it returns something truthy; fail with the last value."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout_s} s (last: {last!r})")


def seqs_of(events: list[Event]) -> list[int]:
    return [e.data["$seq"] for e in events]


def now_ms() -> int:
    return int(time.time() * 1000)


# --- 1. establishment -----------------------------------------------------------------


def test_open_sends_sse_headers_retry_and_heartbeat_and_rejects_bad_requests(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    (server,) = start_servers(1)
    base = server.url
    with httpx.Client(timeout=HTTP_TIMEOUT) as http:
        make_queue(http, base, "jobs")
        r = http.put(f"{base}/v0/topics/plain", json={})
        assert r.status_code == 201, r.text

        # WHEN a worker opens /work on an (empty) queue
        t0 = now_ms()
        s = WorkStream(base, work_path("jobs", node="w1"))
        try:
            # THEN the SSE headers, and the body starts with retry: 2000 and a heartbeat
            assert s.status == 200
            assert s.headers["content-type"].startswith("text/event-stream")
            assert s.headers["cache-control"] == "no-store"
            assert s.headers["x-accel-buffering"] == "no"
            first = s.next(10)
            assert first.name == "retry" and first.retry == 2000
            hb = s.next(10)
            assert hb.name == "comment" and hb.comment is not None
            m = re.fullmatch(
                rb"retry: 2000\n\n: hb (\d+)\n\n", bytes(s.raw[: s.raw.index(b"\n\n", 13) + 2])
            )
            assert m is not None, bytes(s.raw)
            assert abs(int(m.group(1)) - t0) < 10_000
            assert hb.comment == f"hb {int(m.group(1))}"
            # and nothing else while the queue is empty
            assert s.quiet(1.0) == []
        finally:
            s.close()

        def rejected(path: str, accept: str | None = "text/event-stream") -> tuple[int, str]:
            w = WorkStream(base, path, accept=accept)
            assert w.status != 200, "expected an establishment error"
            assert w.headers["content-type"].startswith("application/json")
            return w.status, w.body["error"]["code"]

        # a log topic is not a queue: an HTTP 409 at establishment, not a stream
        assert rejected(work_path("plain", node="w1")) == (409, "not_a_queue")
        assert rejected(work_path("missing", node="w1")) == (404, "topic_not_found")
        # the stream is only for SSE clients
        assert rejected(work_path("jobs", node="w1"), accept=None) == (406, "not_acceptable")
        assert rejected(work_path("jobs", node="w1"), accept="application/json") == (
            406,
            "not_acceptable",
        )
        assert rejected(work_path("jobs", node="w1"), accept="*/*") == (406, "not_acceptable")
        # node is required; max must be a positive integer
        assert rejected(work_path("jobs")) == (400, "invalid_request")
        assert rejected(work_path("jobs", node="")) == (400, "invalid_request")
        assert rejected(work_path("jobs", node="w1", max=0)) == (400, "invalid_request")
        assert rejected(work_path("jobs", node="w1", max="x")) == (400, "invalid_request")
        # nothing was leased by any of that
        assert queue_state(http, base, "jobs")["queue"]["in_flight"] == 0


# --- 2. push and backpressure ---------------------------------------------------------


def test_pushes_max_jobs_then_one_more_per_ack_in_either_process(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    a, b = start_servers(2, HEADWATER_POLL_INTERVAL_MS="100")
    with httpx.Client(timeout=HTTP_TIMEOUT) as http:
        make_queue(http, a.url, "jobs")
        seqs = produce(http, a.url, "jobs", 10)
        assert seqs == list(range(1, 11))

        s = WorkStream(a.url, work_path("jobs", node="w1", max=3, lease_ms=LONG_LEASE_MS))
        try:
            # WHEN a worker opens /work with max=3 THEN exactly 3 jobs are pushed
            t_open = now_ms()
            first = s.jobs(3, 10)
            assert seqs_of(first) == [1, 2, 3]
            for e in first:
                job = e.data
                assert e.id == str(job["$seq"])
                assert job["topic"] == "jobs"
                assert job["lease_id"].startswith("lease_")
                assert job["deliveries"] == 1
                assert job["data"] == {"i": job["$seq"] - 1}
                assert isinstance(job["$ts"], int)
                assert t_open - 5_000 <= job["deadline"] - LONG_LEASE_MS <= now_ms() + 5_000
            assert len({e.data["lease_id"] for e in first}) == 3
            # and no more while none is acked (backpressure at max in flight)
            assert s.quiet(2.0) == []
            st = queue_state(http, a.url, "jobs")["queue"]
            assert st["in_flight"] == 3 and st["ready"] == 7

            # WHEN one is acked in this process THEN exactly one more arrives, promptly
            t0 = time.monotonic()
            out = ack(http, a.url, "jobs", "w1", [1])
            assert out["acked"] == 1 and out["skipped"] == []
            (nxt,) = s.jobs(1, 5)
            assert time.monotonic() - t0 < 3
            assert nxt.data["$seq"] == 4 and nxt.id == "4" and nxt.data["deliveries"] == 1
            assert s.quiet(1.5) == []

            # WHEN two are acked in the OTHER process THEN the stream refills both within a
            # few seconds (it re-checks its leases at least every second)
            t0 = time.monotonic()
            out = ack(http, b.url, "jobs", "w1", [2, 3])
            assert out["acked"] == 2
            refill = s.jobs(2, 8)
            assert time.monotonic() - t0 < 6
            assert seqs_of(refill) == [5, 6]
            assert s.quiet(1.5) == []
            st = queue_state(http, a.url, "jobs")["queue"]
            assert st["in_flight"] == 3 and st["ready"] == 4
            assert queue_state(http, a.url, "jobs")["count"] == 7
        finally:
            s.close()


# --- 3. release on a clean close ------------------------------------------------------


def test_clean_close_releases_the_connections_leases_at_once(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    (server,) = start_servers(1)
    base = server.url
    with httpx.Client(timeout=HTTP_TIMEOUT) as http:
        make_queue(http, base, "jobs")
        produce(http, base, "jobs", 4)
        s = WorkStream(base, work_path("jobs", node="w1", max=2, lease_ms=LONG_LEASE_MS))
        try:
            got = s.jobs(2, 10)
            assert seqs_of(got) == [1, 2]
            st = queue_state(http, base, "jobs")["queue"]
            assert st["in_flight"] == 2 and st["ready"] == 2
        finally:
            # WHEN the worker closes the connection
            s.close()
        t0 = time.monotonic()

        # THEN both leases are released long before the 60 s lease would expire
        wait_for(
            lambda: queue_state(http, base, "jobs")["queue"]["in_flight"] == 0,
            5,
            "leases released after the /work connection closed",
        )
        jobs = claim(http, base, "jobs", "w2", 2)
        assert time.monotonic() - t0 < 5
        # the released jobs jump the queue (reclaim freelist first), delivered a second time
        assert [j["$seq"] for j in jobs] == [1, 2]
        assert [j["deliveries"] for j in jobs] == [2, 2]
        lease_ids = {e.data["lease_id"] for e in got}
        assert not lease_ids & {j["lease_id"] for j in jobs}
        # the old holder can no longer ack them; the new one can
        assert ack(http, base, "jobs", "w1", [1, 2])["skipped"] == [1, 2]
        assert ack(http, base, "jobs", "w2", [1, 2])["acked"] == 2


# --- 4. release on an abrupt client death ---------------------------------------------


def _child_main() -> None:
    """In a child process: open /work, read 2 jobs, report them, then die abruptly."""
    base, topic, mode = sys.argv[1:4]
    s = WorkStream(base, work_path(topic, node="w1", max=2, lease_ms=LONG_LEASE_MS))
    assert s.status == 200, s.body
    jobs = s.jobs(2, 30)
    if mode == "reset":
        # linger 0: the kernel answers the close with a RST (a broken pipe on the server)
        s.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    print(json.dumps(seqs_of(jobs)), flush=True)
    sys.stdin.readline()  # the parent's go: "exit" exits; "kill"/"reset" wait for SIGKILL
    if mode == "exit":
        os._exit(0)
    while True:
        time.sleep(1)


@pytest.mark.parametrize("mode", ["exit", "kill", "reset"])
def test_abrupt_client_death_releases_its_leases_at_once(
    start_servers: Callable[..., list[ServerProcess]], mode: str
) -> None:
    (server,) = start_servers(1)
    base = server.url
    with httpx.Client(timeout=HTTP_TIMEOUT) as http:
        make_queue(http, base, "jobs")
        produce(http, base, "jobs", 5)
        code = (
            "import sys; from tests.e2e.test_queue_work import _child_main; "
            "sys.argv[0] = 'child'; _child_main()"
        )
        child = subprocess.Popen(
            [sys.executable, "-c", code, base, "jobs", mode],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            assert child.stdout is not None
            line = child.stdout.readline()
            assert line, child.stderr.read() if child.stderr else ""
            held = json.loads(line)
            assert held == [1, 2]
            st = queue_state(http, base, "jobs")["queue"]
            assert st["in_flight"] == 2 and st["ready"] == 3
            # WHEN the worker process dies without closing the stream itself
            assert child.stdin is not None
            child.stdin.write(b"go\n")
            child.stdin.flush()
            if mode != "exit":
                child.send_signal(signal.SIGKILL)
            child.wait(10)
            t0 = time.monotonic()
        finally:
            if child.poll() is None:
                child.kill()
                child.wait(10)
        # THEN its leases come back at once, not after the 60 s lease
        wait_for(
            lambda: queue_state(http, base, "jobs")["queue"]["in_flight"] == 0,
            5,
            f"leases released after the /work client died ({mode})",
        )
        jobs = claim(http, base, "jobs", "w2", 2)
        assert time.monotonic() - t0 < 6
        assert [j["$seq"] for j in jobs] == [1, 2]
        assert [j["deliveries"] for j in jobs] == [2, 2]


# --- 5. leases from a claim poll are not the stream's ---------------------------------


def test_disconnect_keeps_the_same_nodes_leases_from_a_claim_poll(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    (server,) = start_servers(1)
    base = server.url
    with httpx.Client(timeout=HTTP_TIMEOUT) as http:
        make_queue(http, base, "jobs", lease_ms=LONG_LEASE_MS)
        produce(http, base, "jobs", 6)
        # GIVEN node w1 holds two jobs from a claim poll, and two more from its /work stream
        polled = claim(http, base, "jobs", "w1", 2)
        assert [j["$seq"] for j in polled] == [1, 2]
        s = WorkStream(base, work_path("jobs", node="w1", max=2))
        try:
            streamed = s.jobs(2, 10)
            assert seqs_of(streamed) == [3, 4]
            assert queue_state(http, base, "jobs")["queue"]["in_flight"] == 4
        finally:
            # WHEN the stream disconnects
            s.close()
        # THEN only the stream's leases are released
        wait_for(
            lambda: queue_state(http, base, "jobs")["queue"]["in_flight"] == 2,
            5,
            "the stream's two leases released",
        )
        time.sleep(1.0)  # and the polled ones stay held after that
        st = queue_state(http, base, "jobs")["queue"]
        assert st["in_flight"] == 2 and st["ready"] == 4
        jobs = claim(http, base, "jobs", "w2", 10)
        assert [j["$seq"] for j in jobs] == [3, 4, 5, 6]
        assert [j["deliveries"] for j in jobs] == [2, 2, 1, 1]
        # the polled leases are intact: w2 cannot ack them, w1 can (with their lease ids)
        assert ack(http, base, "jobs", "w2", [1, 2])["skipped"] == [1, 2]
        r = http.post(
            f"{base}/v0/topics/jobs/ack",
            json={"node": "w1", "seqs": [1, 2], "lease_ids": [j["lease_id"] for j in polled]},
        )
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["acked"] == 2 and out["skipped"] == []


# --- 6. two streams share a queue -----------------------------------------------------


def test_two_streams_never_share_a_job_and_drain_the_queue_together(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    a, b = start_servers(2, HEADWATER_POLL_INTERVAL_MS="100")
    total = 24
    with httpx.Client(timeout=HTTP_TIMEOUT) as http:
        make_queue(http, a.url, "jobs", lease_ms=LONG_LEASE_MS)
        produce(http, a.url, "jobs", total)
        # GIVEN one stream per process, different nodes
        streams = {
            "wa": (a.url, WorkStream(a.url, work_path("jobs", node="wa", max=3))),
            "wb": (b.url, WorkStream(b.url, work_path("jobs", node="wb", max=3))),
        }
        held: dict[str, dict[int, str]] = {"wa": {}, "wb": {}}  # node -> seq -> lease_id
        delivered: dict[str, list[int]] = {"wa": [], "wb": []}
        try:
            deadline = time.monotonic() + 90
            acked = 0
            while acked < total:
                assert time.monotonic() < deadline, (delivered, held)
                for node, (base, s) in streams.items():
                    other = "wb" if node == "wa" else "wa"
                    try:
                        e = s.next_event(0.1)
                    except TimeoutError:
                        e = None
                    if e is not None:
                        assert e.name == "job", e
                        seq = e.data["$seq"]
                        # THEN no seq is ever held by both streams (nor delivered twice:
                        # nothing expires or is released here)
                        assert seq not in held[other], (node, seq, held)
                        assert seq not in delivered["wa"] + delivered["wb"], (node, seq)
                        assert len(held[node]) < 3, (node, held)  # backpressure at max
                        held[node][seq] = e.data["lease_id"]
                        delivered[node].append(seq)
                    # the worker acks its oldest job now and then, as it "finishes" it
                    if held[node] and (e is None or len(held[node]) == 3):
                        seq = min(held[node])
                        out = ack(http, base, "jobs", node, [seq])
                        assert out["acked"] == 1, out
                        del held[node][seq]
                        acked += 1
            # THEN together they drained the queue, each job delivered exactly once
            assert sorted(delivered["wa"] + delivered["wb"]) == list(range(1, total + 1))
            assert delivered["wa"] and delivered["wb"], delivered
            st = queue_state(http, a.url, "jobs")
            assert st["count"] == 0
            assert st["queue"] == {"ready": 0, "in_flight": 0, "dead_lettered": 0}
            for _, s in streams.values():
                assert s.quiet(1.0) == []
        finally:
            for _, s in streams.values():
                s.close()


# --- 7. the queue stops being a queue -------------------------------------------------


def test_stream_ends_with_an_error_frame_when_the_queue_becomes_a_log(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    a, b = start_servers(2, HEADWATER_POLL_INTERVAL_MS="100")
    with httpx.Client(timeout=HTTP_TIMEOUT) as http:
        make_queue(http, a.url, "jobs", lease_ms=LONG_LEASE_MS)
        produce(http, a.url, "jobs", 1)
        # GIVEN a stream holding a job, one waiting on the (then) empty queue, both in this
        # process, and one waiting in the other process
        holding = WorkStream(a.url, work_path("jobs", node="w1", max=1))
        waiting = WorkStream(a.url, work_path("jobs", node="w2", max=1))
        remote = WorkStream(b.url, work_path("jobs", node="w3", max=1))
        streams = {"holding": holding, "waiting": waiting, "remote": remote}
        try:
            assert seqs_of(holding.jobs(1, 10)) == [1]
            for s in (waiting, remote):
                assert s.next(10).name == "retry"
                assert s.next(10).name == "comment"
            time.sleep(0.5)
            assert waiting.quiet(0.5) == [] and remote.quiet(0.1) == []

            # WHEN the topic is deleted and recreated as a log, and appended to
            r = http.delete(f"{a.url}/v0/topics/jobs")
            assert r.status_code == 200, r.text
            r = http.put(f"{a.url}/v0/topics/jobs", json={"type": "log"})
            assert r.status_code == 201, r.text
            produce(http, a.url, "jobs", 2)

            # THEN every stream ends with a terminal error frame (409: no longer a queue, or
            # 404 if it looked while the topic was gone), then the connection closes
            for name, s in streams.items():
                events = []
                while True:
                    e = s.next_event(10)
                    events.append(e)
                    if e.name == "error":
                        break
                assert [e.name for e in events] == ["error"], (name, events)
                err = events[0].data
                assert err["code"] in (409, 404), (name, err)
                assert err.get("terminal") is True, (name, err)
                assert events[0].id is None
                assert s.ended.wait(10), f"{name}: stream still open after its error frame"
                with pytest.raises(EOFError):
                    s.next(1)
            # and the log topic is a plain log: /work is refused at establishment now
            w = WorkStream(a.url, work_path("jobs", node="w1"))
            assert (w.status, w.body["error"]["code"]) == (409, "not_a_queue")
            assert http.get(f"{a.url}/v0/topics/jobs").json()["count"] == 2
        finally:
            for s in streams.values():
                s.close()


# --- 8. appends wake a waiting stream -------------------------------------------------


def test_appends_in_either_process_are_pushed_promptly(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    a, b = start_servers(2, HEADWATER_POLL_INTERVAL_MS="100")
    with httpx.Client(timeout=HTTP_TIMEOUT) as http:
        make_queue(http, a.url, "jobs", lease_ms=LONG_LEASE_MS)
        s = WorkStream(a.url, work_path("jobs", node="w1", max=5))
        try:
            assert s.next(10).name == "retry"
            assert s.next(10).name == "comment"
            assert s.quiet(1.0) == []
            # WHEN a job is appended in this process THEN it is pushed at once
            t0 = time.monotonic()
            produce(http, a.url, "jobs", 1, start=100)
            (j1,) = s.jobs(1, 5)
            local_s = time.monotonic() - t0
            assert j1.data["$seq"] == 1 and j1.data["data"] == {"i": 100}
            assert local_s < 2, local_s
            # WHEN jobs are appended in the other process THEN they arrive within seconds
            t0 = time.monotonic()
            produce(http, b.url, "jobs", 2, start=200)
            more = s.jobs(2, 8)
            remote_s = time.monotonic() - t0
            assert seqs_of(more) == [2, 3]
            assert [e.data["data"] for e in more] == [{"i": 200}, {"i": 201}]
            assert remote_s < 5, remote_s
            # and again, one at a time, while the stream still has capacity (3 of 5 held)
            for k in range(2):
                t0 = time.monotonic()
                produce(http, b.url if k else a.url, "jobs", 1, start=300 + k)
                (e,) = s.jobs(1, 8)
                assert e.data["$seq"] == 4 + k and e.data["data"] == {"i": 300 + k}
                assert time.monotonic() - t0 < 5
            # at capacity (5 held): a further append waits for an ack
            produce(http, b.url, "jobs", 1, start=400)
            assert s.quiet(2.0) == []
            assert ack(http, b.url, "jobs", "w1", [1])["acked"] == 1
            (e,) = s.jobs(1, 8)
            assert e.data["$seq"] == 6 and e.data["data"] == {"i": 400}
        finally:
            s.close()


# --- 9. leases the stream holds but has not written yet ------------------------------


def test_disconnect_of_a_stalled_worker_releases_every_job_leased_to_the_stream(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    """A worker that stops reading: the server's writes back up, the stream's outbound
    queue fills, and the producer blocks part-way through pushing one claimed batch. When
    the connection then drops, every job leased for this connection must be released, the
    ones not yet written included (spec §10.8: all of that node's leases delivered on this
    connection; a job leased to the stream and never pushed must not wait out its lease)."""
    (server,) = start_servers(1)
    base = server.url
    n, size = 40, 400_000
    with httpx.Client(timeout=httpx.Timeout(60.0)) as http:
        make_queue(http, base, "jobs", lease_ms=LONG_LEASE_MS)
        for start in range(0, n, 5):
            records = [{"data": {"i": start + k, "pad": "x" * size}} for k in range(5)]
            r = http.post(f"{base}/v0/topics/jobs", json={"records": records})
            assert r.status_code in (200, 201), r.text
        # GIVEN a /work stream with max=n whose client never reads
        s = WorkStream(base, work_path("jobs", node="w1", max=n), read=False, rcvbuf=4096)
        try:
            assert s.status == 200
            # the stream leased all n jobs for this connection in one go
            wait_for(
                lambda: queue_state(http, base, "jobs")["queue"]["in_flight"] == n,
                15,
                "all jobs leased to the stream",
            )
            time.sleep(1.0)  # the server's writes back up against the stalled client
        finally:
            # WHEN the worker's connection drops
            s.close()
        # THEN all n leases come back at once, not after the 60 s lease
        try:
            wait_for(
                lambda: queue_state(http, base, "jobs")["queue"]["in_flight"] == 0,
                8,
                "every lease of the dropped stream released",
            )
        except AssertionError:
            st = queue_state(http, base, "jobs")["queue"]
            back = {j["$seq"] for j in claim(http, base, "jobs", "w2", n)}
            stuck = sorted(set(range(1, n + 1)) - back)
            raise AssertionError(
                f"{st['in_flight']} of {n} jobs leased to the dropped /work stream are still "
                f"in flight (ready={st['ready']}), seqs {stuck}: leased for the stream, never "
                "released"
            ) from None
        jobs = claim(http, base, "jobs", "w2", n)
        assert [j["$seq"] for j in jobs] == list(range(1, n + 1))
        assert all(j["deliveries"] == 2 for j in jobs)


# --- 10. an expired lease frees the stream's slot -------------------------------------


def test_a_lease_that_expires_on_an_open_stream_frees_its_slot(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    """Spec §10.3/§10.8: once a lease's deadline passes the job is claimable again and no
    longer in flight; the stream keeps up to `max` jobs *leased*, so an expired lease must
    not hold one of its slots forever. A lone worker that let a job time out gets it (the
    reclaim freelist first) redelivered, instead of the queue stalling."""
    (server,) = start_servers(1)
    base = server.url
    with httpx.Client(timeout=HTTP_TIMEOUT) as http:
        make_queue(http, base, "jobs")
        produce(http, base, "jobs", 3)
        s = WorkStream(base, work_path("jobs", node="w1", max=1, lease_ms=2000))
        try:
            (first,) = s.jobs(1, 10)
            assert first.data["$seq"] == 1 and first.data["deliveries"] == 1
            assert queue_state(http, base, "jobs")["queue"]["in_flight"] == 1
            # WHEN the worker neither acks nor extends, and the lease runs out
            # THEN the stream, no longer holding a lease, is pushed a job again: job 1 (the
            # reclaim freelist first), delivered a second time, soon after the deadline
            try:
                (again,) = s.jobs(1, 10)
            except TimeoutError:
                st = queue_state(http, base, "jobs")["queue"]
                raise AssertionError(
                    "the /work stream (max=1) got nothing in the 10 s after its only lease "
                    f"(2 s) was taken; queue counters now {st}: the expired lease still "
                    "fills the stream's slot"
                ) from None
            # re-leased no earlier than the first lease's deadline
            assert again.data["deadline"] - 2000 >= first.data["deadline"]
            assert again.data["$seq"] == 1 and again.data["deliveries"] == 2
            assert again.data["lease_id"] != first.data["lease_id"]
            # (fenced: if this slow machine let the new lease lapse too, the ack says so)
            r = http.post(
                f"{base}/v0/topics/jobs/ack",
                json={"node": "w1", "seqs": [1], "lease_ids": [again.data["lease_id"]]},
            )
            assert r.status_code == 200 and r.json()["acked"] == 1, r.text
            (nxt,) = s.jobs(1, 5)
            assert nxt.data["$seq"] == 2 and nxt.data["deliveries"] == 1
        finally:
            s.close()
