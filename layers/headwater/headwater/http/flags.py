"""/api/v1 feature-flag manifests (docs/flags.md; spec: flag-closure-events.txt).

    PUT  /api/v1/tenants/{tenant}/namespaces/{slug}/manifest           publish a version
    GET  /api/v1/tenants/{tenant}/namespaces/{slug}/manifest           {version, files}
    GET  /api/v1/tenants/{tenant}/namespaces/{slug}/manifest/versions  {versions: [...]}
    GET  /api/v1/tenants/{tenant}/namespaces/{slug}/closure            closure tar.gz
    GET  /api/v1/events                                                SSE closure deltas

Every error is `{"error": {"code", "message", "details"?}}` (414 has no body); the
rendering is `error_response` in `headwater.http.responses`, chosen by `is_flag_path`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import AsyncGenerator
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from headwater import jsoncodec
from headwater.access.limits import Slot
from headwater.flags.errors import QueryTooLong, RateLimitExceeded, unknown_namespace
from headwater.flags.live import EventStream
from headwater.flags.manifest import DEFAULT_LIMITS as TREE_LIMITS
from headwater.flags.service import version_json
from headwater.flags.snapshot import etag_matches
from headwater.flags.subscription import DEFAULT_LIMITS, parse_events_request
from headwater.http.bodies import read_body
from headwater.http.common import services
from headwater.http.flag_errors import EVENTS_PATH
from headwater.http.lean_route import LeanRoute
from headwater.http.openapi_decl import (
    STATUS_TEXT,
    body,
    doc,
    empty,
    header,
    model,
    query,
    raw,
    sse,
)
from headwater.http.sse import bare_event_stream
from headwater.services import Services

log = logging.getLogger(__name__)
router = APIRouter(route_class=LeanRoute)

NS = "/api/v1/tenants/{tenant}/namespaces/{slug}"
SSE_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no", "Connection": "keep-alive"}
LEASE_MS = 60_000
RENEW_S = 20.0
ETAG = {"ETag": '"v<version>" (the closure: "v<version>-<closure_hash>")'}


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(jsoncodec.dumps(body), status, headers=headers, media_type="application/json")


# --- manifests -----------------------------------------------------------------------------
@router.put(
    NS + "/manifest",
    **doc(
        "flags",
        "Publish a manifest version",
        request=body(
            "ManifestFiles",
            description="The tree: a tar.gz (application/gzip, application/x-gzip, "
            "application/x-tar) or JSON {files}",
            more={"application/gzip": {"schema": {"type": "string", "format": "binary"}}},
        ),
        ok={
            200: model("Published", "Identical to the current version", ETAG),
            201: model("Published", "A new version", ETAG),
        },
        errors=(400, 401, 403, 404, 413, 415, 422, 429, 503),
    ),
)
async def publish(request: Request, tenant: str, slug: str) -> Response:
    svc = services(request)
    flags = svc.flags
    principal = flags.principal(request.headers.get("authorization"))
    flags.require_write(principal, tenant, slug)
    body = await read_body(request, TREE_LIMITS.max_archive_bytes)
    result = await flags.publish(
        principal, tenant, slug, request.headers.get("content-type", ""), body
    )
    payload = {
        "version": result.version,
        "prev_version": result.prev_version,
        "closure_hash": result.closure_hash,
    }
    return _json(payload, 201 if result.created else 200, {"ETag": f'"v{result.version}"'})


@router.get(
    NS + "/manifest",
    **doc(
        "flags",
        "The current manifest",
        params=[header("If-None-Match", {"type": "string"}, "A previous ETag")],
        ok={200: model("Manifest", headers=ETAG), 304: empty(STATUS_TEXT[304], ETAG)},
        errors=(401, 403, 404, 429, 503),
    ),
)
async def read_manifest(request: Request, tenant: str, slug: str) -> Response:
    flags = services(request).flags
    principal = flags.principal(request.headers.get("authorization"))
    version = await flags.current_version(principal, tenant, slug)
    etag = f'"v{version}"'
    if etag_matches(request.headers.get("if-none-match"), etag):
        return Response(status_code=304, headers={"ETag": etag})
    body = await flags.manifest(principal, tenant, slug)
    return _json(
        {"version": body.version, "files": body.files}, 200, {"ETag": f'"v{body.version}"'}
    )


@router.get(
    NS + "/manifest/versions",
    **doc(
        "flags",
        "Every version of the manifest",
        ok={200: model("ManifestVersions")},
        errors=(401, 403, 404, 429, 503),
    ),
)
async def list_versions(request: Request, tenant: str, slug: str) -> Response:
    flags = services(request).flags
    principal = flags.principal(request.headers.get("authorization"))
    versions = await flags.versions(principal, tenant, slug)
    return _json({"versions": [version_json(v) for v in versions]})


@router.get(
    NS + "/closure",
    **doc(
        "flags",
        "A closure snapshot (tar.gz)",
        params=[
            query("version", {"type": "string", "pattern": "^[1-9][0-9]{0,18}$"}, "Version"),
            query("subscription", {"type": "string"}, "URL-safe base64 of '*' or 'a,b'"),
            query("token", {"type": "string"}, "A signed snapshot token (instead of a bearer)"),
            header("If-None-Match", {"type": "string"}, "A previous ETag"),
        ],
        ok={
            200: raw("application/x-tar", "The closure's files", {"format": "binary"}),
            304: empty(STATUS_TEXT[304], ETAG),
        },
        errors=(400, 401, 403, 404, 410, 429, 503),
    ),
)
async def closure(request: Request, tenant: str, slug: str) -> Response:
    flags = services(request).flags
    result = await flags.closure(
        tenant,
        slug,
        dict(request.query_params),
        request.headers.get("authorization"),
        request.headers.get("if-none-match"),
    )
    headers = {"ETag": result.etag, "Cache-Control": "private, max-age=60"}
    if result.snapshot is None:
        return Response(status_code=304, headers=headers)
    return Response(result.snapshot.body, 200, headers=headers, media_type="application/x-tar")


# --- events --------------------------------------------------------------------------------
def _base_url(request: Request, svc: Services) -> str:
    if svc.settings.flags.base_url:
        return svc.settings.flags.base_url
    proto = request.headers.get("x-forwarded-proto", request.url.scheme).split(",")[0].strip()
    host = request.headers.get("host") or request.url.netloc
    return f"{proto}://{host}"


@router.get(
    EVENTS_PATH,
    **doc(
        "flags",
        "Closure deltas (SSE)",
        params=[
            query(
                "ns",
                {"type": "array", "items": {"type": "string"}},
                "Namespaces: `<slug>[:<flags>]` (`<tenant>/<slug>` for a superadmin)",
                required=True,
            ),
            query("since", {"type": "array", "items": {"type": "string"}}, "`<ns>:<version>`"),
            header("Last-Event-ID", {"type": "string"}, "Resume after this event"),
        ],
        ok={200: sse("`version` and `resync` events, `:keepalive` comments")},
        errors=(400, 401, 403, 414, 429, 503),
    ),
)
async def events(request: Request) -> Response:
    raw_query = request.scope.get("query_string", b"").decode("latin-1")
    if len(raw_query.encode("latin-1")) > DEFAULT_LIMITS.max_query_bytes:
        raise QueryTooLong(f"query string is over {DEFAULT_LIMITS.max_query_bytes} bytes")
    svc = services(request)
    flags = svc.flags
    principal = flags.principal(request.headers.get("authorization"))
    sub = parse_events_request(raw_query, principal, request.headers.get("last-event-id"))
    heads = []
    for ns in sub.namespaces:
        head = await flags.store.head(ns.tenant, ns.slug)
        if head is None:
            raise unknown_namespace(ns.label)
        heads.append(head)
    cfg = svc.settings.flags
    owner = secrets.token_hex(8)
    engine = svc.engine
    slot_no = await engine.run_io(
        flags.slots.acquire,
        principal.id,
        cfg.max_connections_per_token,
        owner,
        engine.clock(),
        LEASE_MS,
    )
    if slot_no is None:
        raise RateLimitExceeded(
            f"this token already holds {cfg.max_connections_per_token} event connections",
            details={"max_connections": cfg.max_connections_per_token},
            headers={"Retry-After": "5"},
        )

    def free() -> None:
        engine.submit_io(flags.slots.release, principal.id, slot_no, owner)

    # One Slot for the response and the frames below: when the app is cancelled rather than
    # told of a disconnect (an ASGI cancel scope), the response's own cleanup never reaches
    # its release, but the cancellation still runs the frames' `finally`.
    slot = Slot(free)

    stream = EventStream(
        store=flags.store,
        hub=flags.hub,
        signer=flags.signer,
        policy=flags.policy,
        principal=principal,
        namespaces=sub.namespaces,
        heads=heads,
        base_url=_base_url(request, svc),
        keepalive_s=cfg.keepalive_sec,
        max_duration_s=cfg.max_connection_sec,
        shutdown=flags.shutdown,
        clock_ms=engine.clock,
    )

    async def frames() -> AsyncGenerator[bytes, None]:
        async def renew() -> None:
            while True:
                await asyncio.sleep(RENEW_S)
                held = await engine.run_io(
                    flags.slots.renew, principal.id, slot_no, owner, engine.clock(), LEASE_MS
                )
                if not held:
                    log.warning("event connection lost its slot; closing it")
                    return

        renewer = asyncio.get_running_loop().create_task(renew())
        try:
            async for frame in stream.frames():
                if renewer.done():
                    return
                yield frame
        finally:
            slot.release()  # before any await: nothing may skip it
            renewer.cancel()
            with contextlib.suppress(BaseException):
                await renewer

    return bare_event_stream(
        frames(),
        slot,
        topics=[ns.label for ns in sub.namespaces],
        caps=svc.settings.caps,
        headers=SSE_HEADERS,
    )
