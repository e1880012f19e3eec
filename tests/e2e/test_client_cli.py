"""The Python client (headwater_client) and the `headwater` command against a real server
process (uvicorn on loopback over the moto emulator), with api keys on.

Every client method and every CLI command is exercised: topics, append (idempotent dedupe),
diff and long-poll, watch over SSE (resumed after a dropped connection through a proxy that
cuts its sockets, and re-created from a cursor when the session is gone), queues (claim,
extend, ack, nack, fencing), the worker loop (acks, nacks, redelivery, dead-lettering, lease
extension while a handler runs, a lost lease), Durable Streams on /v1 (create, append, read,
follow by long-poll and SSE, search), typed errors and non-zero exits carrying the server's
message. The CLI runs in-process through typer's CliRunner and as real subprocesses
(`python -m headwater_client` and the installed `headwater` console script)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from typer.testing import CliRunner

from headwater.dev.emulator import MotoServer
from headwater.settings import Settings
from headwater.storage.bootstrap import ensure_resources
from headwater.storage.clients import AwsClients
from headwater_client import (
    AsyncClient,
    Client,
    Conflict,
    ConnectionFailed,
    Forbidden,
    InvalidRequest,
    Job,
    NewRecord,
    NotFound,
    Unauthorized,
    WatchEvent,
)
from headwater_client.cli import app
from tests.e2e.conftest import Cluster, ServerProcess, _session

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

KEY = "hw-client-test-key"
READ_ONLY_KEY = "hw-client-read-only"
REPO = Path(__file__).resolve().parents[2]


# --- fixtures -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def server(
    emulator: MotoServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """One server for the module (the tests use their own topic names)."""
    prefix = f"e2e-{uuid.uuid4().hex[:8]}"
    settings = Settings(resource_prefix=prefix)
    ensure_resources(settings, AwsClients.create(settings, session=_session(emulator)))
    cluster = Cluster(emulator, prefix)
    srv = cluster.start_server(
        str(tmp_path_factory.mktemp("client-cli")),
        TOPICS_API_KEYS=f"{KEY},{READ_ONLY_KEY}:read",
    )
    yield srv
    srv.stop()


@pytest.fixture
def hw(server: ServerProcess) -> Iterator[Client]:
    with Client(server.url, KEY, node="test-node", timeout=15) as client:
        yield client


@pytest.fixture
def name() -> Callable[[str], str]:
    tag = uuid.uuid4().hex[:6]
    return lambda base: f"{base}-{tag}"


class DropProxy:
    """A loopback TCP proxy whose open connections can be cut at once: a dropped network
    path between the client and the server, which both ends see as a closed connection."""

    def __init__(self, target: str) -> None:
        parts = urlsplit(target)
        assert parts.hostname and parts.port
        self.target = (parts.hostname, parts.port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.lock = threading.Lock()
        self.socks: list[socket.socket] = []
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                down, _ = self.listener.accept()
            except OSError:
                return
            try:
                up = socket.create_connection(self.target, timeout=5)
                up.settimeout(None)
            except OSError:
                down.close()
                continue
            with self.lock:
                self.socks += [down, up]
            for src, dst in ((down, up), (up, down)):
                threading.Thread(target=self._pipe, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def drop(self) -> int:
        with self.lock:
            socks, self.socks = self.socks, []
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        return len(socks) // 2

    def close(self) -> None:
        self.closed = True
        self.listener.close()
        self.drop()


@pytest.fixture
def proxy(server: ServerProcess) -> Iterator[DropProxy]:
    p = DropProxy(server.url)
    yield p
    p.close()


def wait_until(check: Callable[[], bool], timeout: float = 15.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what or check}"
        time.sleep(0.02)


class Collector:
    """Reads a watch stream on a thread; the test waits for what it expects."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.events: list[WatchEvent] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for event in self.stream:
                self.events.append(event)
        except BaseException as exc:
            self.error = exc

    def seqs(self) -> list[int]:
        return [r.seq for e in self.events if e.kind == "record" for r in e.records]

    def wait_seqs(self, n: int) -> list[int]:
        wait_until(lambda: len(self.seqs()) >= n or self.error is not None, what=f"{n} records")
        assert self.error is None, self.error
        return self.seqs()

    def close(self) -> None:
        """close() from another thread ends the reader's iteration at once (not at the next
        heartbeat)."""
        self.stream.close()
        self.thread.join(5)
        assert not self.thread.is_alive(), "close() did not wake the reading thread"


