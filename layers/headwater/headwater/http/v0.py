"""/v0 topics surface (spec §1–§5): topic lifecycle, append, diff, record delete."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from headwater.engine import Counters, DiffResult, effective_priority, validate_config_patch
from headwater.engine.ports import Head
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
)
from headwater.http.responses import json_response
from headwater.names import validate_topic_name
from headwater.v0.parse import (
    decode_cursor,
    encode_cursor,
    parse_append,
    parse_delete,
    parse_diff,
    query_bool,
    query_int,
    require_object,
)
from headwater.v0.requests import append_body, commit_append, require_config_names

router = APIRouter(route_class=LeanRoute)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def state_body(head: Head, queue: Counters | None = None) -> dict[str, Any]:
    cfg = head.config
    body: dict[str, Any] = {
        "topic": head.topic,
        "type": head.cfg.type,
        "head_seq": head.head_seq,
        "earliest_seq": head.first_live_seq,
        "next_seq": head.head_seq + 1,
        "count": head.count,
        "bytes": head.bytes,
        "config": cfg,
        "effective_priority": effective_priority(head.cfg, head.last_read_ts, now_ms()),
        "last_write_ts": head.last_write_ts,
        "last_read_ts": head.last_read_ts,
        # Additive (spec §0: clients tolerate extra fields): how much is in S3 segments.
        "sealed_through": head.sealed_through,
    }
    if queue is not None:
        body["queue"] = {
            "ready": queue.ready,
            "in_flight": queue.in_flight,
            "dead_lettered": queue.dead_lettered,
        }
    return body


@router.put(
    "/v0/topics/{topic}",
    **doc(
        "v0",
        "Create or configure a topic",
        request=body("TopicConfig", required=False, description="Empty body: all defaults"),
        ok={
            200: model("TopicPut", "Existing topic (config unchanged or updated)"),
            201: model("TopicPut", "Created"),
        },
        errors=(*V0_BODY_ERRORS, 409),
    ),
)
async def put_topic(topic: str, request: Request) -> Response:
    svc = services(request)
    principal = authorize(request, svc, "admin", name=topic)
    validate_topic_name(topic)
    body = require_object(
        await read_json(request, svc.settings.limits.max_body_bytes, required=False)
    )
    patch = validate_config_patch(body, topic)
    require_config_names(principal, patch)
    head, created = await svc.engine.put_topic(topic, patch)
    return json_response(
        request,
        {"topic": topic, "created": created, "config": head.config},
        201 if created else 200,
    )


@router.get(
    "/v0/topics/{topic}",
    **doc(
        "v0",
        "Topic state",
        params=[query("touch", BOOL_QUERY, "Bump the auto-priority clock (default true)")],
        ok={200: model("TopicState")},
        errors=(*V0_ERRORS, 404),
    ),
)
async def get_topic(topic: str, request: Request) -> Response:
    svc = services(request)
    authorize(request, svc, "read", name=topic)
    validate_topic_name(topic)
    touch = query_bool(request.query_params, "touch", True)
    head = await svc.engine.get_topic(topic, touch=touch)
    counters = await svc.queues.counters(head) if head.cfg.is_queue else None
    return json_response(request, state_body(head, counters))


@router.get(
    "/v0/topics",
    **doc(
        "v0",
        "List topics",
        params=[
            query("prefix", {"type": "string"}, "Only names starting with this"),
            query("page_size", {"type": "integer", "minimum": 1}, "Default 100, max 1000"),
            query("cursor", {"type": "string"}, "next_cursor of the previous page"),
            query("touch", BOOL_QUERY, "Bump the listed topics' auto-priority (default false)"),
        ],
        ok={200: model("TopicList")},
        errors=V0_ERRORS,
    ),
)
async def list_topics(request: Request) -> Response:
    svc = services(request)
    principal = authorize(request, svc, "read")
    q = request.query_params
    prefix = q.get("prefix", "")
    page_size = query_int(q, "page_size", 100, 1, 1000)
    after = decode_cursor(q.get("cursor"))
    touch = query_bool(q, "touch", False)
    # A prefix-limited key sees only its allowlist: intersect it with the requested prefix.
    prefixes = principal.listing_prefixes(prefix)
    page = await svc.engine.list_topics(prefixes, after, page_size) if prefixes else None
    if page is not None and touch:
        page = dataclasses.replace(page, heads=await svc.engine.touch_all(page.heads))
    now = now_ms()
    topics = [
        {
            "topic": h.topic,
            "head_seq": h.head_seq,
            "earliest_seq": h.first_live_seq,
            "count": h.count,
            "bytes": h.bytes,
            "durable": h.cfg.durable,
            "effective_priority": effective_priority(h.cfg, h.last_read_ts, now),
        }
        for h in (page.heads if page else [])
    ]
    body: dict[str, Any] = {"topics": topics}
    if page is not None and page.next_after is not None:
        body["next_cursor"] = encode_cursor(page.next_after)
    return json_response(request, body)


@router.delete(
    "/v0/topics/{topic}",
    **doc(
        "v0",
        "Delete a topic (and the routers reading or feeding it)",
        params=[query("if_empty", BOOL_QUERY, "Only when it holds no records (else 409)")],
        ok={200: model("TopicDeleted")},
        errors=(*V0_ERRORS, 409),
    ),
)
async def delete_topic(topic: str, request: Request) -> Response:
    svc = services(request)
    principal = authorize(request, svc, "delete", name=topic)
    validate_topic_name(topic)
    if_empty = query_bool(request.query_params, "if_empty", False)
    was = await svc.engine.delete_topic(topic, if_empty=if_empty)
    if was is not None and was.cfg.is_queue:
        await svc.queues.forget(was)  # its lease items are never read again
    removed = await svc.routers.remove_for_topic(topic)  # spec §1.4: the cascade
    # The cascade also takes routers of other tenants that read or fed this topic; a
    # prefix-limited key is told only the names it may see.
    removed = [r for r in removed if principal.allows_name(r)]
    return json_response(
        request, {"topic": topic, "deleted": was is not None, "routers_removed": removed}
    )


@router.post(
    "/v0/topics/{topic}",
    **doc(
        "v0",
        "Append records",
        request=body("AppendRequest"),
        params=[
            query("return_seqs", BOOL_QUERY, "List every assigned seq (default true)"),
            header("Idempotency-Key", {"type": "string"}, "Dedupe key (the body field wins)"),
        ],
        ok={200: model("AppendResult"), 201: model("AppendResult", "Appended; topic created")},
        errors=(*V0_BODY_ERRORS, 404, 409, 422),
    ),
)
async def append(topic: str, request: Request) -> Response:
    svc = services(request)
    principal = authorize(request, svc, "write", name=topic)
    validate_topic_name(topic)
    limits = svc.settings.limits
    body = await read_json(request, limits.max_body_bytes)
    req = parse_append(body, limits, request.headers.get("idempotency-key"), topic)
    require_config_names(principal, req.config)
    return_seqs = query_bool(request.query_params, "return_seqs", True)
    result, perf = await commit_append(svc.engine, topic, req)
    return json_response(
        request,
        append_body(topic, result, return_seqs),
        201 if result.created else 200,
        perf=perf,
    )


def diff_body(topic: str, result: DiffResult) -> dict[str, Any]:
    head = result.head
    tomb = result.tombstone
    return {
        "topic": topic,
        "next_from_seq": result.next_from_seq,
        "head_seq": head.head_seq,
        "earliest_seq": head.first_live_seq,
        "caught_up": result.caught_up,
        "tombstone": None
        if tomb is None
        else {
            "gap_from": tomb.gap_from,
            "gap_to": tomb.gap_to,
            "reason": tomb.reason,
            "missed_estimate": tomb.missed_estimate,
            "earliest_seq": tomb.earliest_seq,
            "head_seq": tomb.head_seq,
        },
        "lag": max(0, head.head_seq - result.next_from_seq),
    }


@router.post(
    "/v0/topics/{topic}/diff",
    **doc(
        "v0",
        "Read records after a cursor",
        request=body("DiffRequest", required=False, description="Empty body: {}"),
        ok={200: model("DiffResult")},
        errors=(*V0_BODY_ERRORS, 404),
    ),
)
async def diff(topic: str, request: Request) -> Response:
    svc = services(request)
    authorize(request, svc, "read", name=topic)
    validate_topic_name(topic)
    body = await read_json(request, svc.settings.limits.max_body_bytes, required=False)
    req = parse_diff(body, svc.settings.limits)
    result = await svc.engine.diff(topic, req)
    return json_response(
        request,
        diff_body(topic, result),
        perf={"records_scanned": result.scanned},
        raw={"records": b"[" + b",".join(result.records) + b"]"},
    )


@router.post(
    "/v0/topics/{topic}/delete",
    **doc(
        "v0",
        "Delete records by seq and/or tag",
        request=body("DeleteRecordsRequest"),
        ok={200: model("DeleteRecordsResult")},
        errors=(*V0_BODY_ERRORS, 404),
    ),
)
async def delete_records(topic: str, request: Request) -> Response:
    svc = services(request)
    authorize(request, svc, "delete", name=topic)
    validate_topic_name(topic)
    body = await read_json(request, svc.settings.limits.max_body_bytes)
    before, match = parse_delete(body)
    result = await svc.engine.delete_records(topic, before, match)
    head = result.head
    if result.deleted and head.cfg.is_queue:
        await svc.queues.reconcile(topic)  # deleted jobs lose their leases too
    return json_response(
        request,
        {
            "topic": topic,
            "deleted": result.deleted,
            "earliest_seq": head.first_live_seq,
            "head_seq": head.head_seq,
            "count": head.count,
            "bytes": head.bytes,
        },
    )
