"""/v0 work queues (spec §10): claim, ack, nack, extend, and the /work push stream."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from headwater.engine import (
    LEASE_MAX_MS,
    Counters,
    LeaseOpResult,
    clamp_lease_ms,
    wall_ms,
)
from headwater.errors import BatchTooLarge, InvalidRequest, NotAcceptable
from headwater.http.bodies import read_json
from headwater.http.common import authorize, services
from headwater.http.lean_route import LeanRoute
from headwater.http.openapi_decl import (
    V0_BODY_ERRORS,
    V0_ERRORS,
    body,
    doc,
    model,
    query,
    sse,
)
from headwater.http.responses import json_response
from headwater.http.sse import EventStreamResponse
from headwater.http.watch import accepts_event_stream
from headwater.jsoncodec import dumps, is_scalar_text
from headwater.names import validate_topic_name
from headwater.services import Services
from headwater.settings import Limits
from headwater.v0.parse import is_int, query_int, require_object, require_text, u64

router = APIRouter(route_class=LeanRoute)


def _node(value: Any, limits: Limits) -> str:
    # A lone surrogate is refused by require_text with its own message.
    if (
        isinstance(value, str)
        and value
        and len(require_text(value, "node").encode()) <= limits.max_node_bytes
    ):
        return value
    raise InvalidRequest(
        f"node must be a non-empty string of at most {limits.max_node_bytes} bytes",
        detail={"field": "node"},
    )


def _seqs(body: dict[str, Any], limits: Limits) -> tuple[list[int], list[str] | None]:
    seqs = body.get("seqs")
    if not isinstance(seqs, list) or not seqs:
        raise InvalidRequest("seqs must be a non-empty array of seqs", detail={"field": "seqs"})
    if len(seqs) > limits.max_claim:
        raise BatchTooLarge(
            f"seqs holds {len(seqs)} entries; the limit is {limits.max_claim}",
            detail={"field": "seqs", "max": limits.max_claim},
        )
    if not all(is_int(s) and s >= 1 for s in seqs):
        raise InvalidRequest("each seq must be a positive integer", detail={"field": "seqs"})
    ids = body.get("lease_ids")
    if ids is None:
        return seqs, None
    if not isinstance(ids, list) or len(ids) != len(seqs):
        raise InvalidRequest(
            "lease_ids must be an array with one lease id per seq",
            detail={"field": "lease_ids"},
        )
    if not all(
        isinstance(i, str) and i.startswith("lease_") and len(i) <= 64 and is_scalar_text(i)
        for i in ids
    ):
        raise InvalidRequest(
            "each lease id must be a lease_<hex> token from a claim",
            detail={"field": "lease_ids"},
        )
    return seqs, ids


def _lease_ms(body: dict[str, Any]) -> int | None:
    if body.get("lease_ms") is None:
        return None
    return clamp_lease_ms(u64(body, "lease_ms", 0))


def _lease_body(
    request: Request,
    topic: str,
    verb: str,
    op: LeaseOpResult,
    perf: dict[str, Any] | None = None,
) -> Response:
    c: Counters = op.counters
    body: dict[str, Any] = {
        "topic": topic,
        verb: len(op.done),
        "skipped": op.skipped,
        "ready": c.ready,
        "in_flight": c.in_flight,
    }
    return json_response(request, body, perf=perf)


async def _prepare(request: Request, topic: str, *scopes: str) -> tuple[Services, dict[str, Any]]:
    svc = services(request)
    authorize(request, svc, *scopes, name=topic)
    validate_topic_name(topic)
    body = require_object(await read_json(request, svc.settings.limits.max_body_bytes))
    return svc, body


@router.post(
    "/v0/topics/{topic}/claim",
    **doc(
        "v0-queues",
        "Lease jobs to a worker",
        request=body("ClaimRequest"),
        ok={200: model("ClaimResult")},
        errors=(*V0_BODY_ERRORS, 404, 409),
    ),
)
async def claim(topic: str, request: Request) -> Response:
    # A claim mutates (it leases) and returns jobs: it takes both read and write (§0.2).
    svc, body = await _prepare(request, topic, "read", "write")
    limits = svc.settings.limits
    node = _node(body.get("node"), limits)
    max_n = min(u64(body, "max", 1), limits.max_claim)
    lease_ms = _lease_ms(body)
    result = await svc.queues.claim(topic, node, max_n, lease_ms)
    jobs = b"[" + b",".join(job.render() for job in result.jobs) + b"]"
    return json_response(
        request,
        {"topic": topic, "count": len(result.jobs), "ready": result.ready},
        raw={"claimed": jobs},
    )


@router.post(
    "/v0/topics/{topic}/ack",
    **doc(
        "v0-queues",
        "Complete (delete) leased jobs",
        request=body("AckRequest"),
        ok={200: model("AckResult")},
        errors=(*V0_BODY_ERRORS, 404, 409),
    ),
)
async def ack(topic: str, request: Request) -> Response:
    svc, body = await _prepare(request, topic, "write")
    node = _node(body.get("node"), svc.settings.limits)
    seqs, ids = _seqs(body, svc.settings.limits)
    op = await svc.queues.ack(topic, node, seqs, ids)
    # The delete is durable when DynamoDB acknowledges the write; no separate fsync step.
    return _lease_body(request, topic, "acked", op, {"fsync_ms": 0.0})


@router.post(
    "/v0/topics/{topic}/nack",
    **doc(
        "v0-queues",
        "Release leased jobs for (delayed) reclaim",
        request=body("NackRequest"),
        ok={200: model("NackResult")},
        errors=(*V0_BODY_ERRORS, 404, 409),
    ),
)
async def nack(topic: str, request: Request) -> Response:
    svc, body = await _prepare(request, topic, "write")
    node = _node(body.get("node"), svc.settings.limits)
    seqs, ids = _seqs(body, svc.settings.limits)
    delay = min(u64(body, "delay_ms", 0), LEASE_MAX_MS)
    op = await svc.queues.retime(topic, node, seqs, ids, release=True, ms=delay)
    return _lease_body(request, topic, "nacked", op)


@router.post(
    "/v0/topics/{topic}/extend",
    **doc(
        "v0-queues",
        "Extend leases (heartbeat)",
        request=body("ExtendRequest"),
        ok={200: model("ExtendResult")},
        errors=(*V0_BODY_ERRORS, 404, 409),
    ),
)
async def extend(topic: str, request: Request) -> Response:
    svc, body = await _prepare(request, topic, "write")
    node = _node(body.get("node"), svc.settings.limits)
    seqs, ids = _seqs(body, svc.settings.limits)
    lease_ms = _lease_ms(body)
    if lease_ms is None:
        raise InvalidRequest("lease_ms is required", detail={"field": "lease_ms"})
    op = await svc.queues.retime(topic, node, seqs, ids, release=False, ms=lease_ms)
    deadlines = {str(seq): due for seq, due in op.deadlines.items()}
    body_out = {"extended": len(op.done), "skipped": op.skipped, "deadlines": deadlines}
    return json_response(request, {"topic": topic, **body_out})


@router.get(
    "/v0/topics/{topic}/work",
    **doc(
        "v0-queues",
        "Push jobs to a worker (SSE)",
        params=[
            query("node", {"type": "string", "minLength": 1}, "Worker identity", required=True),
            query("max", {"type": "integer", "minimum": 1}, "In-flight depth (default 1)"),
            query("lease_ms", {"type": "integer", "minimum": 0}, "Lease length"),
            query("token", {"type": "string"}, "Dev-only key for EventSource (prefer the header)"),
        ],
        ok={200: sse("`event: job` frames (id = the job's seq) and `: hb` heartbeats")},
        errors=(*V0_ERRORS, 404, 406, 409),
    ),
)
async def work(topic: str, request: Request) -> Response:
    svc = services(request)
    tokens = request.query_params.getlist("token")
    principal = svc.keys.authenticate(
        request.headers.get("authorization"), tokens[0] if tokens else None
    )
    principal.require("read", "write")
    principal.require_name(topic)
    if not accepts_event_stream(request.headers.get("accept")):
        raise NotAcceptable("this stream needs Accept: text/event-stream")
    validate_topic_name(topic)
    q = request.query_params
    limits = svc.settings.limits
    node = _node(q.get("node"), limits)
    depth = query_int(q, "max", 1, 1, limits.max_claim)
    lease_raw = q.get("lease_ms")
    lease_ms = clamp_lease_ms(query_int(q, "lease_ms", 0, 0, LEASE_MAX_MS)) if lease_raw else None
    engine = svc.queues
    # Establishment errors (404 topic_not_found, 409 not_a_queue) are plain HTTP errors.
    await engine.check(topic)
    slot = svc.limits.acquire_stream(principal.key_id if svc.keys.enabled else None)
    topic_json = dumps(topic)

    async def body() -> AsyncGenerator[bytes, None]:
        yield b"retry: 2000\n\n: hb " + str(wall_ms()).encode() + b"\n\n"
        jobs = engine.work(topic, node, depth, lease_ms)
        try:
            async for job in jobs:
                if job is None:
                    yield b": hb " + str(wall_ms()).encode() + b"\n\n"
                else:
                    yield b"id: %d\nevent: job\ndata: %s\n\n" % (job.seq, job.render(topic_json))
        finally:
            # Closing the job stream releases this connection's leases (spec §10.8).
            await jobs.aclose()

    caps = svc.settings.caps
    return EventStreamResponse(
        body(),
        slot,
        topics=[topic],
        grace_ms=caps.buffer_grace_ms,
        timeout_ms=caps.slow_consumer_timeout_ms,
        buffer_bytes=caps.stream_buffer_bytes,
    )


__all__ = ["router"]