# --- topics -----------------------------------------------------------------------------------
def test_topic_lifecycle(hw: Client, name: Callable[[str], str]) -> None:
    a, b = name("life-a"), name("life-b")
    created = hw.create_topic(a, {"durable": True})
    assert created.created and created.config["durable"] is True
    assert hw.create_topic(a).created is False  # PUT merges: an update, not a new topic
    hw.create_topic(b)
    state = hw.get_topic(a)
    assert (state.topic, state.type, state.head_seq, state.count) == (a, "log", 0, 0)
    assert state.queue is None and state.config["durable"] is True
    prefix = a.rsplit("-", 2)[0]  # "life"
    wait_until(lambda: {a, b} <= {t.topic for t in hw.list_topics(prefix)}, what="listing")
    # page_size 1 walks next_cursor: the same topics one page at a time
    paged = [t.topic for t in hw.list_topics(prefix, page_size=1)]
    assert {a, b} <= set(paged) and len(paged) == len(set(paged))
    page = hw.list_topics_page(prefix, page_size=1)
    assert len(page.topics) == 1 and page.next_cursor
    assert hw.health()["status"] == "ok"
    gone = hw.delete_topic(a)
    assert gone.deleted and gone.routers_removed == []
    with pytest.raises(NotFound) as err:
        hw.get_topic(a)
    assert (err.value.status, err.value.code) == (404, "topic_not_found")
    assert a in err.value.message
    assert hw.delete_topic(a).deleted is False


# --- append, diff, long-poll ------------------------------------------------------------------
def test_append_diff_filters_and_record_delete(hw: Client, name: Callable[[str], str]) -> None:
    t = name("orders")
    res = hw.append(t, [{"id": 1}, {"id": 2}, {"id": 3}], tag="shop:order", meta={"src": "t"})
    assert (res.first_seq, res.last_seq, res.count, res.created, res.deduped) == (
        1,
        3,
        3,
        True,
        False,
    )
    assert res.seqs == [1, 2, 3]
    own = hw.append(t, [NewRecord({"id": 4}, tag="shop:refund", node="n1")])
    assert (own.first_seq, own.head_seq) == (4, 4)
    hw.append(t, ["from n2"], node="n2")
    d = hw.diff(t, 0, include_tags=True)
    assert [r.seq for r in d.records] == [1, 2, 3, 4, 5]
    assert d.records[0].data == {"id": 1} and d.records[0].tag == "shop:order"
    assert d.records[0].meta == {"src": "t"}
    assert (d.records[3].tag, d.records[3].node) == ("shop:refund", "n1")
    assert d.caught_up and d.next_from_seq == 5 and d.lag == 0 and d.tombstone is None
    page = hw.diff(t, 1, limit=2)
    assert [r.seq for r in page.records] == [2, 3] and not page.caught_up and page.lag == 2
    assert page.records[0].tag is None  # include_tags off
    # node filter: skip the caller's own records
    assert [r.seq for r in hw.diff(t, 0, node="n1").records] == [1, 2, 3, 5]
    assert [r.seq for r in hw.diff(t, 0, node=["n1", "n2"]).records] == [1, 2, 3]
    deleted = hw.delete_records(t, before_seq=3)
    assert deleted.deleted == 2 and deleted.earliest_seq == 3 and deleted.count == 3
    assert hw.delete_records(t, match="shop:refund").deleted == 1
    assert [r.seq for r in hw.diff(t, 0).records] == [3, 5]


def test_idempotent_append_is_deduplicated(hw: Client, name: Callable[[str], str]) -> None:
    t = name("idem")
    first = hw.append(t, [{"n": 1}, {"n": 2}], idempotency_key="batch-1")
    again = hw.append(t, [{"n": 1}, {"n": 2}], idempotency_key="batch-1")
    assert first.deduped is False and again.deduped is True
    assert (again.first_seq, again.last_seq) == (first.first_seq, first.last_seq)
    other = hw.append(t, [{"n": 3}], idempotency_key="batch-2")
    assert other.deduped is False and other.first_seq == 3
    state = hw.get_topic(t)
    assert state.count == 3 and state.head_seq == 3


def test_long_poll_waits_for_an_append(
    hw: Client, server: ServerProcess, name: Callable[[str], str]
) -> None:
    t = name("lp")
    hw.create_topic(t)
    started = time.monotonic()
    empty = hw.diff(t, 0, wait_ms=400)
    assert empty.records == [] and empty.caught_up and time.monotonic() - started >= 0.35

    def later() -> None:
        time.sleep(0.7)
        with Client(server.url, KEY) as other:
            other.append(t, ["wake"])

    threading.Thread(target=later, daemon=True).start()
    started = time.monotonic()
    woke = hw.diff(t, 0, wait_ms=20_000)
    waited = time.monotonic() - started
    assert [r.data for r in woke.records] == ["wake"]
    assert 0.5 <= waited < 10, waited


def test_follow_yields_batches_and_resumes_from_its_cursor(
    hw: Client, server: ServerProcess, name: Callable[[str], str]
) -> None:
    t = name("follow")
    hw.append(t, [1, 2])
    got: list[int] = []
    stop = threading.Event()

    def append_more() -> None:
        wait_until(lambda: len(got) >= 2, what="backlog")
        with Client(server.url, KEY) as other:
            other.append(t, [3])

    threading.Thread(target=append_more, daemon=True).start()
    for batch in hw.follow(t, 0, wait_ms=5000, stop=stop.is_set):
        got += [r.data for r in batch.records]
        if len(got) >= 3:
            stop.set()
    assert got == [1, 2, 3]
    # a later run resumes from a cursor: only what came after it
    hw.append(t, [4])
    nxt = next(hw.follow(t, 3, wait_ms=1000))
    assert [r.data for r in nxt.records] == [4]


