"""The Python HTTP floor of bench_durable: the benchmark's Durable Streams workloads served
from memory by a bare ASGI app under the same uvicorn stack Headwater runs on (httptools,
uvloop), with no framework, middleware, auth, engine or storage.

Headwater's round trip is compared with the storage floor (the DynamoDB calls alone); this
measures the other part a Python server cannot avoid, the HTTP exchange itself, for the same
client. What Headwater spends above the sum of the two floors is its own (routing,
middleware, auth, the engine, the hand-off to the storage thread).

Not a Durable Streams server: it answers only what the workloads send (PUT, POST, GET with
`offset` and `live=long-poll`, HEAD, DELETE on /v1/stream/<name>), with integer offsets.

    python -m bench.ds_bare_server   ->  prints "DS_REFERENCE_SERVER_READY <url>" when serving
"""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import uvicorn

READY = "DS_REFERENCE_SERVER_READY"  # the reference launcher's line (bench_durable reads it)
PREFIX = "/v1/stream/"
PAGE_BYTES = 1 << 20  # a catch-up GET returns at most about this much
LONG_POLL_S = 30.0

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class Stream:
    __slots__ = ("content_type", "is_json", "messages", "waiters")

    def __init__(self, content_type: str) -> None:
        self.content_type = content_type
        self.is_json = content_type.split(";")[0].strip().lower() == "application/json"
        self.messages: list[bytes] = []
        self.waiters: list[asyncio.Future[None]] = []

    def wake(self) -> None:
        for fut in self.waiters:
            if not fut.done():
                fut.set_result(None)
        self.waiters.clear()

    def page(self, start: int) -> tuple[bytes, int]:
        """The messages from `start` (at most ~PAGE_BYTES), as the body, and the next offset."""
        out: list[bytes] = []
        size, end = 0, start
        while end < len(self.messages) and (not out or size < PAGE_BYTES):
            out.append(self.messages[end])
            size += len(self.messages[end])
            end += 1
        body = b"[" + b",".join(out) + b"]" if self.is_json else b"".join(out)
        return body, end


STREAMS: dict[str, Stream] = {}


async def _respond(
    send: Send, status: int, headers: dict[str, str] | None = None, body: bytes = b""
) -> None:
    raw = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    raw.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


async def _body(receive: Receive) -> bytes:
    chunks = []
    while True:
        msg = await receive()
        chunks.append(msg.get("body", b""))
        if not msg.get("more_body"):
            return b"".join(chunks)


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http" or not scope["path"].startswith(PREFIX):
        await _respond(send, 404)
        return
    name = scope["path"][len(PREFIX) :]
    method = scope["method"]
    body = await _body(receive)
    stream = STREAMS.get(name)
    if method == "PUT":
        if stream is None:
            ct = dict(scope["headers"]).get(b"content-type", b"application/octet-stream")
            stream = STREAMS[name] = Stream(ct.decode())
            status = 201
        else:
            status = 200
        await _respond(send, status, {"Stream-Next-Offset": str(len(stream.messages))})
        return
    if stream is None:
        await _respond(send, 404)
        return
    if method == "POST":
        stream.messages.append(body)
        stream.wake()
        await _respond(send, 204, {"Stream-Next-Offset": str(len(stream.messages))})
        return
    if method == "DELETE":
        del STREAMS[name]
        stream.wake()
        await _respond(send, 204)
        return
    tail = {"Stream-Next-Offset": str(len(stream.messages)), "Content-Type": stream.content_type}
    if method == "HEAD":
        await _respond(send, 200, tail)
        return
    query = dict(
        part.split("=", 1) for part in scope["query_string"].decode().split("&") if "=" in part
    )
    offset = query.get("offset", "-1")
    start = 0 if offset == "-1" else int(offset)
    if start >= len(stream.messages) and query.get("live") == "long-poll":
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        stream.waiters.append(fut)
        try:
            await asyncio.wait_for(fut, LONG_POLL_S)
        except TimeoutError:
            await _respond(send, 204, {"Stream-Next-Offset": str(start)})
            return
    page, end = stream.page(start)
    headers = {"Stream-Next-Offset": str(end), "Content-Type": stream.content_type}
    if end >= len(stream.messages):
        headers["Stream-Up-To-Date"] = "true"
    await _respond(send, 200, headers, page)


def main() -> int:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)  # before READY: the benchmark connects as soon as it reads the line
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, http="httptools", log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    print(f"{READY} http://127.0.0.1:{port}", flush=True)
    server.run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
