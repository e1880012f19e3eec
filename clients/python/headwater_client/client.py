"""`Client` (sync) and `AsyncClient` (asyncio) for Headwater's /v0 topics API.

    from headwater_client import Client

    with Client("http://127.0.0.1:4000", key="...") as hw:
        hw.append("orders", [{"id": 1}], tag="tenant42:order", idempotency_key="o-1")
        page = hw.diff("orders", from_seq=0, wait_ms=10_000)
        for event in hw.watch(["orders"]):
            ...

Every error answer raises a typed `ApiError` (see `headwater_client.errors`) carrying the
server's envelope; an unreachable server raises `ConnectionFailed`."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import httpx

from headwater_client import _calls
from headwater_client._version import __version__
from headwater_client.errors import ConnectionFailed, error_from_response
from headwater_client.models import (
    AppendResult,
    ClaimResult,
    DeleteRecordsResult,
    DeleteTopicResult,
    DiffResult,
    ExtendResult,
    Job,
    LeaseResult,
    PutTopicResult,
    TopicPage,
    TopicState,
    TopicSummary,
    WatchSession,
)
from headwater_client.watch import AsyncWatchStream, WatchStream

if TYPE_CHECKING:
    from headwater_client.streams import Streams
    from headwater_client.worker import Worker

__all__ = ["DEFAULT_URL", "AsyncClient", "Client", "default_node"]

T = TypeVar("T")
DEFAULT_URL = "http://127.0.0.1:4000"
DEFAULT_TIMEOUT_S = 30.0


def default_node() -> str:
    """This process's worker identity: `<host>:<pid>`."""
    return f"{socket.gethostname()}:{os.getpid()}"


class _Base:
    def __init__(self, url: str, key: str | None, node: str | None, timeout: float) -> None:
        self.url = url.rstrip("/")
        self.key = key
        self.node = node or default_node()
        self.timeout = timeout
        self._headers = {
            "User-Agent": f"headwater-client/{__version__}",
            **_calls.auth_headers(key),
        }

    def _request_args(self, call: _calls.Call[Any]) -> dict[str, Any]:
        args: dict[str, Any] = {"headers": {**self._headers, **(call.headers or {})}}
        if call.json is not None:
            args["json"] = call.json
        if call.params:
            args["params"] = dict(call.params)
        if call.extra_timeout_s:
            args["timeout"] = httpx.Timeout(self.timeout + call.extra_timeout_s)
        return args

    @staticmethod
    def _check(call: _calls.Call[T], response: httpx.Response) -> T:
        if response.status_code >= 400 and response.status_code not in call.answers:
            raise error_from_response(response)
        return call.parse(response)

    def _node(self, node: str | None) -> str:
        return node if node is not None else self.node


