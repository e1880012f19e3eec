"""/api/v1: aviso-server's notification API (docs/notifications.md), route for route.

    POST   /api/v1/notification                       store one notification
    POST   /api/v1/watch                              SSE: (replay, then) live notifications
    POST   /api/v1/replay                             SSE: history from from_id / from_date
    GET    /api/v1/schema                             every event type's public schema
    GET    /api/v1/schema/{event_type}                one event type's
    DELETE /api/v1/admin/notification/{stream@seq}    delete one notification
    DELETE /api/v1/admin/wipe/stream                  {"stream_name": ...}: wipe one stream
    DELETE /api/v1/admin/wipe/all                     wipe every stream

Thin: bodies are parsed and validated by `headwater.notify.requests` (aviso's errors, in
aviso's order: JSON, unknown keys, shape, unknown event type, then the request's rules),
authorization by `headwater.http.aviso`, and the work is `NotificationService`'s. Response
bodies keep aviso's key order (structs in field order, maps sorted)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from headwater.access.keys import Principal
from headwater.errors import HeadwaterError
from headwater.http import aviso
from headwater.http.bodies import read_body
from headwater.http.common import services
from headwater.http.lean_route import LeanRoute
from headwater.http.openapi_decl import body, doc, model, sse
from headwater.http.sse import EventStreamResponse
from headwater.notify import stream as frames
from headwater.notify.errors import AvisoError, RequestKind
from headwater.notify.numbers import RustParseError, parse_rust_int
from headwater.notify.requests import (
    RawRequest,
    load_json,
    parse_request_body,
    validate_notification,
    validate_replay,
    validate_watch,
)
from headwater.notify.schema import POINT_FIELD, EventSchema
from headwater.services import Services

router = APIRouter(route_class=LeanRoute)

# Errors of notify, watch and replay (aviso's body): the request (400), credentials (401,
# 403), caps (429), storage unavailable (503).
ERRORS = (400, 401, 403, 429, 503)
STREAM_FRAMES = (
    "aviso's SSE lifecycle: `replay-control`, `replay` and `live-notification` (CloudEvents) "
    "events, `heartbeat`, then `connection-closing` (end_of_stream, max_duration_reached, "
    "server_shutdown)"
)

# aviso's SSE response headers (`X-Request-ID` is added with every /api/v1 response).
SSE_HEADERS = {"Cache-Control": "no-cache", "Connection": "keep-alive", "X-Accel-Buffering": "no"}


def _now_secs() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def _request(
    request: Request, svc: Services, kind: RequestKind
) -> tuple[RawRequest, EventSchema, Principal | None]:
    """Steps 1-2 of every notify/watch/replay (credentials first, as aviso's middleware)."""
    principal = aviso.caller(request, svc.keys)
    body = await read_body(request, svc.settings.limits.max_record_bytes)
    raw = parse_request_body(body, kind)
    return raw, svc.notifications.schema.require(raw.event_type), principal


@router.post(
    "/api/v1/notification",
    **doc(
        "notify",
        "Store one notification",
        request=body("NotificationRequest"),
        ok={200: model("NotificationAccepted")},
        errors=(*ERRORS, 413, 415, 500),
    ),
)
async def notify(request: Request) -> Response:
    svc = services(request)
    raw, schema, principal = await _request(request, svc, RequestKind.NOTIFICATION)
    if POINT_FIELD in raw.identifier:
        validate_notification(schema, raw)  # raises aviso's point error, before authorization
    aviso.require_stream_access(principal, schema, write=True, keys=svc.keys)
    notification = validate_notification(schema, raw)
    try:
        await svc.notifications.publish(notification)
    except HeadwaterError as exc:
        raise AvisoError(
            code="NOTIFICATION_STORAGE_FAILED",
            error="Notification Storage Failed",
            message="Failed to store the notification",
            details=exc.message,
            status=500,
        ) from exc
    return aviso.aviso_json(
        {"status": "success", "request_id": aviso.request_id(request), "processed_at": _now_secs()}
    )


async def _stream(request: Request, kind: RequestKind) -> Response:
    svc = services(request)
    raw, schema, principal = await _request(request, svc, kind)
    aviso.require_stream_access(principal, schema, write=False, keys=svc.keys)
    valid = (validate_watch if kind is RequestKind.WATCH else validate_replay)(schema, raw)
    rid = aviso.request_id(request)
    stream = svc.notifications.stream(valid, rid)
    topic = valid.filter.topic

    def final_frame(_code: int, message: str) -> bytes:
        # A failure or a client that stopped reading ends the stream as a storage failure
        # does in aviso: an `error` frame, then `connection-closing` `end_of_stream`.
        return frames.stream_error(topic, message, rid) + frames.closing(
            topic, "end_of_stream", rid
        )

    key_id = principal.key_id if svc.keys.enabled and principal is not None else None
    slot = svc.limits.acquire_stream(key_id)
    caps = svc.settings.caps
    return EventStreamResponse(
        stream.frames(),
        slot,
        topics=[topic],
        grace_ms=caps.buffer_grace_ms,
        timeout_ms=caps.slow_consumer_timeout_ms,
        buffer_bytes=caps.stream_buffer_bytes,
        headers=SSE_HEADERS,
        content_type="text/event-stream",
        pacing_advice=False,
        final_frame=final_frame,
    )


@router.post(
    "/api/v1/watch",
    **doc(
        "notify",
        "Watch notifications (SSE): replay, then live",
        request=body("AvisoWatchRequest"),
        ok={200: sse(STREAM_FRAMES)},
        errors=(*ERRORS, 413, 415),
    ),
)
async def watch(request: Request) -> Response:
    return await _stream(request, RequestKind.WATCH)


@router.post(
    "/api/v1/replay",
    **doc(
        "notify",
        "Replay notifications (SSE) from from_id or from_date",
        request=body("AvisoReplayRequest"),
        ok={200: sse(STREAM_FRAMES)},
        errors=(*ERRORS, 413, 415),
    ),
)
async def replay(request: Request) -> Response:
    return await _stream(request, RequestKind.REPLAY)


@router.get(
    "/api/v1/schema",
    **doc(
        "notify", "Every event type's schema", ok={200: model("SchemaList")}, errors=(), public=True
    ),
)
async def schema_list(request: Request) -> Response:
    return aviso.aviso_json(services(request).notifications.schema.list_body())


@router.get(
    "/api/v1/schema/{event_type}",
    **doc(
        "notify",
        "One event type's schema",
        ok={
            200: model("EventTypeSchema"),
            404: model("SchemaNotFound", "Unknown event type, or no schema configured"),
        },
        errors=(),
        public=True,
    ),
)
async def schema_one(request: Request, event_type: str) -> Response:
    registry = services(request).notifications.schema
    status, body = registry.event_body(event_type, aviso.request_id(request))
    return aviso.aviso_json(body, status)


# --- admin -------------------------------------------------------------------------------------
def _parse_notification_id(value: str) -> tuple[str, int]:
    """aviso's `<stream>@<sequence>`; raises ValueError with aviso's message."""
    stream, sep, sequence = value.strip().partition("@")
    if not sep or not stream or not sequence:
        raise ValueError("notification_id must be in '<stream>@<sequence>' format")
    try:
        seq = parse_rust_int(sequence, signed=False, bits=64)
    except RustParseError:
        raise ValueError("notification_id sequence must be a positive integer") from None
    if seq == 0:
        raise ValueError("notification_id sequence must be greater than zero")
    return stream, seq


@router.delete(
    "/api/v1/admin/notification/{notification_id}",
    **doc(
        "notify",
        "Delete one notification (admin)",
        ok={
            200: model("AdminResult", "Deleted"),
            400: model("AdminResult", "Not a <stream>@<sequence> id"),
            404: model("AdminResult", "No such notification"),
            500: model("AdminResult", "Storage failed"),
        },
        errors=(401, 403, 429),
    ),
)
async def delete_notification(request: Request, notification_id: str) -> Response:
    svc = services(request)
    admin = aviso.require_admin(request, svc.keys)
    rid = aviso.request_id(request)

    def answer(status: int, success: bool, message: str) -> Response:
        body = {
            "success": success,
            "message": message,
            "notification_id": notification_id,
            "request_id": rid,
        }
        return aviso.aviso_json(body, status)

    try:
        stream, seq = _parse_notification_id(notification_id)
    except ValueError as exc:
        return answer(400, False, str(exc))
    aviso.require_admin_of(admin, stream, await svc.notifications.resolve_stream(stream))
    try:
        deleted = await svc.notifications.delete(stream, seq)
    except HeadwaterError as exc:
        return answer(500, False, f"Failed to delete notification: {exc.message}")
    if not deleted:
        return answer(404, False, "Notification not found")
    return answer(200, True, "Notification deleted")


def _wipe_answer(request: Request, status: int, success: bool, message: str) -> Response:
    body = {"success": success, "message": message, "request_id": aviso.request_id(request)}
    return aviso.aviso_json(body, status)


@router.delete(
    "/api/v1/admin/wipe/stream",
    **doc(
        "notify",
        "Wipe one stream (admin)",
        request=body("WipeStreamRequest"),
        ok={
            200: model("AdminResult", "Wiped"),
            400: model("AdminResult", "Not {stream_name: <string>}"),
            404: model("AdminResult", "No such stream"),
            500: model("AdminResult", "Storage failed"),
        },
        errors=(401, 403, 413, 415, 429),
    ),
)
async def wipe_stream(request: Request) -> Response:
    svc = services(request)
    admin = aviso.require_admin(request, svc.keys)
    body = await read_body(request, svc.settings.limits.max_record_bytes)
    try:
        document: Any = load_json(body) if body else None  # serde_json's rules, as aviso's
    except (ValueError, UnicodeDecodeError) as exc:
        return _wipe_answer(request, 400, False, f"Json deserialize error: {exc}")
    name = document.get("stream_name") if isinstance(document, dict) else None
    if not isinstance(name, str):
        return _wipe_answer(
            request, 400, False, 'Json deserialize error: expected {"stream_name": <string>}'
        )
    aviso.require_admin_of(admin, name, await svc.notifications.resolve_stream(name))
    try:
        wiped = await svc.notifications.wipe_stream(name)
    except HeadwaterError as exc:
        return _wipe_answer(request, 500, False, f"Failed to wipe stream: {exc.message}")
    if wiped is None:
        # aviso's JetStream backend words it so, with a 500; an unknown name is the client's
        # mistake, and a 5xx is kept for the server's (as for an unknown notification id).
        return _wipe_answer(
            request, 404, False, f"Failed to wipe stream: Failed to get stream {name}"
        )
    return _wipe_answer(request, 200, True, f"Successfully wiped stream: {name}")


@router.delete(
    "/api/v1/admin/wipe/all",
    **doc(
        "notify",
        "Wipe every stream (admin without a prefix allowlist)",
        ok={200: model("AdminResult", "Wiped"), 500: model("AdminResult", "Storage failed")},
        errors=(401, 403, 429),
    ),
)
async def wipe_all(request: Request) -> Response:
    svc = services(request)
    aviso.require_admin_of_all(aviso.require_admin(request, svc.keys))
    try:
        await svc.notifications.wipe_all()
    except HeadwaterError as exc:
        return _wipe_answer(request, 500, False, f"Failed to wipe all data: {exc.message}")
    return _wipe_answer(request, 200, True, "Successfully wiped all data")
