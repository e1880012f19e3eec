"""/v0 watch (spec §7): POST /v0/watch creates a session, GET /v0/watch/:wid streams it as
server-sent events."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncGenerator
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from headwater.engine import (
    WatchEngine,
    WatchEvent,
    wall_ms,
)
from headwater.errors import NotAcceptable, NotFound, Unauthorized
from headwater.http.bodies import read_json
from headwater.http.common import authorize, services
from headwater.http.lean_route import LeanRoute
from headwater.http.openapi_decl import (
    BOOL_QUERY,
    V0_BODY_ERRORS,
    V0_ERRORS,
    body,
    doc,
    header,
    model,
    query,
    sse,
)
from headwater.http.responses import json_response
from headwater.http.sse import EventStreamResponse
from headwater.services import Services
from headwater.v0.parse import query_bool
from headwater.v0.requests import (
    parse_watch,
)

router = APIRouter(route_class=LeanRoute)


def watch_engine(svc: Services) -> WatchEngine:
    return WatchEngine(svc.engine, svc.sessions, svc.settings.watch_session_ttl_ms)


@router.post(
    "/v0/watch",
    **doc(
        "v0-watch",
        "Create a watch session",
        request=body("WatchRequest"),
        params=[query("lenient", BOOL_QUERY, "Drop unknown topics instead of a 404")],
        ok={200: model("WatchCreated")},
        errors=(*V0_BODY_ERRORS, 404),
    ),
)
async def create_watch(request: Request) -> Response:
    svc = services(request)
    principal = authorize(request, svc, "read")
    body = await read_json(request, svc.settings.limits.max_body_bytes)
    requested, spec = parse_watch(body, svc.settings.limits, svc.settings.max_watch_topics)
    for name in requested:
        principal.require_name(name)  # the allowlist covers every body topic (403)
    lenient = query_bool(request.query_params, "lenient", False)
    wid, spec, heads = await watch_engine(svc).create(
        requested,
        spec,
        key_id=principal.key_id,
        scopes=principal.scopes,
        auth=svc.keys.enabled,
        lenient=lenient,
    )
    topics: dict[str, Any] = {}
    for t in spec.topics:
        head = heads[t.topic]
        topics[t.topic] = {
            "from_seq": t.from_seq,
            "head_seq": head.head_seq,
            "earliest_seq": head.first_live_seq,
        }
    return json_response(
        request,
        {
            "wid": wid,
            "stream_url": f"/v0/watch/{wid}",
            "session_ttl_ms": svc.settings.watch_session_ttl_ms,
            "topics": topics,
        },
    )


def accepts_event_stream(accept: str | None) -> bool:
    if not accept:
        return False
    for part in accept.split(","):
        media = part.split(";", 1)[0].strip().lower()
        if media == "text/event-stream":
            return True
    return False


def sse_frame(event: WatchEvent) -> bytes:
    if event.name == "heartbeat":
        return b": hb " + event.data + b"\n\n"
    head = b"id: " + event.id.encode() + b"\n" if event.id is not None else b""
    return head + b"event: " + event.name.encode() + b"\ndata: " + event.data + b"\n\n"


@router.get(
    "/v0/watch/{wid}",
    **doc(
        "v0-watch",
        "Stream a watch session (SSE)",
        params=[
            query("token", {"type": "string"}, "Dev-only key for EventSource (prefer the header)"),
            header("Last-Event-ID", {"type": "string"}, "Resume from this frame's cursor"),
        ],
        ok={
            200: sse(
                "`record`, `tombstone`, `caught-up`, `topic-deleted` and `error` events, "
                "`: hb` heartbeats"
            )
        },
        errors=(*V0_ERRORS, 404, 406),
    ),
)
async def open_watch(wid: str, request: Request) -> Response:
    svc = services(request)
    principal = None
    if svc.keys.enabled:  # credentials first: a stranger learns nothing, not even a 406
        tokens = request.query_params.getlist("token")
        principal = svc.keys.authenticate(
            request.headers.get("authorization"), tokens[0] if tokens else None
        )
    watch = watch_engine(svc)
    item = await watch.load(wid) if wid.startswith("wid_") else None
    if item is None:
        raise NotFound(f"watch session {wid!r} does not exist; POST /v0/watch again")
    if principal is not None and principal.key_id != item.key_id:
        # Defense in depth (spec §7.1): a leaked wid is useless without the creating key.
        raise Unauthorized("this watch session belongs to a different api key")
    if "read" not in item.scopes:
        raise Unauthorized("the creating api key lacks read scope")
    session = watch.resolve(item, request.headers.get("last-event-id"))
    if principal is not None:
        # The key as configured now (same secret, maybe a narrower allowlist since a
        # restart) must still cover every topic of the session.
        principal.require_names(*(t.topic for t in session.spec.topics))
    if not accepts_event_stream(request.headers.get("accept")):
        raise NotAcceptable("this stream needs Accept: text/event-stream")
    # An event is at most half the stream's buffer (max_batch_bytes is a budget, §7.2: a
    # smaller batch is allowed): a client that stops reading holds the buffer, not a few
    # batches of up to 8 MiB. The stored session keeps what the client asked for.
    event_bytes = max(1, svc.settings.caps.stream_buffer_bytes // 2)
    if session.spec.max_batch_bytes > event_bytes:
        spec = dataclasses.replace(session.spec, max_batch_bytes=event_bytes)
        session = dataclasses.replace(session, spec=spec)
    # The connection counts against the stream caps (spec §11), attributed to the session's
    # creating key; the response releases the slot however the stream ends.
    slot = svc.limits.acquire_stream(item.key_id if item.auth else None)

    async def body() -> AsyncGenerator[bytes, None]:
        # retry and a first heartbeat at open (spec §7.5): headers and a byte go out at once.
        yield b"retry: 2000\n\n: hb " + str(wall_ms()).encode() + b"\n\n"
        events = watch.stream(session, svc.settings.watch_max_stream_sec)
        try:
            async for event in events:
                frame = sse_frame(event)
                del event  # a blocked stream holds its frame's bytes, not the decoded records
                yield frame
        finally:
            # Closed now, not whenever the garbage collector gets to it: closing saves the
            # session's cursors, and a reconnect must find them.
            await events.aclose()

    caps = svc.settings.caps
    return EventStreamResponse(
        body(),
        slot,
        topics=[t.topic for t in session.spec.topics],
        grace_ms=caps.buffer_grace_ms,
        timeout_ms=caps.slow_consumer_timeout_ms,
        buffer_bytes=caps.stream_buffer_bytes,
    )


__all__ = ["router"]