# --- watch ------------------------------------------------------------------------------------
def test_watch_resumes_after_a_dropped_connection(
    hw: Client, proxy: DropProxy, name: Callable[[str], str]
) -> None:
    t, u = name("w-a"), name("w-b")
    hw.append(t, [1, 2, 3])
    hw.create_topic(u)
    with Client(proxy.url, KEY) as via_proxy:
        c = Collector(via_proxy.watch([t, u], heartbeat_ms=1000, include_tags=True))
        try:
            assert c.wait_seqs(3) == [1, 2, 3]
            wait_until(lambda: any(e.kind == "caught-up" and e.topic == t for e in c.events))
            wid = c.stream.wid
            assert c.stream.cursors == {t: 3, u: 0}
            # WHEN the connection drops and records arrive while it is down
            assert proxy.drop() >= 1
            hw.append(t, [4, 5])
            hw.append(u, ["b1"], tag="x")
            # THEN the stream reconnects with Last-Event-ID and resumes exactly: no gap, no repeat
            wait_until(lambda: len(c.seqs()) >= 6 or c.error is not None, what="resume")
            assert c.error is None, c.error
            time.sleep(0.3)
            assert sorted(c.seqs()) == [1, 1, 2, 3, 4, 5] and len(c.seqs()) == 6
            by_topic = {
                e.topic: [r.data for r in e.records] for e in c.events if e.kind == "record"
            }
            assert by_topic[u] == ["b1"]
            assert [r.tag for e in c.events if e.topic == u for r in e.records] == ["x"]
            assert c.stream.reconnects >= 1 and c.stream.wid == wid and c.stream.sessions == 1
            assert c.stream.cursors == {t: 5, u: 1}
        finally:
            c.close()


def test_watch_recreates_a_lost_session_from_its_cursor(
    hw: Client, name: Callable[[str], str]
) -> None:
    t = name("w-lost")
    hw.append(t, ["a", "b"])
    with hw.watch([t]) as stream:
        seen: list[Any] = []
        for event in stream:
            seen += [r.data for r in event.records]
            if len(seen) == 2:
                break
        cursor, wid = stream.last_event_id, stream.wid
    assert seen == ["a", "b"] and cursor and wid
    hw.append(t, ["c", "d"])
    # the same session, resumed from its id (as another process would, with the saved pair)
    with hw.watch([t], wid=wid, last_event_id=cursor) as again:
        c = Collector(again)
        try:
            assert c.wait_seqs(2) == [3, 4]
            assert again.sessions == 0 and again.wid == wid
        finally:
            c.close()
    # a session that no longer exists (404): a new one starts at the cursor, nothing repeated
    hw.append(t, ["e"])
    with hw.watch([t], wid="wid_doesnotexistanymore", last_event_id=cursor) as fresh:
        c = Collector(fresh)
        try:
            assert c.wait_seqs(3) == [3, 4, 5]
            assert fresh.sessions == 1 and fresh.wid not in (None, "wid_doesnotexistanymore")
        finally:
            c.close()
    # tail=True: only records after the head at creation
    with hw.watch([t], tail=True) as tailing:
        c = Collector(tailing)
        try:
            wait_until(
                lambda: tailing.wid is not None and any(e.kind == "caught-up" for e in c.events)
            )
            hw.append(t, ["f"])
            assert c.wait_seqs(1) == [6]
        finally:
            c.close()
    session = hw.create_watch({t: 4})
    assert session.wid.startswith("wid_") and session.topics[t]["from_seq"] == 4


def test_async_client(server: ServerProcess, name: Callable[[str], str]) -> None:
    t, q = name("async"), name("async-q")

    async def scenario() -> None:
        async with AsyncClient(server.url, KEY, node="async-node") as hw:
            assert (await hw.health())["status"] == "ok"
            assert (await hw.create_topic(t)).created
            res = await hw.append(t, [1, 2], tag="k", idempotency_key="a1")
            assert (res.first_seq, res.last_seq) == (1, 2)
            assert (await hw.append(t, [1, 2], idempotency_key="a1")).deduped
            assert [r.data for r in (await hw.diff(t, 0, include_tags=True)).records] == [1, 2]
            assert (await hw.get_topic(t)).count == 2
            listed = await hw.list_topics("zz-no-such-prefix")
            assert listed == []
            stream = hw.watch({t: 1})
            got: list[int] = []
            async for event in stream:
                got += [r.seq for r in event.records]
                if got:
                    break
            assert got == [2] and stream.last_event_id
            assert (await hw.delete_records(t, before_seq=2)).deleted == 1
            await hw.create_queue(q, lease_ms=5000)
            await hw.append(q, ["job"])
            (job,) = (await hw.claim(q)).jobs
            assert (await hw.extend(q, [job.seq], 10_000)).extended == 1
            assert (await hw.nack(q, [job.seq])).done == 1
            (job,) = (await hw.claim(q)).jobs
            assert job.deliveries == 2
            assert (await hw.ack(q, [job.seq], lease_ids=[job.lease_id])).done == 1
            assert (await hw.delete_topic(t)).deleted
            with pytest.raises(NotFound):
                await hw.get_topic(t)

    asyncio.run(scenario())


