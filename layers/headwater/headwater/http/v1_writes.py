"""/v1 writes: PUT creates a stream (or forks one) with its first entries, POST appends to it
(one entry, or one per element of a JSON array) or closes it. The HTTP mapping of
DurableStreams.create and append: the headers, the body into entries, the append deadline
(protocol §7.5) and the written headers of the answer."""

from __future__ import annotations

import asyncio
import re
from urllib.parse import quote, unquote, urlsplit

from starlette.requests import Request
from starlette.responses import Response

from headwater import jsoncodec
from headwater.access.keys import Principal
from headwater.durable.errors import AppendTimeout
from headwater.durable.offsets import START, Offset, OffsetError, StartOfStream, decode_offset
from headwater.durable.service import Entry, ForkRequest, StreamConfig, Written
from headwater.durable.state import state_of, topic_of
from headwater.durable.wire import (
    is_json_type,
    parse_expires_at,
    parse_producer,
    parse_timestamp,
    parse_ttl,
)
from headwater.http.v1_common import MAX_KEY_BYTES, allow, bad, read_append_body, stream_name, wire
from headwater.services import Services

PREFIX = "/v1/stream/"
APPEND_TIMEOUT_S = 3.0  # protocol §7.5
DEFAULT_CONTENT_TYPE = "application/octet-stream"
# The reference server's offset spelling, which the conformance suite uses as a fork point:
# all zeros is the start of any stream; nothing else of that form is an offset here.
FORK_ZERO_OFFSET = re.compile(r"[0-9]{16}_[0-9]{16}")
SUB_OFFSET = re.compile(r"0|[1-9][0-9]{0,15}")


def _location(request: Request, name: str) -> str:
    base = str(request.base_url).rstrip("/")
    root = request.scope.get("root_path", "")
    return f"{base}{root}{PREFIX}{quote(name, safe='/')}"


def _written_headers(w: Written) -> dict[str, str]:
    headers = {"Stream-Next-Offset": w.next_offset}
    if w.state.closed:
        headers["Stream-Closed"] = "true"
    if w.producer is not None:
        headers["Producer-Epoch"] = str(w.producer[0])
        headers["Producer-Seq"] = str(w.producer[1])
    return headers


# --- bodies --------------------------------------------------------------------------------
def _entries(
    body: bytes, content_type: str, key: str | None, *, allow_empty_array: bool
) -> list[Entry]:
    """One entry per element of a JSON array body (one level flattened; a non-array JSON body
    is one entry), or the whole body as one entry."""
    if not body:
        return []
    if not is_json_type(content_type):
        return [Entry(body, key)]
    try:
        value = jsoncodec.loads(body)
    except ValueError:
        raise bad("body is not valid JSON") from None
    items = value if isinstance(value, list) else [value]
    if not items and not allow_empty_array:
        raise bad("a JSON append needs at least one value (got [])")
    return [Entry(jsoncodec.dumps(v), key) for v in items]


def _key_header(request: Request) -> str | None:
    key = request.headers.get("stream-key")
    if key is not None and (not key or len(key.encode()) > MAX_KEY_BYTES):
        raise bad(f"Stream-Key must be 1..{MAX_KEY_BYTES} bytes")
    return key


def _ts_hint(request: Request) -> int | None:
    raw = request.headers.get("stream-timestamp")
    return None if raw is None else wire(parse_timestamp, raw, "Stream-Timestamp")


def _closed_flag(request: Request) -> bool:
    raw = request.headers.get("stream-closed")
    if raw is None:
        return False
    if raw.strip().lower() not in ("true", "false"):
        raise bad("Stream-Closed must be true or false")
    return raw.strip().lower() == "true"


