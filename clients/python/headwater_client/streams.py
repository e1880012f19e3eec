"""The /v1 Durable Streams surface of a Headwater server (docs/durable-streams.md): create,
append, read (catch-up, long-poll, SSE), search. Offsets are opaque strings: `-1` is the
start of the stream, `now` its current tail; resume from a chunk's `next_offset`."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote

import httpx
from httpx_sse import connect_sse

from headwater_client.errors import ConnectionFailed, error_from_response
from headwater_client.models import SearchResult, StreamAppendResult, StreamChunk, StreamInfo

if TYPE_CHECKING:
    from headwater_client.client import Client

__all__ = ["Streams"]

JSON_TYPE = "application/json"
LONG_POLL_S = 25
Live = Literal["long-poll", "sse"]


def stream_path(name: str, suffix: str = "") -> str:
    return f"/v1/stream/{quote(name, safe='/')}{suffix}"


def _is_json(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() == JSON_TYPE


def _flag(response: httpx.Response, name: str) -> bool:
    value: str = response.headers.get(name, "")
    return value.lower() == "true"


class Streams:
    """`client.streams`: Durable Streams calls with the client's url, key and timeouts."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def _send(
        self,
        method: str,
        path: str,
        *,
        headers: dict[str, str] | None = None,
        content: bytes | None = None,
        params: dict[str, str] | None = None,
        timeout: float | None = None,
        answers: frozenset[int] = frozenset(),
    ) -> httpx.Response:
        c = self._client
        try:
            response = c._http.request(
                method,
                path,
                headers={**c._headers, **(headers or {})},
                content=content,
                params=params,
                timeout=httpx.Timeout(timeout) if timeout is not None else httpx.USE_CLIENT_DEFAULT,
            )
        except httpx.TransportError as exc:
            raise ConnectionFailed(f"{method} {c.url}{path}: {exc}", exc) from exc
        if response.status_code >= 400 and response.status_code not in answers:
            raise error_from_response(response)
        return response

    def create(
        self,
        name: str,
        *,
        content_type: str = JSON_TYPE,
        ttl_s: int | None = None,
        data: bytes | None = None,
    ) -> StreamAppendResult:
        """Create a stream (200 when it exists with the same configuration)."""
        headers = {"Content-Type": content_type}
        if ttl_s is not None:
            headers["Stream-TTL"] = str(ttl_s)
        r = self._send("PUT", stream_path(name), headers=headers, content=data)
        return StreamAppendResult(
            name,
            r.headers.get("stream-next-offset", ""),
            _flag(r, "stream-closed"),
            created=r.status_code == 201,
        )

    def append(
        self,
        name: str,
        data: bytes | str,
        *,
        content_type: str = "application/octet-stream",
        key: str | None = None,
        stream_seq: str | None = None,
        close: bool = False,
    ) -> StreamAppendResult:
        """Append raw bytes (a byte stream) or text. For JSON streams see `append_json`."""
        body = data.encode() if isinstance(data, str) else data
        headers = {"Content-Type": content_type}
        if key is not None:
            headers["Stream-Key"] = key
        if stream_seq is not None:
            headers["Stream-Seq"] = stream_seq
        if close:
            headers["Stream-Closed"] = "true"
        r = self._send("POST", stream_path(name), headers=headers, content=body)
        return StreamAppendResult(
            name, r.headers.get("stream-next-offset", ""), _flag(r, "stream-closed")
        )

    def append_json(
        self, name: str, items: Sequence[Any], *, key: str | None = None
    ) -> StreamAppendResult:
        """Append each item of `items` as one entry of a JSON stream."""
        if isinstance(items, str | bytes) or not items:
            raise ValueError("items must be a non-empty sequence of JSON values")
        body = json.dumps(list(items), separators=(",", ":")).encode()
        return self.append(name, body, content_type=JSON_TYPE, key=key)

    def head(self, name: str) -> StreamInfo:
        r = self._send("HEAD", stream_path(name))
        return StreamInfo(
            name,
            r.headers.get("content-type", ""),
            r.headers.get("stream-next-offset", ""),
            _flag(r, "stream-closed"),
        )

    def delete(self, name: str) -> None:
        self._send("DELETE", stream_path(name))

    def read(
        self,
        name: str,
        offset: str = "-1",
        *,
        live: Literal["long-poll"] | None = None,
        timeout_s: int = LONG_POLL_S,
        cursor: str | None = None,
        key: str | None = None,
        filter: str | None = None,
    ) -> StreamChunk:
        """The entries after `offset` (one page). With `live="long-poll"` an up-to-date
        read waits up to `timeout_s` for an append (an empty chunk when none came)."""
        params = {"offset": offset}
        if live is not None:
            params["live"] = live
            params["timeout"] = f"{timeout_s}s"
        if cursor:
            params["cursor"] = cursor
        if key is not None:
            params["key"] = key
        if filter is not None:
            params["filter"] = filter
        wait = self._client.timeout + (timeout_s if live else 0)
        r = self._send("GET", stream_path(name), params=params, timeout=wait)
        content_type = r.headers.get("content-type", "")
        items: list[Any] | None = None
        if _is_json(content_type):
            parsed = json.loads(r.content) if r.content else []
            items = parsed if isinstance(parsed, list) else [parsed]
        return StreamChunk(
            name,
            r.content,
            items,
            r.headers.get("stream-next-offset", offset),
            r.status_code == 204 or _flag(r, "stream-up-to-date"),
            _flag(r, "stream-closed"),
            r.headers.get("stream-cursor"),
            content_type,
        )

    def follow(
        self,
        name: str,
        offset: str = "-1",
        *,
        live: Live = "long-poll",
        timeout_s: int = LONG_POLL_S,
        reconnect: bool = True,
        backoff_s: float = 0.5,
    ) -> Iterator[StreamChunk]:
        """Catch up from `offset`, then follow live, yielding non-empty chunks until the
        stream is closed. A dropped connection resumes from the last chunk's offset."""
        cursor: str | None = None
        failures = 0
        while True:
            try:
                if live == "sse":
                    for chunk in self._sse(name, offset, cursor):
                        offset, cursor = chunk.next_offset, chunk.cursor or cursor
                        failures = 0
                        if chunk.data or chunk.items:
                            yield chunk
                        if chunk.closed:
                            return
                    continue  # the server ends an SSE response after a while: reconnect
                chunk = self.read(
                    name, offset, live="long-poll", timeout_s=timeout_s, cursor=cursor
                )
            except (ConnectionFailed, httpx.TransportError):
                failures += 1
                if not reconnect:
                    raise
                time.sleep(min(10.0, backoff_s * 2 ** min(failures - 1, 10)))
                continue
            failures = 0
            offset, cursor = chunk.next_offset, chunk.cursor or cursor
            if chunk.data:
                yield chunk
            if chunk.closed:
                return

    def _sse(self, name: str, offset: str, cursor: str | None) -> Iterator[StreamChunk]:
        c = self._client
        params = {"offset": offset, "live": "sse"}
        if cursor:
            params["cursor"] = cursor
        timeout = httpx.Timeout(c.timeout, read=60.0)
        with connect_sse(
            c._http,
            "GET",
            stream_path(name),
            params=params,
            headers=dict(c._headers),
            timeout=timeout,
        ) as source:
            response = source.response
            if response.status_code != 200:
                response.read()
                raise error_from_response(response)
            base64_data = response.headers.get("stream-sse-data-encoding", "") == "base64"
            stream_type = self.head(name).content_type
            pending: list[bytes] = []
            for sse in source.iter_sse():
                if sse.event == "data":
                    pending.append(base64.b64decode(sse.data) if base64_data else sse.data.encode())
                elif sse.event == "control":
                    ctl = json.loads(sse.data)
                    items: list[Any] | None = None
                    if _is_json(stream_type):
                        items = []
                        for raw in pending:  # each data event is one JSON array of entries
                            parsed = json.loads(raw)
                            items.extend(parsed if isinstance(parsed, list) else [parsed])
                        data = json.dumps(items, separators=(",", ":")).encode() if items else b""
                    else:
                        data = b"".join(pending)
                    pending = []
                    yield StreamChunk(
                        name,
                        data,
                        items,
                        str(ctl.get("streamNextOffset", offset)),
                        bool(ctl.get("upToDate")),
                        bool(ctl.get("streamClosed")),
                        ctl.get("streamCursor"),
                        stream_type,
                    )

    def search(
        self,
        name: str,
        q: str,
        *,
        size: int | None = None,
        sort: Sequence[str] | None = None,
        search_after: Sequence[Any] | None = None,
        timeout_ms: int | None = None,
    ) -> SearchResult:
        """`_search` on a JSON stream with a search schema (e.g. the evlog profile). A search
        that ran out of time answers its partial result (`timed_out`, relation "gte"); so does
        every page but the last."""
        body: dict[str, Any] = {"q": q}
        if size is not None:
            body["size"] = size
        if sort is not None:
            body["sort"] = list(sort)
        if search_after is not None:
            body["search_after"] = list(search_after)
        if timeout_ms is not None:
            body["timeout_ms"] = timeout_ms
        r = self._send(
            "POST",
            stream_path(name, "/_search"),
            headers={"Content-Type": JSON_TYPE},
            content=json.dumps(body).encode(),
            answers=frozenset({408}),
        )
        return SearchResult.from_json(r.json())