# --- queues and the worker loop ---------------------------------------------------------------
def test_queue_claim_extend_ack_nack(hw: Client, name: Callable[[str], str]) -> None:
    q = name("jobs")
    made = hw.create_queue(q, lease_ms=10_000)
    assert made.created and made.config["type"] == "queue"
    hw.append(q, [{"i": 1}, {"i": 2}, {"i": 3}], tag="work")
    claimed = hw.claim(q, max_jobs=2)
    assert [j.seq for j in claimed.jobs] == [1, 2] and claimed.ready == 1
    j1, j2 = claimed.jobs
    assert j1.data == {"i": 1} and j1.tag == "work" and j1.deliveries == 1
    assert j1.lease_id.startswith("lease_") and j1.deadline > time.time() * 1000
    ext = hw.extend(q, [j1.seq], 20_000, lease_ids=[j1.lease_id])
    assert ext.extended == 1 and ext.deadlines[j1.seq] > j1.deadline
    # another node holds nothing: skipped, not acked
    other = hw.ack(q, [j1.seq], node="someone-else")
    assert other.done == 0 and other.skipped == [j1.seq]
    done = hw.ack_job(j1)
    assert (done.done, done.skipped, done.in_flight) == (1, [], 1)
    back = hw.nack_job(j2)
    assert back.done == 1 and back.ready == 2
    again = hw.claim(q, max_jobs=5)
    assert sorted((j.seq, j.deliveries) for j in again.jobs) == [(2, 2), (3, 1)]
    # a stale lease id is fenced off
    stale = hw.ack(q, [2], lease_ids=[j2.lease_id])
    assert stale.done == 0 and stale.skipped == [2]
    assert hw.nack(q, [2, 3], delay_ms=60_000).done == 2
    assert hw.claim(q).jobs == []  # delayed
    state = hw.get_topic(q)
    assert state.type == "queue" and state.queue is not None and state.queue.in_flight == 0
    log = name("plain")
    hw.create_topic(log)
    with pytest.raises(Conflict) as err:
        hw.claim(log)
    assert err.value.code == "not_a_queue"


def test_worker_acks_nacks_and_dead_letters(hw: Client, name: Callable[[str], str]) -> None:
    q, dlq = name("wq"), name("wq-dlq")
    hw.create_queue(q, max_deliveries=2, dead_letter=dlq, lease_ms=5000)
    hw.append(q, [{"ok": True, "n": 1}, {"ok": False, "n": 2}, {"ok": True, "n": 3}])
    seen: list[tuple[int, int]] = []

    def handler(job: Job) -> str:
        seen.append((job.seq, job.deliveries))
        if not job.data["ok"]:
            raise RuntimeError("poison")
        return f"done {job.data['n']}"

    outcomes: list[Any] = []
    stats = hw.worker(q, handler, on_outcome=outcomes.append, poll_interval_s=0.05).run(
        until_empty=True
    )
    # the failing job is delivered twice (nacked each time), then dead-lettered at the third claim
    assert (stats.acked, stats.nacked, stats.lost) == (2, 2, 0)
    assert sorted(seen) == [(1, 1), (2, 1), (2, 2), (3, 1)]
    nacked = [o for o in outcomes if o.status == "nacked"]
    assert all(isinstance(o.error, RuntimeError) for o in nacked)
    assert {o.result for o in outcomes if o.status == "acked"} == {"done 1", "done 3"}
    state = hw.get_topic(q)
    assert state.count == 0 and state.queue is not None and state.queue.dead_lettered == 1
    (moved,) = hw.diff(dlq, 0).records
    assert moved.data == {"ok": False, "n": 2}
    assert moved.meta is not None and moved.meta["$dead_letter_from"] == q
    assert moved.meta["$dead_letter_deliveries"] == 2 and moved.meta["$dead_letter_src_seq"] == 2


def test_worker_extends_the_lease_while_a_slow_handler_runs(
    hw: Client, name: Callable[[str], str]
) -> None:
    q = name("slow")
    hw.create_queue(q)
    hw.append(q, ["slow job", "second"])
    stolen: list[int] = []

    def handler(job: Job) -> None:
        # three leases long: without extensions another worker would get this job
        for _ in range(6):
            time.sleep(0.75)
            stolen.extend(j.seq for j in hw.claim(q, node="thief", lease_ms=60_000).jobs)

    # extended every 0.5 s: an extension may come up to a second late and still hold
    stats = hw.worker(q, handler, lease_ms=1500).run(max_jobs=1)
    (outcome,) = stats.outcomes
    assert outcome.status == "acked" and outcome.extensions >= 3, outcome
    assert outcome.elapsed_s >= 4.4
    assert 1 not in stolen  # the thief only ever got the other job
    assert hw.get_topic(q).count == 1


