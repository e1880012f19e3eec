"""/v1: the Durable Streams protocol (docs/specs/durable-streams-protocol.txt) over the
log engine. Stream logic lives in headwater.durable; the /v1 modules are the HTTP mapping.
This one declares the routes and dispatches a stream path by method and subresource:
- v1_writes.py   PUT (create, fork) and POST (append, close)
- v1_reads.py    GET (catch-up, long-poll, SSE) and HEAD
- v1_search.py   _search, _aggregate, _routing_keys, _index_status, _details
- v1_touch.py    the state-protocol profile's touch/* routes
and itself answers DELETE, the _schema and _profile subresources, the stream list and the
server views. They share helpers through v1_common.py only."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from headwater import jsoncodec
from headwater.access.keys import Principal
from headwater.durable import profiles
from headwater.durable.service import descriptor
from headwater.durable.state import StreamState
from headwater.errors import HeadwaterError
from headwater.http import v1_reads, v1_writes
from headwater.http.common import authorize, services
from headwater.http.lean_route import LeanRoute
from headwater.http.openapi_decl import doc, empty, header, model, query
from headwater.http.v1_common import allow, bad, capped, one_param, read_append_body, stream_name
from headwater.services import Services

router = APIRouter(route_class=LeanRoute)

SUBRESOURCES = (
    "_schema",
    "_profile",
    "_search",
    "_aggregate",
    "_routing_keys",
    "_index_status",
    "_details",
)


def _split(path: str) -> tuple[str, str | None, str | None]:
    """(stream name, subresource, routing key) of the part of the path after /v1/stream/."""
    for route in ("touch/meta", "touch/wait", "touch/templates/activate"):
        if path.endswith("/" + route):
            return stream_name(path[: -len(route) - 1]), route, None
    if "/pk/" in path:
        name, _, key = path.rpartition("/pk/")
        return stream_name(name), None, key
    head, _, last = path.rpartition("/")
    if head and last in SUBRESOURCES:
        return stream_name(head), last, None
    return stream_name(path), None, None


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
            from headwater.http import v1_touch  # on first use: most /v1 requests never query

            return await v1_touch.route(request, svc, principal, name, sub)
        from headwater.http import v1_search  # on first use: most /v1 requests never query

        return await v1_search.route(request, svc, principal, name, sub)
    if method == "PUT":
        allow(principal, "write", name)
        return await capped(v1_writes.create(request, svc, principal, name))
    if method == "POST":
        allow(principal, "write", name)
        return await capped(v1_writes.append(request, svc, name))
    if method == "DELETE":
        allow(principal, "delete", name)
        await capped(svc.streams.delete(name))
        return Response(status_code=204)
    allow(principal, "read", name)
    if method == "HEAD":
        return await capped(v1_reads.metadata(svc, name))
    return await v1_reads.read(request, svc, name, key)


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
