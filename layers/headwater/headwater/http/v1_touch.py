"""/v1/stream/{name}/touch/*: the state-protocol profile's live invalidation routes (reference
``prisma/streams`` ``src/profiles/stateProtocol/routes.ts``). They exist only on a stream whose
profile is ``state-protocol`` with ``touch.enabled`` (404 otherwise). The logic is in
headwater.durable.touch; this module is the HTTP mapping."""

from __future__ import annotations

import math
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from headwater import jsoncodec
from headwater.access.keys import Principal
from headwater.durable import touch
from headwater.errors import InvalidRequest, NotFound
from headwater.http.v1_common import (
    LONG_POLL_CAP_MS,
    RESOLVER_TIMEOUT_S,
    allow,
    capped,
    one_param,
    read_append_body,
)
from headwater.services import Services

ROUTES = ("touch/meta", "touch/wait", "touch/templates/activate")
_METHODS = {"touch/meta": "GET", "touch/wait": "POST", "touch/templates/activate": "POST"}


async def route(
    request: Request, svc: Services, principal: Principal, name: str, sub: str
) -> Response:
    # Activation changes the stream's templates; meta and wait only read (a wait's heartbeat
    # renews templates the caller already uses; declaring new ones needs write).
    allow(principal, "write" if sub == "touch/templates/activate" else "read", name)
    if sub not in _METHODS:
        raise NotFound(f"{sub} is not a touch route")
    live = await capped(touch.open_stream(svc.streams, name))
    if request.method != _METHODS[sub]:
        raise InvalidRequest("unsupported method")
    if sub == "touch/meta":
        return await _meta(request, svc, live)
    if sub == "touch/wait":
        return await _wait(request, svc, principal, name, live)
    return await _activate(request, svc, name, live)


def _json(body: dict[str, Any]) -> Response:
    return Response(
        jsoncodec.dumps(body),
        200,
        media_type="application/json",
        headers={"Cache-Control": "no-store"},
    )


async def _json_body(request: Request, label: str) -> object:
    raw = await read_append_body(request)
    try:
        return jsoncodec.loads(raw)
    except ValueError:
        raise InvalidRequest(f"{label} body must be valid JSON") from None


async def _meta(request: Request, svc: Services, live: touch.Live) -> Response:
    """``settle=flush`` answers at once: nothing is buffered, every cursor is settled."""
    settle = one_param(request, "settle")
    if settle is not None and settle != "flush":
        raise InvalidRequest("meta.settle must be 'flush' when provided")
    timeout = one_param(request, "timeoutMs")
    if timeout is not None and timeout.strip():
        try:
            ok = math.isfinite(float(timeout))
        except ValueError:
            ok = False
        if not ok:
            raise InvalidRequest("meta.timeoutMs must be a number (ms)")
    return _json(touch.meta(live, svc.streams.clock()))


async def _wait(
    request: Request, svc: Services, principal: Principal, name: str, live: touch.Live
) -> Response:
    req = touch.parse_wait(await _json_body(request, "wait"), live.cfg)
    if req.declare:
        allow(principal, "write", name)
    body = await capped(
        touch.wait(svc.streams, name, live, req, cap_ms=LONG_POLL_CAP_MS), RESOLVER_TIMEOUT_S
    )
    return _json(body)


async def _activate(request: Request, svc: Services, name: str, live: touch.Live) -> Response:
    body = await _json_body(request, "activate")
    raw = body.get("templates") if isinstance(body, dict) else None
    decls = touch.parse_decls(raw, "activate.templates")
    default = (live.cfg.get("templates") or {}).get("defaultInactivityTtlMs", 3_600_000)
    given = body.get("inactivityTtlMs", touch.ABSENT) if isinstance(body, dict) else touch.ABSENT
    ttl = touch.parse_ttl(given, default, "activate.inactivityTtlMs")
    return _json(await capped(touch.activate(svc.streams, name, decls, ttl, live)))