def test_a_worker_whose_lease_lapses_loses_the_job(hw: Client, name: Callable[[str], str]) -> None:
    q = name("lapse")
    hw.create_queue(q)
    hw.append(q, ["job"])

    def handler(job: Job) -> None:
        time.sleep(0.5)  # the 200 ms lease lapses; nobody extends it
        (taken,) = hw.claim(q, node="other", lease_ms=60_000).jobs
        assert taken.seq == job.seq and taken.deliveries == 2

    stats = hw.worker(q, handler, lease_ms=200, extend_every_s=30).run(max_jobs=1)
    assert stats.lost == 1 and stats.outcomes[0].status == "lost"
    assert hw.get_topic(q).count == 1  # the other holder still has it


# --- errors -----------------------------------------------------------------------------------
def test_errors_are_typed_with_the_servers_envelope(
    server: ServerProcess, hw: Client, name: Callable[[str], str]
) -> None:
    with Client(server.url, "wrong-key") as bad, pytest.raises(Unauthorized) as err:
        bad.list_topics()
    assert err.value.status == 401 and err.value.code == "unauthorized" and err.value.message
    with Client(server.url, READ_ONLY_KEY) as ro, pytest.raises(Forbidden) as forbidden:
        ro.append(name("ro"), [1])
    assert forbidden.value.status == 403 and "write" in forbidden.value.message
    with pytest.raises(InvalidRequest) as invalid:
        hw.create_topic(name("bad"), {"type": "bogus"})
    assert invalid.value.status == 400 and invalid.value.code == "invalid_request"
    assert invalid.value.detail == {"field": "type"} and "log" in invalid.value.message
    with pytest.raises(ConnectionFailed), Client("http://127.0.0.1:9", KEY, timeout=2) as nowhere:
        nowhere.health()


# --- Durable Streams (/v1) --------------------------------------------------------------------
def test_durable_streams_client(
    hw: Client, server: ServerProcess, name: Callable[[str], str]
) -> None:
    s = name("ds-orders")
    ds = hw.streams
    made = ds.create(s)
    assert made.created and made.next_offset
    assert ds.create(s).created is False
    first = ds.append_json(s, [{"n": 1}, {"n": 2}])
    chunk = ds.read(s)
    assert chunk.items == [{"n": 1}, {"n": 2}] and chunk.up_to_date
    assert chunk.next_offset == first.next_offset == ds.head(s).next_offset
    assert ds.read(s, chunk.next_offset).items == []
    info = ds.head(s)
    assert info.content_type.startswith("application/json") and not info.closed
    # follow by long-poll and by SSE: each picks up an append made while it waits
    for live in ("long-poll", "sse"):

        def later(value: int = 3 if live == "long-poll" else 4) -> None:
            time.sleep(0.5)
            with Client(server.url, KEY) as other:
                other.streams.append_json(s, [{"n": value}])

        threading.Thread(target=later, daemon=True).start()
        got = next(ds.follow(s, ds.head(s).next_offset, live=live, timeout_s=10))  # type: ignore[arg-type]
        assert got.items == [{"n": 3 if live == "long-poll" else 4}], (live, got)
    # a closed stream ends a follow once it is read to the end
    closing = ds.append(s, b"", content_type="application/json", close=True)
    assert closing.closed
    for live in ("long-poll", "sse"):
        chunks = list(ds.follow(s, "-1", live=live))  # type: ignore[arg-type]
        assert [i for c in chunks for i in c.items or []] == [{"n": n} for n in (1, 2, 3, 4)]
        assert chunks[-1].closed
    b = name("ds-bytes")
    ds.create(b, content_type="text/plain")
    ds.append(b, "hello ", content_type="text/plain")
    ds.append(b, b"world", content_type="text/plain")
    assert ds.read(b).data == b"hello world"
    ds.delete(b)
    with pytest.raises(NotFound):
        ds.head(b)


def evlog_stream(hw: Client, server: ServerProcess, name: str) -> None:
    hw.streams.create(name)
    profile = {"apiVersion": "durable.streams/profile/v1", "profile": {"kind": "evlog"}}
    r = httpx.post(
        f"{server.url}/v1/stream/{name}/_profile",
        json=profile,
        headers={"Authorization": f"Bearer {KEY}"},
    )
    assert r.status_code == 200, r.text
    hw.streams.append_json(
        name,
        [
            {"service": "checkout", "level": "error", "status": 503, "message": "issuer declined"},
            {"service": "search", "level": "info", "status": 200, "message": "ok"},
            {"service": "checkout", "level": "info", "status": 200, "message": "ok"},
        ],
    )


def test_durable_streams_search(
    hw: Client, server: ServerProcess, name: Callable[[str], str]
) -> None:
    s = name("ds-logs")
    evlog_stream(hw, server, s)
    found = hw.streams.search(s, "service:checkout status:>=500")
    assert found.total == 1 and found.total_relation == "eq" and not found.timed_out
    assert [h.source["message"] for h in found.hits] == ["issuer declined"]
    both = hw.streams.search(s, "service:checkout", size=1)
    assert both.total == 2 and len(both.hits) == 1 and both.next_search_after
    rest = hw.streams.search(s, "service:checkout", size=1, search_after=both.next_search_after)
    assert len(rest.hits) == 1 and rest.hits[0].offset != both.hits[0].offset
    with pytest.raises(InvalidRequest):
        hw.streams.search(s, "nosuchfield:(")


