"""/v1 search and inspection routes (protocol §2.4, §2.6, §7B, §8.6, §8.7): the HTTP mapping
of headwater.durable.search / aggregate / inspect. Every route checks the key (read scope
and the stream name's allowlist) before it looks the stream up."""

from __future__ import annotations

import os
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from headwater import jsoncodec
from headwater.access.keys import Principal
from headwater.durable import aggregate, inspect, scan, search, search_request
from headwater.durable.wire import WireError, etag_matches, is_json_type, parse_timeout_ms
from headwater.errors import HeadwaterError, InvalidRequest
from headwater.http.v1_common import allow, capped
from headwater.index.plan import IndexPlan
from headwater.index.reader import open_index
from headwater.services import Services

DETAILS_DEFAULT_WAIT_MS = 3000  # §7B: default long-poll wait
DETAILS_WAIT_CAP_MS = 4000  # inside the 5 s resolver cap
MAX_BODY_BYTES = 1 << 20  # a search / aggregate request body


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(jsoncodec.dumps(body), status, headers=headers, media_type="application/json")


def _not_allowed(method: str, label: str) -> HeadwaterError:
    return HeadwaterError(
        f"{method} is not allowed on {label}", status=405, code="method_not_allowed"
    )


def _one(request: Request, name: str) -> str | None:
    values = request.query_params.getlist(name)
    if len(values) > 1:
        raise InvalidRequest(f"{name} given more than once")
    return values[0] if values else None


async def _json_body(request: Request, label: str) -> object:
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY_BYTES:
            raise InvalidRequest(f"the {label} request body is over {MAX_BODY_BYTES} bytes")
    try:
        return jsoncodec.loads(raw)
    except ValueError:
        raise InvalidRequest(f"the {label} request body is not valid JSON") from None


async def route(
    request: Request, svc: Services, principal: Principal, name: str, sub: str
) -> Response:

    method = request.method
    allow(principal, "read", name)  # all of these only read the stream (POSTs included)
    allowed = {
        "_search": ("GET", "POST"),
        "_aggregate": ("POST",),
        "_routing_keys": ("GET",),
        "_index_status": ("GET",),
        "_details": ("GET",),
    }[sub]
    if method not in allowed:
        raise _not_allowed(method, sub)
    streams = svc.streams
    head, state = await capped(streams.lookup(name))
    reg = await capped(streams.registry(name, state.registry_key))
    if sub in ("_search", "_aggregate") and not is_json_type(state.content_type):
        raise InvalidRequest(f"{sub} needs an application/json stream")
    if sub == "_search":
        raw = await _search_params(request)
        req = search_request.parse_request(raw, reg, from_query=method == "GET")
        catalogue = svc.index_catalogue
        index = await capped(open_index(svc.engine, catalogue, head, reg))
        pruner = index.pruner(req.query) if index is not None else None
        status, body = await capped(search.run_search(streams, name, head, reg, req, pruner))
        return _json(body, status, search.search_headers(body))
    if sub == "_aggregate":
        rollup = aggregate.parse(await _json_body(request, "_aggregate"), reg)
        catalogue = svc.index_catalogue
        index = await capped(open_index(svc.engine, catalogue, head, reg))
        status, body = await capped(
            aggregate.run_aggregate(streams, name, head, reg, rollup, index)
        )
        return _json(body, status, {"Cache-Control": "no-store"})
    if sub == "_routing_keys":
        limit = inspect.ROUTING_DEFAULT_LIMIT
        raw_limit = _one(request, "limit")
        if raw_limit is not None:
            if not (raw_limit.isascii() and raw_limit.isdigit() and len(raw_limit) <= 4) or not (
                1 <= int(raw_limit) <= inspect.ROUTING_MAX_LIMIT
            ):
                raise InvalidRequest(f"limit must be an integer 1..{inspect.ROUTING_MAX_LIMIT}")
            limit = int(raw_limit)
        after = _one(request, "after")
        catalogue = svc.index_catalogue
        index = await capped(open_index(svc.engine, catalogue, head, reg))
        body = await capped(inspect.routing_keys(streams, head, reg, limit, after, index))
        return _json(body, 200, {"Cache-Control": "no-store"})
    return await _conditional(request, svc, name, sub)


async def _search_params(request: Request) -> dict[str, Any]:
    if request.method == "POST":
        body = await _json_body(request, "_search")
        if not isinstance(body, dict):
            raise InvalidRequest("the _search request body must be a JSON object")
        return body
    raw: dict[str, Any] = {}
    for key in request.query_params:
        if key not in search_request.BODY_KEYS:
            raise InvalidRequest(f"unknown _search parameter {key!r}")
    for key in ("q", "size", "timeout_ms"):
        value = _one(request, key)
        if value is not None:
            raw[key] = value
    sorts = [s.strip() for v in request.query_params.getlist("sort") for s in v.split(",")]
    if sorts:
        raw["sort"] = [s for s in sorts if s] or [""]
    after = _one(request, "search_after")
    if after is not None:
        try:
            raw["search_after"] = jsoncodec.loads(after.encode())
        except ValueError:
            raise InvalidRequest("search_after must be a JSON array") from None
        if not isinstance(raw["search_after"], list):
            raise InvalidRequest("search_after must be a JSON array")
    return raw


