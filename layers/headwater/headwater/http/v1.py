"""/v1: the Durable Streams protocol (docs/specs/durable-streams-protocol.txt) over the
log engine. Stream logic lives in headwater.durable; this module is the HTTP mapping: header
and query parsing, offsets, caching headers, long-poll, SSE, timeouts."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote, unquote, urlsplit

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from headwater import jsoncodec
from headwater.access.keys import Principal
from headwater.durable import profiles, schema
from headwater.durable.errors import (
    AppendTimeout,
    OffsetGone,
    StreamNotFound,
)
from headwater.durable.filter import FilterError, Predicate, parse_filter
from headwater.durable.offsets import (
    START,
    Offset,
    OffsetError,
    StartOfStream,
    decode_offset,
    encode_offset,
)
from headwater.durable.service import (
    FILTER_SCAN_CAP,
    DurableStreams,
    Entry,
    ForkRequest,
    SegmentPruner,
    StreamConfig,
    Written,
    descriptor,
)
from headwater.durable.state import MAX_NAME_BYTES, StreamState, state_of, topic_of
from headwater.durable.wire import (
    WireError,
    etag_matches,
    is_json_type,
    parse_expires_at,
    parse_producer,
    parse_timeout_ms,
    parse_timestamp,
    parse_ttl,
    slice_etag,
    sse_control_event,
    sse_data_event,
    sse_encoding,
    stream_cursor,
)
from headwater.engine import RangeRead, StoredRecord
from headwater.engine.ports import Head
from headwater.errors import HeadwaterError
from headwater.http.common import authorize, services
from headwater.http.lean_route import LeanRoute
from headwater.http.openapi_decl import doc, empty, header, model, query
from headwater.http.sse import bare_event_stream
from headwater.http.v1_common import (
    LONG_POLL_CAP_MS,
    allow,
    bad,
    capped,
    one_param,
    read_append_body,
)
from headwater.index.reader import open_index, read_pruner
from headwater.services import Services

router = APIRouter(route_class=LeanRoute)

T = TypeVar("T")

PREFIX = "/v1/stream/"
APPEND_TIMEOUT_S = 3.0  # protocol §7.5
LONG_POLL_DEFAULT_MS = 30_000
SSE_MAX_S = 60.0  # an SSE response ends after this; clients reconnect from the last control
SSE_IDLE_PING_S = 15.0
PAGE_RECORDS = 10_000
PAGE_BYTES = 4 << 20  # under the 6 MB buffered Lambda response limit
MAX_KEY_BYTES = 256
DEFAULT_CONTENT_TYPE = "application/octet-stream"
# The reference server's offset spelling, which the conformance suite uses as a fork point:
# all zeros is the start of any stream; nothing else of that form is an offset here.
FORK_ZERO_OFFSET = re.compile(r"[0-9]{16}_[0-9]{16}")
SUB_OFFSET = re.compile(r"0|[1-9][0-9]{0,15}")
SUBRESOURCES = (
    "_schema",
    "_profile",
    "_search",
    "_aggregate",
    "_routing_keys",
    "_index_status",
    "_details",
)


def _stream_name(path: str) -> str:
    if not path or path.startswith("/") or path.endswith("/"):
        raise bad("invalid stream name")
    if len(path.encode()) > MAX_NAME_BYTES or any(ord(c) < 32 or ord(c) == 127 for c in path):
        raise bad(f"invalid stream name (at most {MAX_NAME_BYTES} bytes, no control characters)")
    return path


def _split(path: str) -> tuple[str, str | None, str | None]:
    """(stream name, subresource, routing key) of the part of the path after /v1/stream/."""
    for route in ("touch/meta", "touch/wait", "touch/templates/activate"):
        if path.endswith("/" + route):
            return _stream_name(path[: -len(route) - 1]), route, None
    if "/pk/" in path:
        name, _, key = path.rpartition("/pk/")
        return _stream_name(name), None, key
    head, _, last = path.rpartition("/")
    if head and last in SUBRESOURCES:
        return _stream_name(head), last, None
    return _stream_name(path), None, None


def _wire(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except WireError as exc:
        raise bad(str(exc)) from None


def _location(request: Request, name: str) -> str:
    base = str(request.base_url).rstrip("/")
    root = request.scope.get("root_path", "")
    return f"{base}{root}{PREFIX}{quote(name, safe='/')}"


def _stream_headers(head: Head, state: StreamState, tail: int | None = None) -> dict[str, str]:
    t = head.head_seq if tail is None else tail
    headers = {
        "Content-Type": state.content_type,
        "Stream-Next-Offset": encode_offset(head.epoch, t),
    }
    if state.closed:
        headers["Stream-Closed"] = "true"
    return headers


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
    return None if raw is None else _wire(parse_timestamp, raw, "Stream-Timestamp")


def _closed_flag(request: Request) -> bool:
    raw = request.headers.get("stream-closed")
    if raw is None:
        return False
    if raw.strip().lower() not in ("true", "false"):
        raise bad("Stream-Closed must be true or false")
    return raw.strip().lower() == "true"


# --- documentation (/openapi.json; api_docs applies STREAM_DOCS per method of the one route) ---
ERRORS = (400, 401, 403, 408, 429, 503)  # every /v1 route (408: the resolver deadline)
STREAM_ERRORS = (*ERRORS, 404, 405, 409, 410, 413)
NEXT = {"Stream-Next-Offset": "The offset after the last entry", "Stream-Closed": "true"}
ANY_BODY: dict[str, Any] = {"*/*": {"schema": {}}}
STREAM_DOCS: dict[str, dict[str, Any]] = {
    "PUT": doc(
        "v1",
        "Create a stream (or fork one)",
        request={"required": False, "content": ANY_BODY},
        params=[
            header("Stream-TTL", {"type": "string"}, "Seconds to keep it"),
            header("Stream-Expires-At", {"type": "string"}, "RFC 3339 expiry"),
            header("Stream-Forked-From", {"type": "string"}, "/v1/stream/<source> to fork"),
            header("Stream-Fork-Offset", {"type": "string"}, "Fork point (default: the tail)"),
            header("Stream-Closed", {"type": "string"}, "true: create it closed"),
        ],
        ok={
            200: empty("Exists with the same configuration", NEXT),
            201: empty("Created", {**NEXT, "Location": "The stream's URL"}),
        },
        errors=STREAM_ERRORS,
    ),
    "POST": doc(
        "v1",
        "Append (one entry, or one per element of a JSON array)",
        request={"required": False, "content": ANY_BODY},
        params=[
            header("Stream-Closed", {"type": "string"}, "true: close the stream (body optional)"),
            header("Stream-Seq", {"type": "string"}, "Writer sequence (must increase)"),
            header("Producer-Id", {"type": "string"}, "Idempotent producer"),
            header("Producer-Epoch", {"type": "string"}, "Idempotent producer epoch"),
            header("Producer-Seq", {"type": "string"}, "Idempotent producer sequence"),
            header("Stream-Key", {"type": "string"}, "Routing key of the entries"),
        ],
        ok={
            200: empty("Appended by an idempotent producer", NEXT),
            204: empty("Appended, a duplicate, or closed", NEXT),
        },
        errors=STREAM_ERRORS,
    ),
    "GET": doc(
        "v1",
        "Read entries (catch-up, long-poll or SSE), or a JSON subresource",
        description="`{path}` is the stream name, optionally followed by `/pk/<key>` or a "
        "subresource: `_schema`, `_profile` (GET and POST), `_search` (GET and POST), "
        "`_aggregate` (POST), `_routing_keys`, `_index_status`, `_details`, and "
        "`touch/meta`, `touch/wait`, `touch/templates/activate`.",
        params=[
            query("offset", {"type": "string"}, "-1 (start), now, or an offset"),
            query("live", {"enum": ["false", "true", "long-poll", "sse"]}, "Wait for entries"),
            query("cursor", {"type": "string"}, "Stream-Cursor of the previous read"),
            query("timeout", {"type": "string"}, "Long-poll timeout"),
            query("since", {"type": "string"}, "Start at this timestamp"),
            query("format", {"enum": ["json"]}, "JSON array of entries"),
            query("filter", {"type": "string"}, "A predicate over JSON entries"),
            query("key", {"type": "string"}, "Only entries with this routing key"),
            header("If-None-Match", {"type": "string"}, "A previous ETag"),
        ],
        ok={
            200: {
                "description": "Entries in the stream's content type (JSON arrays for JSON "
                "streams), an event stream for live=sse, or a subresource's JSON",
                "content": ANY_BODY,
                "headers": {
                    h: {"schema": {"type": "string"}}
                    for h in ("Stream-Next-Offset", "Stream-Cursor", "Stream-Up-To-Date", "ETag")
                },
            },
            204: empty("Long-poll timed out with nothing new", NEXT),
            304: empty("Not modified (If-None-Match)"),
        },
        errors=STREAM_ERRORS,
    ),
    "HEAD": doc(
        "v1",
        "Stream metadata",
        ok={200: empty("The stream exists", {**NEXT, "Stream-End-Offset": "The tail"})},
        errors=STREAM_ERRORS,
    ),
    "DELETE": doc("v1", "Delete a stream", ok={204: empty("Deleted")}, errors=STREAM_ERRORS),
}


# --- routes --------------------------------------------------------------------------------
# Matched in the order declared: the stream route, which carries nearly every request, first
# (no path matches two of them).
@router.api_route(
    "/v1/stream/{path:path}",
    methods=["PUT", "POST", "GET", "HEAD", "DELETE"],
    summary="A stream",
    tags=["v1 durable streams"],
)
async def stream_resource(request: Request, path: str) -> Response:
    svc = services(request)
    if svc.shutting_down:
        raise HeadwaterError(
            "server is shutting down",
            status=503,
            code="shutting_down",
            headers={"Retry-After": "5"},
        )
    # Credentials before anything about the path: without a valid key every request is 401,
    # whether or not the stream or the subresource exists.
    principal = svc.keys.authenticate(request.headers.get("authorization"))
    name, sub, key = _split(path)
    method = request.method
    if sub is not None:
        if sub == "_profile":
            return await _profile(request, svc, principal, name)
        if sub == "_schema":
            return await _schema(request, svc, principal, name)
        if sub.startswith("touch/"):
            from headwater.http import v1_touch  # it imports this module's helpers

            return await v1_touch.route(request, svc, principal, name, sub)
        from headwater.http import v1_search  # it imports this module's helpers

        return await v1_search.route(request, svc, principal, name, sub)
    if method == "PUT":
        allow(principal, "write", name)
        return await capped(_create(request, svc, principal, name))
    if method == "POST":
        allow(principal, "write", name)
        return await capped(_append(request, svc, name))
    if method == "DELETE":
        allow(principal, "delete", name)
        await capped(svc.streams.delete(name))
        return Response(status_code=204)
    allow(principal, "read", name)
    if method == "HEAD":
        return await capped(_head(svc, name))
    return await _read(request, svc, name, key)


@router.get(
    "/v1/streams",
    **doc(
        "v1",
        "List streams",
        params=[
            query("limit", {"type": "integer", "minimum": 1, "maximum": 10000}, "Default 1000"),
            query("after", {"type": "string"}, "Stream-List-Next-After of the previous page"),
        ],
        ok={
            200: model("StreamList", headers={"Stream-List-Next-After": "Present when more exist"})
        },
        errors=ERRORS,
    ),
)
async def list_streams(request: Request) -> Response:
    svc = services(request)
    principal = authorize(request, svc, "read")
    limit_raw = one_param(request, "limit")
    limit = 1000
    if limit_raw is not None:
        if not (limit_raw.isascii() and limit_raw.isdigit() and len(limit_raw) <= 5) or not (
            1 <= int(limit_raw) <= 10_000
        ):
            raise bad("limit must be an integer 1..10000")
        limit = int(limit_raw)
    after = one_param(request, "after")
    # A prefix-limited key lists only the streams its allowlist covers (as GET /v0/topics).
    prefixes = principal.listing_prefixes()
    page, next_after = await capped(svc.streams.list_streams(after, limit, prefixes))
    headers = {"Cache-Control": "no-store"}
    if next_after is not None:
        headers["Stream-List-Next-After"] = quote(next_after, safe="")
    body = jsoncodec.dumps([descriptor(h, s) for h, s in page])
    return Response(body, 200, headers=headers, media_type="application/json")


@router.get(
    "/v1/server/_details",
    **doc("v1", "Server details", ok={200: model("ServerView")}, errors=ERRORS),
)
async def server_details(request: Request) -> Response:
    """§7B server details: configured limits and live state of this process (read scope)."""
    return _server_view(request, "details")


@router.get(
    "/v1/server/_mem",
    **doc("v1", "Server memory snapshot", ok={200: model("ServerView")}, errors=ERRORS),
)
async def server_mem(request: Request) -> Response:
    """§7B compact memory snapshot of this process (read scope)."""
    return _server_view(request, "mem")


def _server_view(request: Request, which: str) -> Response:
    from headwater.http import v1_search

    svc = services(request)
    authorize(request, svc, "read")
    body = v1_search.server_details(svc) if which == "details" else v1_search.server_mem(svc)
    return Response(
        jsoncodec.dumps(body),
        200,
        headers={"Cache-Control": "no-store"},
        media_type="application/json",
    )


async def _create(request: Request, svc: Services, principal: Principal, name: str) -> Response:
    h = request.headers
    ttl_raw, exp_raw = h.get("stream-ttl"), h.get("stream-expires-at")
    if ttl_raw is not None and exp_raw is not None:
        raise bad("give at most one of Stream-TTL and Stream-Expires-At")
    ttl_ms = _wire(parse_ttl, ttl_raw) if ttl_raw is not None else 0
    exp_ms = _wire(parse_expires_at, exp_raw) if exp_raw is not None else 0
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
    src = _stream_name(unquote(path[len(PREFIX) :]))
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


async def _append(request: Request, svc: Services, name: str) -> Response:
    h = request.headers
    producer = _wire(parse_producer, h)
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


async def _head(svc: Services, name: str) -> Response:
    head, state = await svc.streams.lookup(name)
    headers = _stream_headers(head, state)
    headers["Stream-End-Offset"] = headers["Stream-Next-Offset"]
    headers["Cache-Control"] = "no-store"
    if state.ttl_ms:
        headers["Stream-TTL"] = str(state.ttl_ms // 1000)
    if state.expires_text:
        headers["Stream-Expires-At"] = state.expires_text
    return Response(status_code=200, headers=headers)


async def _profile(request: Request, svc: Services, principal: Principal, name: str) -> Response:
    """GET /_profile: the stream's profile (generic unless one was set); POST: set it (§7A)."""

    async def get(state: StreamState) -> dict[str, Any]:
        return profiles.resource(state.profile)

    return await _subresource(
        request, svc, principal, name, "_profile", get, svc.streams.update_profile
    )