# --- the CLI, in-process (CliRunner) ----------------------------------------------------------
class Cli:
    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.runner = CliRunner()

    def __call__(self, *args: str, input: str | None = None, code: int = 0, key: str = KEY) -> Any:
        result = self.runner.invoke(
            app,
            list(args),
            input=input,
            env={
                "HEADWATER_URL": self.server.url,
                "HEADWATER_KEY": key,
                "HEADWATER_NODE": "cli-test",
            },
        )
        assert result.exit_code == code, (
            args,
            result.exit_code,
            result.stdout,
            result.stderr,
            result.exception,
        )
        return result

    def lines(self, *args: str, **kw: Any) -> list[Any]:
        return [json.loads(line) for line in self(*args, **kw).stdout.splitlines() if line.strip()]


@pytest.fixture
def cli(server: ServerProcess) -> Cli:
    return Cli(server)


def test_cli_topics_and_topic_commands(cli: Cli, hw: Client, name: Callable[[str], str]) -> None:
    t = name("clitopic")
    (made,) = cli.lines("topic", "create", t, "--config", '{"durable": true}')
    assert (
        made == {"topic": t, "created": True, "config": made["config"]}
        and made["config"]["durable"]
    )
    (q,) = cli.lines("topic", "create", name("cliq"), "--queue", "--max-deliveries", "3")
    assert q["config"]["type"] == "queue" and q["config"]["max_deliveries"] == 3
    hw.append(t, [1, 2])
    (shown,) = cli.lines("topic", "show", t)
    assert shown["topic"] == t and shown["head_seq"] == 2 and "performance" not in shown
    wait_until(lambda: t in {r["topic"] for r in cli.lines("topics", "--prefix", "clitopic")})
    listed = {r["topic"]: r for r in cli.lines("topics", "--prefix", "clitopic")}
    assert listed[t]["count"] == 2 and listed[t]["durable"] is True
    table = cli("--pretty", "topics", "--prefix", "clitopic").stdout
    assert t in table and "head_seq" in table and "┃" in table  # a rich table
    (gone,) = cli.lines("topic", "delete", t)
    assert gone == {"topic": t, "deleted": True, "routers_removed": []}


def test_cli_append_idempotent_and_from_stdin(
    cli: Cli, hw: Client, name: Callable[[str], str]
) -> None:
    t = name("cliapp")
    (one,) = cli.lines(
        "append", t, '{"id": 1}', "--tag", "shop:o", "--key", "k1", "--meta", '{"m": 1}'
    )
    assert (one["first_seq"], one["last_seq"], one["deduped"]) == (1, 1, False)
    (dup,) = cli.lines("append", t, '{"id": 1}', "--key", "k1")
    assert (dup["first_seq"], dup["deduped"]) == (1, True)
    lines = cli.lines("append", t, "--batch", "2", input='{"id": 2}\n\n"three"\n4\n')
    assert [(r["first_seq"], r["last_seq"]) for r in lines] == [(2, 3), (4, 4)]
    (raw,) = cli.lines("append", t, "plain text", "--raw")
    assert raw["first_seq"] == 5
    # a keyed stdin append of several batches: batch N gets KEY:N, so a rerun dedupes all of it
    again = cli.lines("append", t, "-", "--batch", "1", "--key", "run7", input="6\n7\n")
    rerun = cli.lines("append", t, "-", "--batch", "1", "--key", "run7", input="6\n7\n")
    assert [r["deduped"] for r in again] == [False, False] and [r["deduped"] for r in rerun] == [
        True,
        True,
    ]
    recs = hw.diff(t, 0, include_tags=True).records
    assert [r.data for r in recs] == [{"id": 1}, {"id": 2}, "three", 4, "plain text", 6, 7]
    assert recs[0].tag == "shop:o" and recs[0].meta == {"m": 1}
    pretty = cli("--pretty", "append", t, '"x"', "--key", "k1").stdout
    assert "deduped" in pretty
    bad = cli("append", t, "{not json", code=2)
    assert "not valid JSON" in bad.stderr


def test_cli_tail_resumes_from_its_state_file(
    cli: Cli, hw: Client, tmp_path: Path, name: Callable[[str], str]
) -> None:
    t = name("clitail")
    hw.append(t, [{"n": 1}, {"n": 2}, {"n": 3}], tag="tg")
    assert [r["$seq"] for r in cli.lines("tail", t)] == [1, 2, 3]
    assert [r["data"] for r in cli.lines("tail", t, "--from", "1", "--max-records", "1")] == [
        {"n": 2}
    ]
    assert [r["$seq"] for r in cli.lines("tail", t, "-n", "1")] == [3]
    assert cli.lines("tail", t, "--tags", "--from", "2")[0]["$tag"] == "tg"
    state = tmp_path / "cursor.json"
    assert [
        r["$seq"] for r in cli.lines("tail", t, "--state", str(state), "--max-records", "2")
    ] == [1, 2]
    assert json.loads(state.read_text()) == {"topic": t, "from_seq": 2}
    hw.append(t, [{"n": 4}])
    assert [r["$seq"] for r in cli.lines("tail", t, "--state", str(state))] == [3, 4]
    assert json.loads(state.read_text())["from_seq"] == 4
    # -f by long-poll and by watch: with records already there, stop after --max-records
    assert [
        r["$seq"] for r in cli.lines("tail", t, "-f", "--poll", "--from", "2", "--max-records", "2")
    ] == [3, 4]
    assert [r["$seq"] for r in cli.lines("tail", t, "-f", "--from", "1", "--max-records", "3")] == [
        2,
        3,
        4,
    ]
    assert "$seq" in cli("--pretty", "tail", t, "--from", "3").stdout


