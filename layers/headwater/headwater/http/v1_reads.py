"""/v1 reads: GET of a stream's entries (a catch-up page with its caching headers, a
long-poll, or SSE; filter= and key= reads pruned by the stream's index families), and HEAD,
its metadata. The HTTP mapping of DurableStreams' reads, seeks and waits."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from starlette.requests import Request
from starlette.responses import Response

from headwater.durable import schema
from headwater.durable.errors import OffsetGone, StreamNotFound
from headwater.durable.filter import FilterError, Predicate, parse_filter
from headwater.durable.offsets import START, Offset, OffsetError, decode_offset, encode_offset
from headwater.durable.service import FILTER_SCAN_CAP, DurableStreams, SegmentPruner
from headwater.durable.state import StreamState
from headwater.durable.wire import (
    etag_matches,
    is_json_type,
    parse_timeout_ms,
    parse_timestamp,
    slice_etag,
    sse_control_event,
    sse_data_event,
    sse_encoding,
    stream_cursor,
)
from headwater.engine import RangeRead, StoredRecord
from headwater.engine.ports import Head
from headwater.http.common import services
from headwater.http.sse import bare_event_stream
from headwater.http.v1_common import LONG_POLL_CAP_MS, MAX_KEY_BYTES, bad, capped, one_param, wire
from headwater.index.reader import open_index, read_pruner
from headwater.services import Services

LONG_POLL_DEFAULT_MS = 30_000
SSE_MAX_S = 60.0  # an SSE response ends after this; clients reconnect from the last control
SSE_IDLE_PING_S = 15.0
PAGE_RECORDS = 10_000
PAGE_BYTES = 4 << 20  # under the 6 MB buffered Lambda response limit


# --- HEAD ----------------------------------------------------------------------------------
def _stream_headers(head: Head, state: StreamState, tail: int | None = None) -> dict[str, str]:
    t = head.head_seq if tail is None else tail
    headers = {
        "Content-Type": state.content_type,
        "Stream-Next-Offset": encode_offset(head.epoch, t),
    }
    if state.closed:
        headers["Stream-Closed"] = "true"
    return headers


async def metadata(svc: Services, name: str) -> Response:
    """HEAD: the stream's tail, closed flag, content type and expiry."""
    head, state = await svc.streams.lookup(name)
    headers = _stream_headers(head, state)
    headers["Stream-End-Offset"] = headers["Stream-Next-Offset"]
    headers["Cache-Control"] = "no-store"
    if state.ttl_ms:
        headers["Stream-TTL"] = str(state.ttl_ms // 1000)
    if state.expires_text:
        headers["Stream-Expires-At"] = state.expires_text
    return Response(status_code=200, headers=headers)


# --- GET: catch-up, long-poll, SSE ---------------------------------------------------------
@dataclass(slots=True)
class _ReadPlan:
    after: Offset | None = None
    now: bool = False
    live: str | None = None
    timeout_ms: int = LONG_POLL_DEFAULT_MS
    fmt_json: bool = False
    key: str | None = None
    since: int | None = None
    offset_given: bool = False
    filter: str | None = None


@dataclass(frozen=True, slots=True)
class _View:
    """How a read presents entries: promoted to the current schema version, and only those
    matching a filter= predicate (both from the stream's schema registry)."""

    reg: dict[str, Any] | None = None
    promote: Callable[[StoredRecord], bytes] | None = None
    pred: Predicate | None = None
    pruner: SegmentPruner | None = None  # the index families, for a filter= or key= read


def _plan(request: Request, key_from_path: str | None) -> _ReadPlan:
    plan = _ReadPlan()
    offset = one_param(request, "offset")
    live = one_param(request, "live")
    if live is not None:
        if live in ("true", "long-poll"):
            plan.live = "long-poll"
        elif live == "sse":
            plan.live = "sse"
        elif live != "false":
            raise bad("live must be true, long-poll or sse")
    since = one_param(request, "since")
    if since is not None:
        plan.since = wire(parse_timestamp, since, "since")
    plan.offset_given = offset is not None
    if offset is None:
        if plan.live is not None and since is None:
            raise bad("live reads need an offset")
    elif offset == "now":
        plan.now = True
    else:
        try:
            decoded = decode_offset(offset)
        except OffsetError as exc:
            raise bad(str(exc)) from None
        plan.after = None if decoded is START else decoded  # type: ignore[assignment]
    timeout = one_param(request, "timeout")
    if timeout is not None:
        plan.timeout_ms = wire(parse_timeout_ms, timeout)
    fmt = one_param(request, "format")
    if fmt is not None and fmt != "json":
        raise bad("format must be json")
    plan.fmt_json = fmt == "json"
    plan.filter = one_param(request, "filter")
    if plan.filter is not None and plan.live == "sse":
        raise bad("filter= is not supported with live=sse")
    key = one_param(request, "key")
    plan.key = key_from_path if key_from_path is not None else key
    if plan.key is not None and (not plan.key or len(plan.key.encode()) > MAX_KEY_BYTES):
        raise bad(f"key must be 1..{MAX_KEY_BYTES} bytes")
    return plan


async def _start_seq(
    plan: _ReadPlan, head: Head, state: StreamState, streams: DurableStreams
) -> int:
    if plan.now:
        return head.head_seq
    if plan.since is not None and plan.offset_given is False:
        return await streams.seek(head, plan.since)
    if plan.after is None:
        return 0
    off = plan.after
    if state.fork is not None and not off.in_block and state.fork.inherits(off.epoch, off.seq):
        return off.seq  # an offset the fork shares with its source (the seqs are common)
    if off.epoch < head.epoch:
        raise OffsetGone(
            "the offset belongs to an earlier incarnation of this stream (deleted and created"
            " again); read from -1",
            headers={"Stream-Next-Offset": encode_offset(head.epoch, 0)},
        )
    if off.epoch > head.epoch or off.seq > head.head_seq or off.in_block != 0:
        raise bad("offset is beyond the end of the stream")
    return off.seq


def _payload(state: StreamState, rr: RangeRead, view: _View) -> bytes:
    """A JSON stream's entries as one JSON array; a byte stream's, concatenated."""
    if is_json_type(state.content_type):
        promote = view.promote
        datas = (promote(r) for r in rr.records) if promote else (r.data_raw for r in rr.records)
        return b"[" + b",".join(datas) + b"]"
    return b"".join(r.data_raw for r in rr.records)


async def _view(streams: DurableStreams, name: str, state: StreamState, plan: _ReadPlan) -> _View:
    if not state.registry_key and plan.filter is None:
        return _View()
    if plan.filter is not None and not is_json_type(state.content_type):
        raise bad("filter= needs an application/json stream")
    reg = await streams.registry(name, state.registry_key)
    pred = None
    if plan.filter is not None:
        try:
            pred = parse_filter(plan.filter, schema.search_fields(reg))
        except FilterError as exc:
            raise bad(f"filter: {exc}") from None
    return _View(reg, streams.promoter(reg), pred)


async def _fetch(
    streams: DurableStreams, view: _View, head: Head, start: int, key: str | None
) -> tuple[RangeRead, bool]:
    """A page after `start` (filtered, when the read has a filter): (page, scan cap hit)."""
    if view.pred is None and view.pruner is None:
        return await streams.read(head, start, PAGE_RECORDS, PAGE_BYTES, key), False
    return await streams.read_filtered(
        head, start, PAGE_RECORDS, PAGE_BYTES, key, view.pred, view.reg, view.pruner
    )


async def _pruned(svc: Services, head: Head, view: _View, key: str | None) -> _View:
    """The view with the stream's index families for a filter= or key= read, when any are
    built and current (a plain read, or no index: unchanged)."""
    if view.reg is None or (key is None and view.pred is None):
        return view
    index = await open_index(svc.engine, svc.index_catalogue, head, view.reg)
    if index is None:
        return view
    return dataclasses.replace(view, pruner=read_pruner(index, key, view.pred))


async def read(request: Request, svc: Services, name: str, key: str | None) -> Response:
    plan = _plan(request, unquote(key) if key is not None else None)
    streams = svc.streams
    head, state = await capped(streams.lookup(name))
    if plan.fmt_json and not is_json_type(state.content_type):
        raise bad("format=json needs an application/json stream")
    view = await capped(_view(streams, name, state, plan))
    if plan.live != "sse":
        view = await capped(_pruned(svc, head, view, plan.key))
    start = await _start_seq(plan, head, state, streams)
    await streams.touch(head, state)
    cursor = stream_cursor(streams.clock(), one_param(request, "cursor"))
    if plan.live == "sse":
        return _sse(request, streams, head, state, start, plan.key, cursor, view)
    if plan.live == "long-poll":
        return await capped(_long_poll(request, streams, head, state, start, plan, cursor, view))
    rr, cut = await capped(_fetch(streams, view, head, start, plan.key))
    return _page(request, rr.head, state, start, rr, plan, cursor, view, live=False, capped=cut)


def _page(
    request: Request,
    head: Head,
    state: StreamState,
    start: int,
    rr: RangeRead,
    plan: _ReadPlan,
    cursor: str,
    view: _View,
    *,
    live: bool,
    capped: bool = False,
) -> Response:
    next_seq = max(rr.next_seq, start)
    up_to_date = next_seq >= head.head_seq
    closed = state.closed and up_to_date
    headers = {
        "Content-Type": state.content_type,
        "Stream-Next-Offset": encode_offset(head.epoch, next_seq),
        "Stream-End-Offset": encode_offset(head.epoch, head.head_seq),
        "Stream-Cursor": cursor,
    }
    if up_to_date:
        headers["Stream-Up-To-Date"] = "true"
    if closed:
        headers["Stream-Closed"] = "true"
    if capped:
        headers["Stream-Filter-Scan-Limit-Reached"] = "true"
        headers["Stream-Filter-Scan-Limit-Bytes"] = str(FILTER_SCAN_CAP)
        headers["Stream-Filter-Scanned-Bytes"] = str(rr.scanned_bytes)
    if live or plan.now:
        headers["Cache-Control"] = "no-store"
    else:
        etag = slice_etag(
            encode_offset(head.epoch, start) if plan.after is not None else "-1",
            headers["Stream-Next-Offset"],
            plan.key,
            "json" if is_json_type(state.content_type) else "raw",
            plan.filter,
            closed,
        )
        headers["ETag"] = etag
        # A page short of the tail is immutable; a page that reached the tail is not (the
        # same URL returns more once more is appended), so caches revalidate it.
        headers["Cache-Control"] = "no-cache" if up_to_date else "immutable, max-age=31536000"
        if etag_matches(request.headers.get("if-none-match"), etag):
            return Response(status_code=304, headers=headers)
    return Response(_payload(state, rr, view), 200, headers=headers)


async def _long_poll(
    request: Request,
    streams: DurableStreams,
    head: Head,
    state: StreamState,
    start: int,
    plan: _ReadPlan,
    cursor: str,
    view: _View,
) -> Response:
    deadline = time.monotonic() + min(plan.timeout_ms, LONG_POLL_CAP_MS) / 1000
    while True:
        if start < head.head_seq:
            rr, cut = await _fetch(streams, view, head, start, plan.key)
            if rr.records or state.closed or cut:
                return _page(
                    request, rr.head, state, start, rr, plan, cursor, view, live=True, capped=cut
                )
            start = rr.next_seq  # only entries of other keys (or filtered out): wait past them
        if state.closed:
            break
        moved = await streams.wait(head, deadline - time.monotonic())
        if moved is None:
            break
        head, state = moved
    headers = {
        "Stream-Next-Offset": encode_offset(head.epoch, max(start, 0)),
        "Stream-Up-To-Date": "true",
        "Stream-Cursor": cursor,
        "Cache-Control": "no-store",
        "Content-Type": state.content_type,
    }
    if state.closed:
        headers["Stream-Closed"] = "true"
        headers.pop("Stream-Cursor")
    return Response(status_code=204, headers=headers)


def _sse(
    request: Request,
    streams: DurableStreams,
    head: Head,
    state: StreamState,
    start: int,
    key: str | None,
    cursor: str,
    view: _View,
) -> Response:
    encoding = sse_encoding(state.content_type)
    svc = services(request)
    key_id = svc.keys.authenticate(request.headers.get("authorization")).key_id
    slot = svc.limits.acquire_stream(key_id if svc.keys.enabled else None)
    # Pages of half the stream's buffer: the next is read only once the buffer has room
    # for it (http/sse.py Outbox.room), so a client that stops reading holds the buffer.
    page_bytes = max(1, svc.settings.caps.stream_buffer_bytes // 2)

    async def events() -> AsyncGenerator[bytes, None]:
        nonlocal head, state, start
        ends = time.monotonic() + SSE_MAX_S
        first = True
        while time.monotonic() < ends:
            if start < head.head_seq:
                rr = await streams.read(head, start, PAGE_RECORDS, page_bytes, key)
                start = max(rr.next_seq, start)
                if rr.records:
                    # One write: a reader that stops at the first "event: control" it sees
                    # (even one quoted inside the data) still holds the whole data event.
                    data = sse_data_event(_payload(state, rr, view), encoding)
                    del rr  # a blocked stream holds its event's bytes, not the decoded page
                    data += _control(head, state, start, cursor)  # one copy held, not two
                    yield data
                    del data
                    first = False
                    continue
            if start >= head.head_seq and (first or state.closed):
                yield _control(head, state, start, cursor)
                first = False
            if state.closed and start >= head.head_seq:
                return
            try:
                moved = await streams.wait(head, min(SSE_IDLE_PING_S, ends - time.monotonic()))
            except StreamNotFound:
                return  # deleted (or expired) while watched: the stream ends
            if moved is None:
                yield b": ping\n\n"
                continue
            head, state = moved

    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    if encoding == "base64":
        headers["Stream-SSE-Data-Encoding"] = "base64"
    # Bounded buffer, write deadline and a stream slot, as every SSE surface (http/sse.py).
    return bare_event_stream(events(), slot, topics=[], caps=svc.settings.caps, headers=headers)


def _control(head: Head, state: StreamState, next_seq: int, cursor: str) -> bytes:
    up_to_date = next_seq >= head.head_seq
    fields: dict[str, object] = {"streamNextOffset": encode_offset(head.epoch, next_seq)}
    if state.closed and up_to_date:
        fields["streamClosed"] = True
    else:
        fields["streamCursor"] = cursor
    if up_to_date:
        fields["upToDate"] = True
    return sse_control_event(fields)
