"""/api/v2: the dashboard feed (spec: dashboard-sse-contract.txt; docs/dashboard.md).

Streams: GET /api/v2/stream (public metrics), GET /api/v2/configurations/{id}/stream
(X-User-ID), GET /api/v2/stream/status. REST: POST /api/v2/sentiment (ingest, API-key
`write` scope on the topic when auth is on), GET /api/v2/metrics, and the configurations
CRUD scoped by X-User-ID. Every error is `{"detail": ...}` (the contract's shape)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from headwater import jsoncodec
from headwater.access.limits import Slot
from headwater.dashboard.ids import parse_event_id
from headwater.dashboard.items import ItemError, check_item
from headwater.dashboard.service import (
    DashboardError,
    DashboardService,
    check_user_id,
    config_json,
    parse_config_body,
)
from headwater.dashboard.streams import config_stream, metrics_stream
from headwater.engine import AppendRequest, NewRecord, encoded_size
from headwater.errors import HeadwaterError
from headwater.http.bodies import read_json
from headwater.http.common import authorize, services
from headwater.http.dashboard_errors import PREFIX
from headwater.http.lean_route import LeanRoute
from headwater.http.openapi_decl import body, doc, empty, header, model, query, sse
from headwater.http.sse import EventStreamResponse, bare_event_stream

router = APIRouter(route_class=LeanRoute)

SSE_HEADERS = {"Cache-Control": "no-cache", "Connection": "keep-alive", "X-Accel-Buffering": "no"}
RETRY_AFTER_S = 30
READY_TIMEOUT_S = 10.0
MAX_REPORTED_ERRORS = 100
USER = header(
    "X-User-ID", {"type": "string"}, "Identifies the user (not authentication)", required=True
)
LAST_EVENT_ID = header("Last-Event-ID", {"type": "string"}, "Resume after this event")


def _json(body: Any, status: int = 200) -> Response:
    return Response(jsoncodec.dumps(body), status, media_type="application/json")


def dashboard(request: Request) -> DashboardService:
    return services(request).dashboard


def _user(request: Request, *, query_fallback: bool = False) -> str:
    raw = request.headers.get("x-user-id")
    if raw is None and query_fallback:
        # EventSource cannot send headers: the stream also takes ?user_id= (docs).
        raw = request.query_params.get("user_id")
    return check_user_id(raw)


# --- ingest ------------------------------------------------------------------------------
@router.post(
    PREFIX + "/sentiment",
    **doc(
        "dashboard",
        "Ingest sentiment items",
        request=body("IngestRequest"),
        params=[header("Idempotency-Key", {"type": "string"}, "1..256 characters")],
        ok={
            200: model("Ingested", "Deduped: the Idempotency-Key matched"),
            201: model("Ingested", "Appended"),
        },
        errors=(400, 401, 403, 413, 415, 422, 429, 503),
        credential="apiKey",
    ),
)
async def ingest(request: Request) -> Response:
    svc = services(request)
    dash = svc.dashboard
    topic = dash.settings.topic
    authorize(request, svc, "write", name=topic)
    limits = svc.settings.limits
    key = request.headers.get("idempotency-key")
    if key is not None and not 1 <= len(key) <= limits.max_idempotency_key_chars:
        raise DashboardError(
            400, f"Idempotency-Key must be 1..{limits.max_idempotency_key_chars} characters"
        )
    body = await read_json(request, limits.max_body_bytes)
    raw_items = body.get("items") if isinstance(body, dict) and "items" in body else body
    batch = raw_items if isinstance(raw_items, list) else [raw_items]
    if not batch:
        raise DashboardError(400, "no items given")
    if len(batch) > limits.max_batch_records:
        raise DashboardError(
            400, f"at most {limits.max_batch_records} items per request", {"count": len(batch)}
        )
    now = dash.clock()
    records: list[NewRecord] = []
    errors: list[dict[str, Any]] = []
    for i, raw in enumerate(batch):
        try:
            item = check_item(raw, now)
        except ItemError as exc:
            if len(errors) < MAX_REPORTED_ERRORS:
                errors.append({"index": i, "field": exc.field, "message": exc.message})
            continue
        data = item.as_json()
        data_raw = jsoncodec.dumps(data)
        size = encoded_size(data_raw, None, item.ticker, None)
        records.append(NewRecord(data, None, item.ticker, None, size, data_raw, None))
    if errors:
        # All or nothing: a batch with any bad item writes none.
        raise DashboardError(400, "invalid sentiment item", {"errors": errors})
    req = AppendRequest(records, idempotency_key=key)
    result = await svc.engine.append(topic, req)
    return _json(
        {
            "topic": topic,
            "accepted": len(records),
            "first_seq": result.first_seq,
            "last_seq": result.last_seq,
            "deduped": result.deduped,
        },
        201 if not result.deduped else 200,
    )


@router.get(
    PREFIX + "/metrics",
    **doc("dashboard", "Sentiment metrics now", ok={200: model("DashboardMetrics")}, errors=(503,)),
)
async def metrics(request: Request) -> Response:
    """The metrics event's data, now (REST; the stream pushes the same)."""
    dash = dashboard(request)
    await dash.feed.sync()
    return Response(dash.feed.metrics(), media_type="application/json")


# --- configurations ----------------------------------------------------------------------
@router.post(
    PREFIX + "/configurations",
    **doc(
        "dashboard",
        "Create a configuration",
        request=body("ConfigurationCreate"),
        params=[USER],
        ok={201: model("Configuration", "Created")},
        errors=(400, 401, 413, 415, 429, 503),
    ),
)
async def create_config(request: Request) -> Response:
    dash = dashboard(request)
    user = _user(request)
    body = await read_json(request, 64 * 1024)
    name, tickers = parse_config_body(body, partial=False)
    assert name is not None and tickers is not None
    cfg = await dash.create_config(user, name, tickers)
    return _json(config_json(cfg), 201)