def test_cli_queue_commands(cli: Cli, hw: Client, name: Callable[[str], str]) -> None:
    q = name("cliq")
    cli("topic", "create", q, "--queue", "--lease-ms", "30000")
    hw.append(q, [{"i": 1}, {"i": 2}, {"i": 3}])
    jobs = cli.lines("claim", q, "--max", "2")
    assert [(j["$seq"], j["deliveries"], j["data"]) for j in jobs] == [
        (1, 1, {"i": 1}),
        (2, 1, {"i": 2}),
    ]
    assert (ack := cli.lines("ack", q, "1", "--lease-id", jobs[0]["lease_id"]))[0]["acked"] == 1, (
        ack
    )
    (ext,) = cli.lines("extend", q, "2", "--lease-ms", "60000")
    assert ext["extended"] == 1 and "2" in ext["deadlines"]
    (nacked,) = cli.lines("nack", q, "2")
    assert nacked["nacked"] == 1
    # not held by this node: a non-zero exit naming the seqs
    res = cli("ack", q, "2", code=1)
    assert json.loads(res.stdout)["skipped"] == [2] and "not held by cli-test" in res.stderr
    table = cli("--pretty", "claim", q, "--max", "5").stdout
    assert "lease_" in table and "deliveries" in table
    assert hw.get_topic(q).queue is not None


def test_cli_work_runs_a_command_per_job(cli: Cli, hw: Client, name: Callable[[str], str]) -> None:
    q, dlq = name("cliwork"), name("cliwork-dlq")
    hw.create_queue(q, max_deliveries=1, dead_letter=dlq)
    hw.append(q, [{"ok": True, "n": 1}, {"ok": False, "n": 2}, {"ok": True, "n": 3}], tag="t1")
    script = (
        "import json, os, sys; d = json.load(sys.stdin); "
        "print('ran', d['n'], os.environ['HEADWATER_JOB_SEQ'], os.environ['HEADWATER_JOB_TAG']); "
        "sys.exit(0 if d['ok'] else 7)"
    )
    res = cli("work", q, "--until-empty", "--lease-ms", "3000", "--", sys.executable, "-c", script)
    assert res.stdout.splitlines() == ["ran 1 1 t1", "ran 2 2 t1", "ran 3 3 t1"]
    reports = [json.loads(line) for line in res.stderr.splitlines()]
    by_job = {r["job"]: r for r in reports if "job" in r}
    assert by_job[1]["status"] == "acked" and by_job[3]["status"] == "acked"
    assert by_job[2]["status"] == "nacked" and by_job[2]["exit_code"] == 7
    assert reports[-1] == {"processed": 3, "acked": 2, "nacked": 1, "lost": 0}
    # max_deliveries 1: the failed job went to the dead-letter topic at the next claim
    (moved,) = hw.diff(dlq, 0).records
    assert moved.data == {"ok": False, "n": 2} and moved.meta is not None
    assert moved.meta["$dead_letter_from"] == q
    assert hw.get_topic(q).count == 0
    # --full sends the whole job; --max-jobs stops
    hw.append(q, ["a", "b"])
    full = cli(
        "work",
        q,
        "--full",
        "--max-jobs",
        "1",
        "--",
        sys.executable,
        "-c",
        "import json,sys; j=json.load(sys.stdin); "
        "print(j['$seq'], j['lease_id'][:6], j['deliveries'])",
    )
    assert full.stdout.split() == ["4", "lease_", "1"]
    usage = cli("work", q, code=2)
    assert usage.exit_code == 2