class Client(_Base):
    """A synchronous /v0 client. `key` is the bearer api key (TOPICS_API_KEYS); `node` the
    worker identity used by the queue calls (default `<host>:<pid>`)."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        key: str | None = None,
        *,
        node: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(url, key, node, timeout)
        self._http = httpx.Client(base_url=self.url, timeout=timeout, transport=transport)
        self._streams: Streams | None = None

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _run(self, call: _calls.Call[T]) -> T:
        try:
            response = self._http.request(call.method, call.path, **self._request_args(call))
        except httpx.TransportError as exc:
            raise ConnectionFailed(f"{call.method} {self.url}{call.path}: {exc}", exc) from exc
        return self._check(call, response)

    @property
    def streams(self) -> Streams:
        """The /v1 Durable Streams surface of the same server (same key)."""
        if self._streams is None:
            from headwater_client.streams import Streams

            self._streams = Streams(self)
        return self._streams

    # --- probes ---------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        return self._run(_calls.health())

    # --- topics ---------------------------------------------------------------------------
    def create_topic(self, topic: str, config: Mapping[str, Any] | None = None) -> PutTopicResult:
        """Create or reconfigure a topic (PUT merges: omitted fields keep their value)."""
        return self._run(_calls.put_topic(topic, config))

    def create_queue(
        self,
        queue: str,
        *,
        lease_ms: int | None = None,
        max_deliveries: int | None = None,
        dead_letter: str | None = None,
        claim_jitter_ms: int | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> PutTopicResult:
        """A topic of type queue (§10). After `max_deliveries` deliveries a job moves to the
        `dead_letter` topic (with max_deliveries 0 or no dead_letter it is retried forever)."""
        body = _calls.queue_config(
            lease_ms=lease_ms,
            max_deliveries=max_deliveries,
            dead_letter=dead_letter,
            claim_jitter_ms=claim_jitter_ms,
            config=config,
        )
        return self._run(_calls.put_topic(queue, body))

    def get_topic(self, topic: str, *, touch: bool = True) -> TopicState:
        return self._run(_calls.get_topic(topic, touch))

    def list_topics_page(
        self, prefix: str = "", page_size: int = 100, cursor: str | None = None
    ) -> TopicPage:
        return self._run(_calls.list_topics(prefix, page_size, cursor))

    def list_topics(self, prefix: str = "", page_size: int = 100) -> list[TopicSummary]:
        """Every topic (following `next_cursor` across pages)."""
        out: list[TopicSummary] = []
        cursor: str | None = None
        while True:
            page = self.list_topics_page(prefix, page_size, cursor)
            out.extend(page.topics)
            if not page.next_cursor:
                return out
            cursor = page.next_cursor

    def delete_topic(self, topic: str, *, if_empty: bool = False) -> DeleteTopicResult:
        return self._run(_calls.delete_topic(topic, if_empty))

    # --- records --------------------------------------------------------------------------
    def append(
        self,
        topic: str,
        records: Sequence[Any],
        *,
        tag: str | None = None,
        meta: Mapping[str, Any] | None = None,
        node: str | None = None,
        idempotency_key: str | None = None,
        create: bool | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> AppendResult:
        """Append a batch atomically. Each item is a record's `data` (or a `NewRecord` with
        its own tag/meta/node). With `idempotency_key`, a retry of the same batch is not
        written again: the answer has `deduped=True` and the first append's seqs."""
        return self._run(
            _calls.append(
                topic,
                records,
                tag=tag,
                meta=meta,
                node=node,
                idempotency_key=idempotency_key,
                create=create,
                config=config,
            )
        )

    def diff(
        self,
        topic: str,
        from_seq: int = 0,
        *,
        limit: int | None = None,
        node: str | Sequence[str] | None = None,
        include_tags: bool = False,
        include_meta: bool = True,
        wait_ms: int | None = None,
    ) -> DiffResult:
        """Records with `$seq > from_seq`. `node` skips records written by that node (or
        nodes); `wait_ms` long-polls: when nothing is there yet, the answer waits up to that
        long for an append."""
        return self._run(
            _calls.diff(
                topic,
                from_seq,
                limit=limit,
                node=node,
                include_tags=include_tags,
                include_meta=include_meta,
                wait_ms=wait_ms,
            )
        )

    def follow(
        self,
        topic: str,
        from_seq: int = 0,
        *,
        wait_ms: int = 25_000,
        limit: int | None = None,
        node: str | Sequence[str] | None = None,
        include_tags: bool = False,
        include_meta: bool = True,
        reconnect: bool = True,
        backoff_s: float = 0.5,
        max_backoff_s: float = 10.0,
        stop: Callable[[], bool] | None = None,
    ) -> Iterator[DiffResult]:
        """Long-poll forever from `from_seq`: yields every diff that has records or a
        tombstone. Resume a later run from the last result's `next_from_seq`. A dropped
        connection is retried with backoff (the cursor is the client's, so nothing is lost
        or repeated)."""
        cursor = from_seq
        failures = 0
        while stop is None or not stop():
            try:
                result = self.diff(
                    topic,
                    cursor,
                    limit=limit,
                    node=node,
                    include_tags=include_tags,
                    include_meta=include_meta,
                    wait_ms=wait_ms,
                )
            except ConnectionFailed:
                failures += 1
                if not reconnect:
                    raise
                time.sleep(min(max_backoff_s, backoff_s * 2 ** min(failures - 1, 10)))
                continue
            failures = 0
            cursor = result.next_from_seq
            if result.records or result.tombstone is not None:
                yield result

    def delete_records(
        self, topic: str, *, before_seq: int | None = None, match: str | Sequence[str] | None = None
    ) -> DeleteRecordsResult:
        """Delete records below `before_seq` and/or by tag (`"t"`, or `["tag","Glob","p*"]`)."""
        return self._run(_calls.delete_records(topic, before_seq, match))

    # --- watch ----------------------------------------------------------------------------
    def create_watch(
        self, topics: Mapping[str, int] | Sequence[str], *, tail: bool = False, **options: Any
    ) -> WatchSession:
        return self._run(_calls.create_watch(_calls.watch_body(topics, tail=tail, **options)))

    def watch(
        self,
        topics: Mapping[str, int] | Sequence[str],
        *,
        tail: bool = False,
        node: str | None = None,
        limit: int | None = None,
        max_batch_bytes: int | None = None,
        heartbeat_ms: int | None = None,
        include_meta: bool = True,
        include_tags: bool = False,
        include_data: bool = True,
        wid: str | None = None,
        last_event_id: str | None = None,
        reconnect: bool = True,
        max_retries: int | None = None,
        backoff_s: float = 0.25,
        max_backoff_s: float = 10.0,
    ) -> WatchStream:
        """Watch topics over SSE. `topics` maps names to a `from_seq` (records after it), or
        lists names (from the start, or from the head with `tail=True`). Resume a previous
        stream with its `wid` and `last_event_id` (or just the `last_event_id`: a new session
        starts at its cursors). Dropped connections are reconnected with `Last-Event-ID`."""
        body = _calls.watch_body(
            topics,
            tail=tail,
            node=node,
            limit=limit,
            max_batch_bytes=max_batch_bytes,
            heartbeat_ms=heartbeat_ms,
            include_meta=include_meta,
            include_tags=include_tags,
            include_data=include_data,
        )
        return WatchStream(
            self,
            body,
            wid=wid,
            last_event_id=last_event_id,
            reconnect=reconnect,
            max_retries=max_retries,
            backoff_s=backoff_s,
            max_backoff_s=max_backoff_s,
        )

    # --- queues ---------------------------------------------------------------------------
    def claim(
        self,
        queue: str,
        *,
        max_jobs: int = 1,
        lease_ms: int | None = None,
        node: str | None = None,
    ) -> ClaimResult:
        """Lease up to `max_jobs` jobs to `node` for `lease_ms` (default: the queue's)."""
        return self._run(_calls.claim(queue, self._node(node), max_jobs, lease_ms))

    def ack(
        self,
        queue: str,
        seqs: Sequence[int],
        *,
        lease_ids: Sequence[str] | None = None,
        node: str | None = None,
    ) -> LeaseResult:
        """Finish jobs (they are deleted). Seqs this node does not hold are `skipped`."""
        return self._run(_calls.ack(queue, self._node(node), seqs, lease_ids))

    def nack(
        self,
        queue: str,
        seqs: Sequence[int],
        *,
        delay_ms: int = 0,
        lease_ids: Sequence[str] | None = None,
        node: str | None = None,
    ) -> LeaseResult:
        """Give jobs back; claimable again after `delay_ms`."""
        return self._run(_calls.nack(queue, self._node(node), seqs, lease_ids, delay_ms))

    def extend(
        self,
        queue: str,
        seqs: Sequence[int],
        lease_ms: int,
        *,
        lease_ids: Sequence[str] | None = None,
        node: str | None = None,
    ) -> ExtendResult:
        """Set the leases' deadlines to now + `lease_ms`."""
        return self._run(_calls.extend(queue, self._node(node), seqs, lease_ms, lease_ids))

    def ack_job(self, job: Job, *, node: str | None = None) -> LeaseResult:
        return self.ack(job.topic, [job.seq], lease_ids=[job.lease_id], node=node)

    def nack_job(self, job: Job, *, delay_ms: int = 0, node: str | None = None) -> LeaseResult:
        return self.nack(
            job.topic, [job.seq], delay_ms=delay_ms, lease_ids=[job.lease_id], node=node
        )

    def worker(self, queue: str, handler: Callable[[Job], object], **options: Any) -> Worker:
        """A `Worker` running `handler` for each job of `queue` (see headwater_client.worker)."""
        from headwater_client.worker import Worker

        return Worker(self, queue, handler, **options)