async def _describe(svc: Services, name: str, sub: str) -> tuple[Any, dict[str, Any]]:
    streams = svc.streams
    head, state = await streams.lookup(name)
    reg = await streams.registry(name, state.registry_key)
    segments = await streams.segments(head)
    plan = IndexPlan.from_registry(reg)
    catalogue = None
    if plan is not None:
        cat = svc.index_catalogue
        catalogue = await svc.engine.run_io(cat.get, head.topic, head.epoch)
    gen = plan.generation if plan is not None else None
    now = streams.clock()
    if sub == "_details":
        counts = getattr(svc.engine.blobs, "counts", None)
        requests = counts.of(head.topic) if counts is not None else None
        return head, inspect.details(head, state, reg, segments, now, catalogue, gen, requests)
    return head, inspect.index_status(head, state, reg, segments, now, catalogue, gen)


def _wait_ms(request: Request) -> int | None:
    """The long-poll wait (None: not a long-poll)."""
    live = _one(request, "live")
    if live is None or live == "false":
        return None
    if live not in ("true", "long-poll"):
        raise InvalidRequest("live must be true or long-poll here")
    timeout, timeout_ms = _one(request, "timeout"), _one(request, "timeout_ms")
    if timeout is not None and timeout_ms is not None:
        raise InvalidRequest("give at most one of timeout and timeout_ms")
    wait = DETAILS_DEFAULT_WAIT_MS
    if timeout is not None:
        try:
            wait = parse_timeout_ms(timeout)
        except WireError as exc:
            raise InvalidRequest(str(exc)) from None
    elif timeout_ms is not None:
        if not (timeout_ms.isascii() and timeout_ms.isdigit()) or len(timeout_ms) > 9:
            raise InvalidRequest("timeout_ms must be a non-negative integer")
        wait = int(timeout_ms)
    return min(wait, DETAILS_WAIT_CAP_MS)


async def _conditional(request: Request, svc: Services, name: str, sub: str) -> Response:
    """_details and _index_status: ETag, If-None-Match (304) and the conditional long-poll."""

    wait = _wait_ms(request)
    inm = request.headers.get("if-none-match")
    head, body = await capped(_describe(svc, name, sub))
    tag = inspect.etag(head, body)
    if wait is not None and etag_matches(inm, tag):
        deadline = time.monotonic() + wait / 1000

        async def poll() -> None:
            nonlocal head, body, tag
            while etag_matches(inm, tag):
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                # Appends and schema/profile changes wake the wait (an append moves the
                # ETag even where the body does not show it: inspect.etag covers the
                # stream's position); seals and index progress are caught at the next poll
                # (at most 1 s later).
                moved = await svc.streams.wait(head, min(left, 1.0))
                if moved is not None:
                    head = moved[0]
                head, body = await _describe(svc, name, sub)
                tag = inspect.etag(head, body)

        await capped(poll())
    headers = {"ETag": tag, "Cache-Control": "no-cache"}
    if etag_matches(inm, tag):
        return Response(status_code=304, headers=headers)
    return _json(body, 200, headers)


# --------------------------------------------------------------------------- server
def server_details(svc: Services) -> dict[str, Any]:
    s = svc.settings
    cache_bytes = svc.streams.engine.cache.bytes
    mem_mb = os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE")
    mem = inspect.mem(_counts(svc), cache_bytes, s.frame_cache_bytes)
    return {
        "auto_tune": {
            "enabled": False,
            "requested_memory_mb": None,
            "preset_mb": None,
            "effective_memory_limit_mb": int(mem_mb) if mem_mb and mem_mb.isdigit() else None,
        },
        "configured_limits": {
            "caches": {"frame_cache_bytes": s.frame_cache_bytes, "registry_cache_entries": 256},
            "concurrency": {
                "max_inflight_per_key": s.caps.max_inflight_per_key,
                "max_sse_connections": s.caps.max_sse_connections,
                "max_sse_connections_per_key": s.caps.max_sse_connections_per_key,
            },
            "ingest": {
                "group_commit_max_records": s.group_commit_max_records,
                "max_batch_records": s.limits.max_batch_records,
                "max_record_bytes": s.limits.max_record_bytes,
                "max_body_bytes": s.limits.max_body_bytes,
                "max_total_bytes": s.caps.max_total_bytes,
            },
            "segmenting": {
                "seal_records": s.tiering.seal_records,
                "seal_bytes": s.tiering.seal_bytes,
                "seal_age_ms": s.tiering.seal_age_ms,
                "block_bytes": s.tiering.block_bytes,
                "upkeep_interval_ms": s.tiering.interval_ms,
            },
            "timeouts": {
                "resolver_ms": 5000,
                "append_ms": 3000,
                "search_ms": scan.TIMEOUT_CAP_MS,
                "object_store_read_ms": s.aws_read_timeout_ms,
                "object_store_max_attempts": s.aws_max_attempts,
            },
            "memory_pressure_threshold_bytes": None,
        },
        "runtime": {
            "memory": {
                "pressure": None,
                "process": mem["process"],
                "process_breakdown": mem["process_breakdown"],
                "sqlite": None,
                "gc": None,
                "subsystems": {**mem["runtime_bytes"], "counts": mem["runtime_counts"]},
                "totals": mem["runtime_totals"],
                "high_water": mem["high_water"],
            },
            "ingest_queue": None,
            "local_backlog": None,
            "pending_uploads": None,
            "concurrency": None,
            "top_streams": [],
        },
    }


def _counts(svc: Services) -> dict[str, int]:
    streams = svc.streams
    return {
        "cached_schema_registries": len(getattr(streams, "_registries", ())),
        "known_stream_confs": len(getattr(streams, "_conf", ())),
    }


def server_mem(svc: Services) -> dict[str, Any]:
    return inspect.mem(_counts(svc), svc.streams.engine.cache.bytes, svc.settings.frame_cache_bytes)