@router.get(
    PREFIX + "/configurations",
    **doc(
        "dashboard",
        "The user's configurations",
        params=[USER],
        ok={200: model("ConfigurationList")},
        errors=(401, 429, 503),
    ),
)
async def list_configs(request: Request) -> Response:
    dash = dashboard(request)
    user = _user(request)
    configs = await dash.list_configs(user)
    return _json({"configurations": [config_json(c) for c in configs], "count": len(configs)})


@router.get(
    PREFIX + "/configurations/{config_id}",
    **doc(
        "dashboard",
        "A configuration",
        params=[USER],
        ok={200: model("Configuration")},
        errors=(401, 404, 429, 503),
    ),
)
async def get_config(config_id: str, request: Request) -> Response:
    dash = dashboard(request)
    user = _user(request)
    return _json(config_json(await dash.get_config(user, config_id)))


@router.put(
    PREFIX + "/configurations/{config_id}",
    **doc(
        "dashboard",
        "Update a configuration",
        request=body("ConfigurationUpdate"),
        params=[USER],
        ok={200: model("Configuration")},
        errors=(400, 401, 404, 413, 415, 429, 503),
    ),
)
async def put_config(config_id: str, request: Request) -> Response:
    dash = dashboard(request)
    user = _user(request)
    body = await read_json(request, 64 * 1024)
    name, tickers = parse_config_body(body, partial=True)
    return _json(config_json(await dash.update_config(user, config_id, name, tickers)))


@router.delete(
    PREFIX + "/configurations/{config_id}",
    **doc(
        "dashboard",
        "Delete a configuration",
        params=[USER],
        ok={204: empty("Deleted")},
        errors=(401, 404, 429, 503),
    ),
)
async def delete_config(config_id: str, request: Request) -> Response:
    dash = dashboard(request)
    user = _user(request)
    await dash.delete_config(user, config_id)
    return Response(status_code=204)


# --- streams -----------------------------------------------------------------------------
def _take_slot(dash: DashboardService, wake: asyncio.Event) -> Slot:
    """A stream slot that also stops following the feed when released (every exit path:
    the response releases it, or the route when it fails before responding)."""
    if dash.shutdown.is_set():
        raise DashboardError(
            503,
            "Server is shutting down. Try again later.",
            {"retry_after": RETRY_AFTER_S},
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )
    if not dash.connections.take():
        raise DashboardError(
            503,
            "Connection limit reached. Try again later.",
            {"max_connections": dash.connections.maximum, "retry_after": RETRY_AFTER_S},
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )
    following = dash.feed.follow(wake)
    following.__enter__()

    def free() -> None:
        following.__exit__(None, None, None)
        dash.connections.give_back()

    return Slot(free)


async def _ready(dash: DashboardService, slot: Slot) -> None:
    """The feed built and caught up with the head now, so a stream's first metrics and its
    resume check see everything appended before the request."""
    try:
        await dash.feed.ready(READY_TIMEOUT_S)
        await dash.feed.sync()
    except BaseException as exc:
        slot.release()
        if isinstance(exc, HeadwaterError | TimeoutError):
            raise DashboardError(
                503,
                "The feed is not available yet. Try again later.",
                {"retry_after": 1},
                headers={"Retry-After": "1"},
            ) from exc
        raise


def _response(request: Request, frames: Any, slot: Slot) -> EventStreamResponse:
    svc = services(request)
    return bare_event_stream(
        frames,
        slot,
        topics=[svc.dashboard.settings.topic],
        caps=svc.settings.caps,
        headers=SSE_HEADERS,
    )


@router.get(
    PREFIX + "/stream",
    **doc(
        "dashboard",
        "Metrics stream (SSE, public)",
        params=[LAST_EVENT_ID],
        ok={200: sse("`metrics` and `heartbeat` events")},
        errors=(503,),
    ),
)
async def stream(request: Request) -> Response:
    dash = dashboard(request)
    wake = asyncio.Event()
    slot = _take_slot(dash, wake)
    await _ready(dash, slot)
    return _response(request, metrics_stream(dash, wake), slot)


@router.get(
    PREFIX + "/stream/status",
    **doc("dashboard", "Stream connections now", ok={200: model("StreamStatus")}, errors=()),
)
async def stream_status(request: Request) -> Response:
    return _json(dashboard(request).status())


@router.get(
    PREFIX + "/configurations/{config_id}/stream",
    **doc(
        "dashboard",
        "A configuration's stream (SSE)",
        params=[
            header("X-User-ID", {"type": "string"}, "The user (or ?user_id= for EventSource)"),
            query("user_id", {"type": "string"}, "The user, when X-User-ID cannot be sent"),
            LAST_EVENT_ID,
        ],
        ok={200: sse("`sentiment_update` and `heartbeat` events")},
        errors=(400, 401, 404, 503),
    ),
)
async def config_stream_route(config_id: str, request: Request) -> Response:
    dash = dashboard(request)
    user = _user(request, query_fallback=True)
    cfg = await dash.get_config(user, config_id)
    resume = parse_event_id(request.headers.get("last-event-id"), dash.feed.check)
    wake = asyncio.Event()
    slot = _take_slot(dash, wake)
    await _ready(dash, slot)
    return _response(request, config_stream(dash, wake, cfg, resume), slot)