async def _schema(request: Request, svc: Services, principal: Principal, name: str) -> Response:
    """GET /_schema: the registry; POST /_schema: apply an update (§12)."""

    async def get(state: StreamState) -> dict[str, Any]:
        return await svc.streams.registry(name, state.registry_key)

    return await _subresource(
        request, svc, principal, name, "_schema", get, svc.streams.update_schema
    )


async def _subresource(
    request: Request,
    svc: Services,
    principal: Principal,
    name: str,
    label: str,
    get: Callable[[StreamState], Awaitable[dict[str, Any]]],
    update: Callable[[str, object], Awaitable[dict[str, Any]]],
) -> Response:
    """A JSON subresource: GET reads it, POST applies a JSON update to it."""
    if request.method == "GET":
        allow(principal, "read", name)
        _, state = await capped(svc.streams.lookup(name))
        body = await capped(get(state))
    elif request.method == "POST":
        allow(principal, "write", name)
        raw = await read_append_body(request)
        try:
            parsed = jsoncodec.loads(raw)
        except ValueError:
            raise bad(f"the {label} update is not valid JSON") from None
        body = await capped(update(name, parsed))
    else:
        allow(principal, "read", name)
        raise HeadwaterError(
            f"{request.method} is not allowed on {label}", status=405, code="method_not_allowed"
        )
    return Response(jsoncodec.dumps(body), 200, media_type="application/json")


# --- reads ---------------------------------------------------------------------------------
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
        plan.since = _wire(parse_timestamp, since, "since")
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
        plan.timeout_ms = _wire(parse_timeout_ms, timeout)
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


async def _read(request: Request, svc: Services, name: str, key: str | None) -> Response:
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
