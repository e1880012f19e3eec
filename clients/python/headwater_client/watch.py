"""Watch streams (spec §7) that survive dropped connections.

A stream is a watch session (`POST /v0/watch`) read over SSE (`GET /v0/watch/:wid`). Every
data-bearing frame carries the composite cursor as its `id`; the stream remembers the last
one it handed out and sends it back as `Last-Event-ID` when it reconnects, so the server
resumes exactly there (§7.3: the session's cursors, rewound to that id). If the session
itself is gone (404, or a `410` error frame once the server has reclaimed it) the stream
creates a new one starting from the same cursors, so nothing is skipped and nothing is
repeated either way (the stream also drops any record at or below the cursor it has
handed out, should a resumed session start a little behind it). A stream that sees no frame
for 2 × heartbeat + 5 s reconnects (the spec's liveness watchdog)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import httpx
from httpx_sse import ServerSentEvent, aconnect_sse, connect_sse

from headwater_client import _calls
from headwater_client.errors import ApiError, ConnectionFailed, NotFound, error_from_response
from headwater_client.models import WatchEvent, WatchSession, decode_cursor_map

if TYPE_CHECKING:
    from headwater_client.client import AsyncClient, Client

__all__ = ["AsyncWatchStream", "WatchStream"]


def encode_cursor_map(cursors: Mapping[str, int]) -> str:
    """A composite cursor as the server spells it (§7.3): base64url of compact JSON."""
    raw = json.dumps(dict(cursors), separators=(",", ":"), ensure_ascii=False).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


TERMINAL_CODES = frozenset({408, 503})  # the server ended the stream: reconnect and resume
SESSION_GONE = 410


class _Resume:
    """What both stream flavours share: the session request, the cursor, the bookkeeping."""

    def __init__(
        self,
        body: dict[str, Any],
        *,
        wid: str | None,
        last_event_id: str | None,
        reconnect: bool,
        max_retries: int | None,
        backoff_s: float,
        max_backoff_s: float,
    ) -> None:
        self.body = body
        self.wid = wid
        self.last_event_id = last_event_id
        self.reconnect = reconnect
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.reconnects = 0  # connections opened after the first
        self.sessions = 0  # sessions created by this stream
        self.failures = 0  # consecutive failed attempts
        self.closed = False
        # What this stream has handed out, per topic (None: no cursor yet, or opaque ids).
        self.positions: dict[str, int] | None = (
            decode_cursor_map(last_event_id) if last_event_id else {}
        )
        hb = int(body.get("heartbeat_ms") or 15_000)
        self.idle_timeout_s = 2 * hb / 1000 + 5

    @property
    def cursors(self) -> dict[str, int] | None:
        """The per-topic cursor (topic -> last seq handed out), when the id is a full map."""
        return decode_cursor_map(self.last_event_id)

    def session_body(self) -> tuple[dict[str, Any], bool]:
        """The body of the next POST /v0/watch and whether it is lenient: a re-creation
        starts every topic at its cursor, and drops topics deleted meanwhile."""
        if self.sessions == 0 and self.last_event_id is None:
            return self.body, False
        topics = dict(self.body["topics"])
        for topic, seq in (self.cursors or {}).items():
            if topic in topics:
                topics[topic] = {"from_seq": seq}
        return {**self.body, "topics": topics}, True

    def created(self, session: WatchSession) -> None:
        self.wid = session.wid
        self.sessions += 1
        # A later re-creation without any cursor must not re-resolve `tail` to a newer head.
        topics = dict(self.body["topics"])
        for topic, start in session.topics.items():
            if topic in topics and "from_seq" in start:
                topics[topic] = {"from_seq": int(start["from_seq"])}
        self.body = {**self.body, "topics": topics}

    def request_headers(self, key_headers: Mapping[str, str]) -> dict[str, str]:
        headers = dict(key_headers)
        if self.last_event_id:
            headers["Last-Event-ID"] = self.last_event_id
        return headers

    def refused(self, response: httpx.Response) -> ApiError:
        """An establishment error. A vanished session is re-created (returns NotFound after
        forgetting the wid); anything else is raised by the caller."""
        err = error_from_response(response)
        if isinstance(err, NotFound) and self.wid is not None and err.code != "topic_not_found":
            self.wid = None
        return err

    def lost_session(self) -> bool:
        """True while re-creating a vanished session is still worth trying."""
        self.failures += 1
        return self.failures <= 5

    def frame(self, sse: ServerSentEvent) -> WatchEvent | str | None:
        """A WatchEvent to hand out, None to drop the frame (a replay of records already
        handed out), or an action: "reconnect" / "recreate"."""
        event = WatchEvent.from_sse(sse.event, sse.data, sse.id or None)
        if event.kind == "error":
            if event.code == SESSION_GONE:
                self.wid = None
                return "recreate"
            if event.code in TERMINAL_CODES or event.data.get("terminal"):
                return "reconnect"
        self.failures = 0
        if not event.id:
            return event
        seen = decode_cursor_map(event.id)
        if seen is None or self.positions is None:  # an opaque checkpoint: take it as it is
            self.positions = seen
            self.last_event_id = event.id
            return event
        topic = event.topic
        if event.kind == "record" and topic is not None and topic in self.positions:
            # A resumed session may start behind what this stream handed out (its cursors are
            # saved a moment after a connection drops): never hand a record out twice.
            fresh = [r for r in event.records if r.seq > self.positions[topic]]
            if not fresh:
                return None
            if len(fresh) < len(event.records):
                event = replace(event, records=fresh)
        merged = dict(self.positions)
        for name, seq in seen.items():
            reset = name == topic and (
                event.kind == "topic-deleted"
                or (event.kind == "tombstone" and event.data.get("reason") == "recreated")
            )
            merged[name] = seq if reset else max(seq, merged.get(name, seq))
        self.positions = merged
        self.last_event_id = encode_cursor_map(merged)
        return event

    def failed(self, exc: BaseException) -> float:
        """Delay before the next attempt, or raise when reconnecting is off or exhausted."""
        self.failures += 1
        if not self.reconnect or (
            self.max_retries is not None and self.failures > self.max_retries
        ):
            if isinstance(exc, ApiError | ConnectionFailed):
                raise exc
            raise ConnectionFailed(f"watch stream failed: {exc}", exc) from exc
        delay: float = self.backoff_s * 2 ** min(self.failures - 1, 10)
        return min(self.max_backoff_s, delay)

    def ended(self) -> float:
        """The stream ended cleanly (the server's max stream duration): reconnect at once."""
        return 0.0


def _interrupt(response: httpx.Response) -> None:
    """Wake a thread blocked reading `response`: closing a socket does not interrupt a read
    another thread is blocked in (it would wait for the next heartbeat), shutting it down
    does."""
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


class WatchStream:
    """An iterator of `WatchEvent`s across reconnects. Use it as a context manager (or call
    `close()`); `wid`, `last_event_id` and `cursors` say where it stands, so a later process
    can resume with `Client.watch(..., wid=..., last_event_id=...)`."""

    def __init__(self, client: Client, body: dict[str, Any], **options: Any) -> None:
        self._client = client
        self._r = _Resume(body, **options)
        self._response: httpx.Response | None = None
        self._lock = threading.Lock()

    @property
    def wid(self) -> str | None:
        return self._r.wid

    @property
    def last_event_id(self) -> str | None:
        return self._r.last_event_id

    @property
    def cursors(self) -> dict[str, int] | None:
        return self._r.cursors

    @property
    def reconnects(self) -> int:
        return self._r.reconnects

    @property
    def sessions(self) -> int:
        return self._r.sessions

    def __enter__(self) -> WatchStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the stream (from any thread): the open connection is closed."""
        self._r.closed = True
        with self._lock:
            response = self._response
        if response is not None:
            _interrupt(response)
            with contextlib.suppress(Exception):
                response.close()

    def __iter__(self) -> Iterator[WatchEvent]:
        r = self._r
        opened = 0
        while not r.closed:
            delay = 0.0
            try:
                if r.wid is None:
                    body, lenient = r.session_body()
                    r.created(self._client._run(_calls.create_watch(body, lenient)))
                url = f"/v0/watch/{r.wid}"
                headers = r.request_headers(self._client._headers)
                timeout = httpx.Timeout(self._client.timeout, read=r.idle_timeout_s)
                with connect_sse(
                    self._client._http, "GET", url, headers=headers, timeout=timeout
                ) as source:
                    response = source.response
                    if response.status_code != 200:
                        response.read()
                        err = r.refused(response)
                        if r.wid is None and r.lost_session():
                            continue  # the session is gone: create it again from the cursor
                        raise err
                    with self._lock:
                        self._response = response
                    if opened:
                        r.reconnects += 1
                    opened += 1
                    for sse in source.iter_sse():
                        out = r.frame(sse)
                        if out is None:
                            continue
                        if isinstance(out, str):
                            break  # reconnect (or re-create the session) and resume
                        yield out
                        if r.closed:
                            return
                    delay = r.ended()
            except (httpx.TransportError, ConnectionFailed) as exc:
                if r.closed:
                    return
                delay = r.failed(exc)
            except ApiError as exc:
                if exc.status < 500 and exc.status != 429:
                    raise
                delay = r.failed(exc)
            finally:
                with self._lock:
                    self._response = None
            if delay and not r.closed:
                time.sleep(delay)


class AsyncWatchStream:
    """The asyncio flavour of `WatchStream` (`async for event in stream`)."""

    def __init__(self, client: AsyncClient, body: dict[str, Any], **options: Any) -> None:
        self._client = client
        self._r = _Resume(body, **options)

    @property
    def wid(self) -> str | None:
        return self._r.wid

    @property
    def last_event_id(self) -> str | None:
        return self._r.last_event_id

    @property
    def cursors(self) -> dict[str, int] | None:
        return self._r.cursors

    @property
    def reconnects(self) -> int:
        return self._r.reconnects

    def close(self) -> None:
        self._r.closed = True

    async def __aenter__(self) -> AsyncWatchStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    async def __aiter__(self) -> AsyncIterator[WatchEvent]:
        r = self._r
        opened = 0
        while not r.closed:
            delay = 0.0
            try:
                if r.wid is None:
                    body, lenient = r.session_body()
                    r.created(await self._client._run(_calls.create_watch(body, lenient)))
                url = f"/v0/watch/{r.wid}"
                headers = r.request_headers(self._client._headers)
                timeout = httpx.Timeout(self._client.timeout, read=r.idle_timeout_s)
                async with aconnect_sse(
                    self._client._http, "GET", url, headers=headers, timeout=timeout
                ) as source:
                    response = source.response
                    if response.status_code != 200:
                        await response.aread()
                        err = r.refused(response)
                        if r.wid is None and r.lost_session():
                            continue
                        raise err
                    if opened:
                        r.reconnects += 1
                    opened += 1
                    async for sse in source.aiter_sse():
                        out = r.frame(sse)
                        if out is None:
                            continue
                        if isinstance(out, str):
                            break
                        yield out
                        if r.closed:
                            return
                    delay = r.ended()
            except (httpx.TransportError, ConnectionFailed) as exc:
                if r.closed:
                    return
                delay = r.failed(exc)
            except ApiError as exc:
                if exc.status < 500 and exc.status != 429:
                    raise
                delay = r.failed(exc)
            if delay and not r.closed:
                await asyncio.sleep(delay)