async def create(request: Request, svc: Services, principal: Principal, name: str) -> Response:
    h = request.headers
    ttl_raw, exp_raw = h.get("stream-ttl"), h.get("stream-expires-at")
    if ttl_raw is not None and exp_raw is not None:
        raise bad("give at most one of Stream-TTL and Stream-Expires-At")
    ttl_ms = wire(parse_ttl, ttl_raw) if ttl_raw is not None else 0
    exp_ms = wire(parse_expires_at, exp_raw) if exp_raw is not None else 0
    fork = _fork_request(request, ttl_raw is not None or exp_raw is not None)
    if fork is not None:
        # A fork serves its source's entries to whoever may read the fork: creating one is
        # reading the source (before the source is looked at, or anything is created).
        allow(principal, "read", fork.src)
    content_type = h.get("content-type") or DEFAULT_CONTENT_TYPE
    body = await read_append_body(request)
    if fork is not None and not fork.content_type_given and body:
        # The body is read as the type the fork inherits.
        src = state_of(await svc.streams.engine.head_of(topic_of(fork.src)))
        content_type = src.content_type if src is not None else content_type
    cfg = StreamConfig(content_type.strip(), ttl_ms, exp_ms, exp_raw or "")
    entries = _entries(body, content_type, _key_header(request), allow_empty_array=True)
    w = await svc.streams.create(
        name,
        cfg,
        entries,
        close=_closed_flag(request),
        ts_hint=_ts_hint(request),
        fork=fork,
    )
    headers = _written_headers(w)
    headers["Content-Type"] = w.state.content_type
    if w.created:
        headers["Location"] = _location(request, name)
    return Response(status_code=201 if w.created else 200, headers=headers)


def _fork_request(request: Request, expiry_given: bool) -> ForkRequest | None:
    """Stream-Forked-From (a /v1/stream/ path or URL), Stream-Fork-Offset (default: the
    source's tail) and Stream-Fork-Sub-Offset of a PUT; None when it is not a fork."""
    h = request.headers
    src_raw = h.get("stream-forked-from")
    off_raw = h.get("stream-fork-offset")
    sub_raw = h.get("stream-fork-sub-offset")
    if src_raw is None:
        if off_raw is not None or sub_raw is not None:
            raise bad("Stream-Fork-Offset and Stream-Fork-Sub-Offset need Stream-Forked-From")
        return None
    path = urlsplit(src_raw.strip()).path if "://" in src_raw else src_raw.strip()
    if not path.startswith(PREFIX):
        raise bad(f"Stream-Forked-From must be a {PREFIX}<name> path")
    src = stream_name(unquote(path[len(PREFIX) :]))
    offset: Offset | StartOfStream | None = None
    if off_raw is not None:
        if FORK_ZERO_OFFSET.fullmatch(off_raw):
            if off_raw.strip("0_"):
                raise bad("Stream-Fork-Offset is not an offset of this server")
            offset = START
        else:
            try:
                offset = decode_offset(off_raw)
            except OffsetError as exc:
                raise bad(f"Stream-Fork-Offset: {exc}") from None
    sub = 0
    if sub_raw is not None:
        if not SUB_OFFSET.fullmatch(sub_raw):
            raise bad("Stream-Fork-Sub-Offset must be a non-negative integer")
        sub = int(sub_raw)
    return ForkRequest(
        src,
        offset,
        sub,
        content_type_given=bool(h.get("content-type")),
        expiry_given=expiry_given,
    )


async def append(request: Request, svc: Services, name: str) -> Response:
    h = request.headers
    producer = wire(parse_producer, h)
    close = _closed_flag(request)
    stream_seq = h.get("stream-seq")
    body = await read_append_body(request)
    content_type = h.get("content-type")
    if not body and not close:
        raise bad("empty append body (send Stream-Closed: true to close the stream)")
    if body and not content_type:
        raise bad("an append needs a Content-Type")
    entries = (
        _entries(body, content_type or "", _key_header(request), allow_empty_array=False)
        if body
        else []
    )
    op = svc.streams.append(
        name,
        entries,
        content_type=content_type if body else None,
        stream_seq=stream_seq,
        producer=producer,
        close=close,
        ts_hint=_ts_hint(request),
    )
    task = asyncio.ensure_future(op)
    try:
        w = await asyncio.wait_for(asyncio.shield(task), APPEND_TIMEOUT_S)
    except TimeoutError:
        raise AppendTimeout() from None  # the append may still complete (reported as unknown)
    # A new write by an idempotent producer answers 200 with the producer echo; a plain
    # append, a duplicate and a close-only write answer 204.
    status = 200 if producer is not None and w.appended else 204
    return Response(status_code=status, headers=_written_headers(w))