class AsyncClient(_Base):
    """The asyncio flavour of `Client`: the same methods, awaited (`watch` is an async
    iterator). Durable Streams and the worker loop are on the sync `Client`."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        key: str | None = None,
        *,
        node: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(url, key, node, timeout)
        self._http = httpx.AsyncClient(base_url=self.url, timeout=timeout, transport=transport)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _run(self, call: _calls.Call[T]) -> T:
        try:
            response = await self._http.request(call.method, call.path, **self._request_args(call))
        except httpx.TransportError as exc:
            raise ConnectionFailed(f"{call.method} {self.url}{call.path}: {exc}", exc) from exc
        return self._check(call, response)

    async def health(self) -> dict[str, Any]:
        return await self._run(_calls.health())

    async def create_topic(
        self, topic: str, config: Mapping[str, Any] | None = None
    ) -> PutTopicResult:
        return await self._run(_calls.put_topic(topic, config))

    async def create_queue(self, queue: str, **options: Any) -> PutTopicResult:
        return await self._run(_calls.put_topic(queue, _calls.queue_config(**options)))

    async def get_topic(self, topic: str, *, touch: bool = True) -> TopicState:
        return await self._run(_calls.get_topic(topic, touch))

    async def list_topics(self, prefix: str = "", page_size: int = 100) -> list[TopicSummary]:
        out: list[TopicSummary] = []
        cursor: str | None = None
        while True:
            page = await self._run(_calls.list_topics(prefix, page_size, cursor))
            out.extend(page.topics)
            if not page.next_cursor:
                return out
            cursor = page.next_cursor

    async def delete_topic(self, topic: str, *, if_empty: bool = False) -> DeleteTopicResult:
        return await self._run(_calls.delete_topic(topic, if_empty))

    async def append(self, topic: str, records: Sequence[Any], **options: Any) -> AppendResult:
        return await self._run(_calls.append(topic, records, **options))

    async def diff(self, topic: str, from_seq: int = 0, **options: Any) -> DiffResult:
        return await self._run(_calls.diff(topic, from_seq, **options))

    async def delete_records(
        self, topic: str, *, before_seq: int | None = None, match: str | Sequence[str] | None = None
    ) -> DeleteRecordsResult:
        return await self._run(_calls.delete_records(topic, before_seq, match))

    def watch(
        self,
        topics: Mapping[str, int] | Sequence[str],
        *,
        tail: bool = False,
        wid: str | None = None,
        last_event_id: str | None = None,
        reconnect: bool = True,
        max_retries: int | None = None,
        backoff_s: float = 0.25,
        max_backoff_s: float = 10.0,
        **options: Any,
    ) -> AsyncWatchStream:
        body = _calls.watch_body(topics, tail=tail, **options)
        return AsyncWatchStream(
            self,
            body,
            wid=wid,
            last_event_id=last_event_id,
            reconnect=reconnect,
            max_retries=max_retries,
            backoff_s=backoff_s,
            max_backoff_s=max_backoff_s,
        )

    async def claim(
        self, queue: str, *, max_jobs: int = 1, lease_ms: int | None = None, node: str | None = None
    ) -> ClaimResult:
        return await self._run(_calls.claim(queue, self._node(node), max_jobs, lease_ms))

    async def ack(
        self,
        queue: str,
        seqs: Sequence[int],
        *,
        lease_ids: Sequence[str] | None = None,
        node: str | None = None,
    ) -> LeaseResult:
        return await self._run(_calls.ack(queue, self._node(node), seqs, lease_ids))

    async def nack(
        self,
        queue: str,
        seqs: Sequence[int],
        *,
        delay_ms: int = 0,
        lease_ids: Sequence[str] | None = None,
        node: str | None = None,
    ) -> LeaseResult:
        return await self._run(_calls.nack(queue, self._node(node), seqs, lease_ids, delay_ms))

    async def extend(
        self,
        queue: str,
        seqs: Sequence[int],
        lease_ms: int,
        *,
        lease_ids: Sequence[str] | None = None,
        node: str | None = None,
    ) -> ExtendResult:
        return await self._run(_calls.extend(queue, self._node(node), seqs, lease_ms, lease_ids))
