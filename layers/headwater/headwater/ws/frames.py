"""The frames of the /v0/ws protocol that the WebSocket function, the in-process WebSocket
route and the stream forwarder all send: command replies, errors, and feed events. No web
framework here: the forwarder Lambda imports it to push frames."""

from __future__ import annotations

from typing import Any

from headwater import jsoncodec
from headwater.engine import WatchEvent
from headwater.errors import HeadwaterError

# SSE event name -> WebSocket op; the SSE payloads are JSON objects, spliced not re-encoded
_EVENT_OPS = {
    "record": b'{"op":"record",',
    "tombstone": b'{"op":"tombstone",',
    "caught-up": b'{"op":"caught_up",',
    "topic-deleted": b'{"op":"topic_deleted",',
}


def event_frame(event: WatchEvent) -> bytes | None:
    """The WebSocket frame for a feed event (records stay verbatim), or None if the event has
    no WebSocket form (SSE heartbeats: WebSocket has its own ping/pong)."""
    prefix = _EVENT_OPS.get(event.name)
    return None if prefix is None else prefix + event.data[1:]


def reply_frame(op: str, request_id: object, body: dict[str, Any] | None = None) -> bytes:
    return jsoncodec.dumps({"op": op, "request_id": request_id, **(body or {})})


def error_frame(request_id: object, exc: HeadwaterError) -> bytes:
    body: dict[str, Any] = {"code": exc.code, "message": exc.message}
    if exc.detail is not None:
        body["detail"] = exc.detail
    return reply_frame("error", request_id, body)
