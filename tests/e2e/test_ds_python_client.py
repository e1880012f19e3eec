"""The public Python Durable Streams client (PyPI `durable-streams` 0.1.0) against a real
Headwater server process: create, append (with and without Stream-Seq), HEAD, catch-up
reads, resume from a saved offset, long-poll and SSE live reads, a binary stream, delete,
and Stream-Seq conflicts, all through the client's public API."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
from durable_streams import (
    DurableStream,
    SeqConflictError,
    StreamNotFoundError,
    stream,
)

from headwater.dev.emulator import MotoServer
from headwater.settings import Settings
from headwater.storage.bootstrap import ensure_resources
from headwater.storage.clients import AwsClients
from tests.e2e.conftest import Cluster, _session

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]

TIMEOUT_S = 10.0


@pytest.fixture(scope="module")
def base(emulator: MotoServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One Headwater server process (own resource prefix) shared by this module's tests."""
    prefix = f"e2e-{uuid.uuid4().hex[:8]}"
    settings = Settings(resource_prefix=prefix)
    ensure_resources(settings, AwsClients.create(settings, session=_session(emulator)))
    cluster = Cluster(emulator, prefix)
    server = cluster.start_server(str(tmp_path_factory.mktemp("ds-python-client")))
    try:
        yield f"{server.url}/v1/stream"
    finally:
        server.stop()


def _url(base: str, label: str) -> str:
    return f"{base}/{label}-{uuid.uuid4().hex[:10]}"


def _later(delay_s: float, fn: Callable[[], Any]) -> Future[Any]:
    """Runs fn on another thread after delay_s; .result() re-raises its error."""

    def run() -> Any:
        time.sleep(delay_s)
        return fn()

    pool = ThreadPoolExecutor(1)
    fut = pool.submit(run)
    pool.shutdown(wait=False)
    return fut


def test_json_stream_lifecycle_through_the_python_client(base: str) -> None:
    url = _url(base, "py-json")
    # GIVEN a JSON stream created by the client
    h = DurableStream.create(url, content_type="application/json", timeout=TIMEOUT_S)
    try:
        assert h.content_type == "application/json"
        # WHEN objects are appended, some with Stream-Seq
        items: list[dict[str, Any]] = [{"id": i, "text": f"item {i}"} for i in range(3)]
        offsets = [h.append(item).next_offset for item in items]
        seq_items = [{"id": 3, "seq": "0003"}, {"id": 4, "seq": "0004"}]
        for item in seq_items:
            offsets.append(h.append(item, seq=str(item["seq"])).next_offset)
        items += seq_items
        # THEN every append returns a new, strictly increasing offset
        assert all(isinstance(o, str) and o for o in offsets)
        assert offsets == sorted(set(offsets)), offsets

        # HEAD reports the type and the tail offset
        meta = h.head()
        assert meta.exists is True
        assert meta.content_type == "application/json"
        assert meta.offset == offsets[-1]

        # a catch-up read returns exactly what was appended, in order
        with stream(url, offset="-1", live=False, timeout=TIMEOUT_S) as res:
            assert res.read_json() == items
            assert res.up_to_date is True
            assert res.offset == offsets[-1]
        # ...and so does a read with no offset through the handle
        with h.stream(live=False) as res:
            assert res.read_json() == items

        # a read from a saved offset returns only the later items
        with h.stream(offset=offsets[1], live=False) as res:
            assert res.read_json() == items[2:]
        # ...and a read from the tail returns nothing, up to date
        with h.stream(offset=offsets[-1], live=False) as res:
            assert res.read_json() == []
            assert res.up_to_date is True

        # a Stream-Seq that does not increase is a conflict and appends nothing
        with pytest.raises(SeqConflictError):
            h.append({"id": "stale"}, seq="0002")
        with pytest.raises(SeqConflictError):
            h.append({"id": "repeat"}, seq="0004")
        h.append({"id": 5}, seq="0010")
        items.append({"id": 5})
        with h.stream(offset="-1", live=False) as res:
            assert res.read_json() == items

        # WHEN the stream is deleted THEN reads and HEAD raise StreamNotFoundError
        h.delete()
        # (the client raises on the initial GET's 404)
        with pytest.raises(StreamNotFoundError):
            stream(url, offset="-1", live=False, timeout=TIMEOUT_S)
        with pytest.raises(StreamNotFoundError):
            h.head()
        with pytest.raises(StreamNotFoundError):
            h.delete()
    finally:
        h.close()


