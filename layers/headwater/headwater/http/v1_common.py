"""What the /v1 route modules (v1.py, v1_writes.py, v1_reads.py, v1_search.py, v1_touch.py)
share: the protocol's resolver deadline and long-poll cap, the stream scope check, stream
names and routing keys, the wire parsers' 400, and request-body and query parameter reading
with the protocol's 400/413 answers."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

from starlette.requests import Request

from headwater.access.keys import Principal
from headwater.durable.errors import RequestTimeout
from headwater.durable.state import MAX_NAME_BYTES
from headwater.durable.wire import WireError
from headwater.errors import InvalidRequest, PayloadTooLarge

T = TypeVar("T")

RESOLVER_TIMEOUT_S = 5.0  # protocol §6: every resolver, cooperative
LONG_POLL_CAP_MS = 4_000  # waits are clamped inside the resolver cap and end in 204
MAX_APPEND_BYTES = 6 << 20  # the Lambda request payload limit
MAX_KEY_BYTES = 256  # a routing key (Stream-Key, key=, /pk/<key>)


def allow(principal: Principal, scope: str, name: str) -> None:
    """403 unless the key has `scope` and its allowlist covers stream `name`."""
    principal.require(scope)
    principal.require_name(name)


def bad(message: str) -> InvalidRequest:
    return InvalidRequest(message)


def stream_name(path: str) -> str:
    if not path or path.startswith("/") or path.endswith("/"):
        raise bad("invalid stream name")
    if len(path.encode()) > MAX_NAME_BYTES or any(ord(c) < 32 or ord(c) == 127 for c in path):
        raise bad(f"invalid stream name (at most {MAX_NAME_BYTES} bytes, no control characters)")
    return path


def wire(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except WireError as exc:
        raise bad(str(exc)) from None


async def capped(aw: Awaitable[T], seconds: float = RESOLVER_TIMEOUT_S) -> T:
    try:
        return await asyncio.wait_for(aw, seconds)
    except TimeoutError:
        raise RequestTimeout() from None


def one_param(request: Request, name: str) -> str | None:
    values = request.query_params.getlist(name)
    if len(values) > 1:
        raise bad(f"{name} given more than once")
    return values[0] if values else None


async def read_append_body(request: Request) -> bytes:
    length = request.headers.get("content-length")
    if (
        length is not None
        and length.isascii()
        and length.isdigit()
        and (len(length) > 18 or int(length) > MAX_APPEND_BYTES)
    ):
        raise PayloadTooLarge(f"append body over {MAX_APPEND_BYTES} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_APPEND_BYTES:
            raise PayloadTooLarge(f"append body over {MAX_APPEND_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)