def test_cli_durable_streams(
    cli: Cli, hw: Client, server: ServerProcess, name: Callable[[str], str]
) -> None:
    s = name("clids")
    (made,) = cli.lines("ds", "create", s)
    assert made["created"] is True
    (app1,) = cli.lines("ds", "append", s, '{"n": 1}')
    assert app1["appended"] == 1
    (app2,) = cli.lines("ds", "append", s, input='{"n": 2}\n{"n": 3}\n')
    assert app2["appended"] == 2
    res = cli("ds", "read", s)
    assert [json.loads(x) for x in res.stdout.splitlines()] == [{"n": 1}, {"n": 2}, {"n": 3}]
    offset = json.loads(res.stderr.splitlines()[-1])["next_offset"]
    assert offset == hw.streams.head(s).next_offset
    cli("ds", "append", s, '{"n": 4}')
    resumed = cli("ds", "read", s, "--offset", app1["next_offset"])
    assert [json.loads(x)["n"] for x in resumed.stdout.splitlines()] == [2, 3, 4]
    followed = cli.lines("ds", "read", s, "-f", "--offset", offset, "--max-items", "1")
    assert followed == [{"n": 4}]
    via_sse = cli.lines("ds", "read", s, "-f", "--live", "sse", "--max-items", "4")
    assert via_sse == [{"n": n} for n in (1, 2, 3, 4)]
    b = name("clibytes")
    cli("ds", "append", b, "--create", "--content-type", "text/plain", input="raw bytes\n")
    assert cli("ds", "read", b).stdout == "raw bytes\n"
    logs = name("clilogs")
    evlog_stream(hw, server, logs)
    hits = cli.lines("ds", "search", logs, "service:checkout status:>=500")
    assert [h["source"]["message"] for h in hits] == ["issuer declined"]
    table = cli("--pretty", "ds", "search", logs, "service:checkout").stdout
    assert table.count("checkout") == 2
    missing = cli("ds", "read", name("nostream"), code=1)
    assert "not_found" in missing.stderr or "404" in missing.stderr


def test_cli_errors_exit_non_zero_with_the_servers_message(
    cli: Cli, name: Callable[[str], str]
) -> None:
    t = name("clierr")
    res = cli("topic", "show", t, code=1)
    (err,) = [json.loads(x) for x in res.stderr.splitlines()]
    assert err["error"]["status"] == 404 and err["error"]["code"] == "topic_not_found"
    assert t in err["error"]["message"]
    pretty = cli("--pretty", "topic", "show", t, code=1)
    assert "error: 404 topic_not_found" in pretty.stderr
    denied = cli("append", t, "1", key=READ_ONLY_KEY, code=1)
    assert json.loads(denied.stderr)["error"]["code"] == "forbidden"
    unknown = cli("topics", key="nope", code=1)
    assert json.loads(unknown.stderr)["error"]["status"] == 401
    nowhere = cli("--url", "http://127.0.0.1:9", "topics", code=3)
    assert "cannot reach http://127.0.0.1:9" in nowhere.stderr


# --- the CLI as real processes ----------------------------------------------------------------
def run_cli(
    server_url: str, *args: str, input: str | None = None, exe: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "HEADWATER_URL": server_url,
        "HEADWATER_KEY": KEY,
        "HEADWATER_NODE": "proc",
    }
    return subprocess.run(
        [*(exe or [sys.executable, "-m", "headwater_client"]), *args],
        input=input,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_cli_processes_and_console_script(
    server: ServerProcess, hw: Client, name: Callable[[str], str]
) -> None:
    t = name("proc")
    done = run_cli(server.url, "append", t, "-", "--key", "p1", input="1\n2\n")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["last_seq"] == 2  # stdout is a pipe: JSON lines
    tailed = run_cli(server.url, "tail", t)
    assert [json.loads(x)["data"] for x in tailed.stdout.splitlines()] == [1, 2]
    missing = run_cli(server.url, "topic", "show", name("nope"))
    assert missing.returncode == 1 and "topic_not_found" in missing.stderr
    script = shutil.which("headwater", path=str(Path(sys.executable).parent))
    assert script is not None, (
        "the headwater console script is not installed (pip install -e '.[client]')"
    )
    shown = run_cli(server.url, "topic", "show", t, exe=[script])
    assert shown.returncode == 0 and json.loads(shown.stdout)["head_seq"] == 2
    helped = run_cli(server.url, "--help", exe=[script])
    assert helped.returncode == 0 and "work" in helped.stdout and "ds" in helped.stdout


def test_cli_tail_follow_survives_a_dropped_connection(
    hw: Client, proxy: DropProxy, tmp_path: Path, name: Callable[[str], str]
) -> None:
    t = name("proctail")
    hw.append(t, [1, 2, 3])
    state = tmp_path / "tail.json"
    env = {**os.environ, "HEADWATER_URL": proxy.url, "HEADWATER_KEY": KEY}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "headwater_client",
            "tail",
            t,
            "-f",
            "--state",
            str(state),
            "--max-records",
            "6",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()  # type: ignore[union-attr]
    try:
        got = [json.loads(lines.get(timeout=20))["data"] for _ in range(3)]
        assert got == [1, 2, 3]
        assert proxy.drop() >= 1  # WHEN the connection is cut mid-follow
        hw.append(t, [4, 5, 6, 7])
        got += [json.loads(lines.get(timeout=20))["data"] for _ in range(3)]
        assert proc.wait(timeout=20) == 0, proc.stderr.read()  # type: ignore[union-attr]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # THEN it resumed where it was: every record once, in order, and the cursor saved
    assert got == [1, 2, 3, 4, 5, 6] and lines.empty()
    assert json.loads(state.read_text()) == {"topic": t, "from_seq": 6}
    # a rerun with the state file picks up exactly the rest
    rest = run_cli(proxy.url, "tail", t, "--state", str(state))
    assert [json.loads(x)["data"] for x in rest.stdout.splitlines()] == [7]