def test_long_poll_read_receives_an_append_made_while_waiting(base: str) -> None:
    url = _url(base, "py-lp")
    with DurableStream.create(url, content_type="application/json", timeout=TIMEOUT_S) as h:
        tail = h.append({"n": 0}).next_offset
        # GIVEN a long-poll read parked at the tail WHEN another thread appends meanwhile
        writer = DurableStream(url, content_type="application/json", timeout=TIMEOUT_S)
        t = _later(0.5, lambda: writer.append({"n": 1, "from": "other thread"}))
        with h.stream(offset=tail, live="long-poll") as res:
            # stream() returns once the first long-poll answers: 200 means it was woken by
            # the append (a 204 would mean it timed out and the client had to poll again)
            first_status = res.status
            got = next(iter(res.iter_json()))
        t.result(TIMEOUT_S)
        writer.close()
        # THEN the waiting read returns the new item
        assert got == {"n": 1, "from": "other thread"}
        assert first_status == 200, "the parked long-poll was not woken by the append"


def test_sse_read_yields_appended_items_then_live_ones(base: str) -> None:
    url = _url(base, "py-sse")
    with DurableStream.create(url, content_type="application/json", timeout=TIMEOUT_S) as h:
        items: list[Any] = [{"i": 0}, {"i": 1, "text": "line one\nline two"}, [1, 2, 3], "s", 4]
        for item in items:
            h.append(item)
        live_item = {"i": "live"}
        # GIVEN an SSE read from the start WHEN one more item is appended while it is open
        t = _later(0.5, lambda: h.append(live_item))
        got: list[Any] = []
        with h.stream(offset="-1", live="sse") as res:
            assert res.headers.get("content-type") == "text/event-stream"
            for item in res.iter_json():
                got.append(item)
                if len(got) == len(items) + 1:
                    break
        t.result(TIMEOUT_S)
        # THEN it yields the catch-up items in order and then the live one
        assert got == [*items, live_item]

        # iter_events pairs each data event with its control: the metadata of the last
        # event is the tail, up to date
        tail = h.head().offset
        assert tail is not None
        batches: list[Any] = []
        with h.stream(offset="-1", live="sse") as res:
            for event in res.iter_events(mode="json"):
                batches.extend(event.data)
                if len(batches) >= len(got):
                    break
        assert batches == got
        assert event.next_offset == tail
        assert event.up_to_date is True
        offset_after = event.next_offset

        # an SSE read resumed from the tail yields only what is appended afterwards
        with h.stream(offset=offset_after, live="sse") as res:
            t2 = _later(0.3, lambda: h.append({"i": "after"}))
            events = res.iter_events(mode="json")
            first = next(events)
            t2.result(TIMEOUT_S)
        assert first.data == [{"i": "after"}]
        assert first.next_offset > offset_after
        assert first.up_to_date is True


def test_binary_stream_round_trips_bytes(base: str) -> None:
    url = _url(base, "py-bin")
    payload = bytes(range(256)) + b"\x00\r\n\xff\xfe"
    with DurableStream.create(url, content_type="application/octet-stream", timeout=TIMEOUT_S) as h:
        first = h.append(payload).next_offset
        h.append(b"\x00tail\xff")
        with h.stream(offset="-1", live=False) as res:
            assert res.read_bytes() == payload + b"\x00tail\xff"
        with h.stream(offset=first, live=False) as res:
            assert res.read_bytes() == b"\x00tail\xff"
        assert h.head().content_type == "application/octet-stream"
