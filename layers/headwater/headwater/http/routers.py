"""/v0 routers surface (spec §6): PUT/GET/list/DELETE /v0/routers. Forwarding itself runs
in the engine (RouterEngine); every router call here makes sure this process's forwarder
is running."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from headwater.access.keys import Principal
from headwater.engine import RouterNotFound
from headwater.engine.ports.routers import RouterItem
from headwater.errors import Conflict, InvalidRequest
from headwater.http.bodies import read_json
from headwater.http.common import authorize, services
from headwater.http.lean_route import LeanRoute
from headwater.http.openapi_decl import V0_BODY_ERRORS, V0_ERRORS, body, doc, model, query
from headwater.http.responses import json_response
from headwater.names import ROUTER_NAME_RE, is_valid_topic_name
from headwater.services import Services
from headwater.v0.parse import (
    boolean,
    decode_cursor,
    encode_cursor,
    parse_match,
    query_int,
    require_object,
)

router = APIRouter(route_class=LeanRoute)

GUARANTEES = ("at_least_once", "exactly_once")


def validate_router_name(name: str) -> None:
    if not ROUTER_NAME_RE.fullmatch(name):
        raise InvalidRequest(
            f"invalid router name {name!r}: must match ^[A-Za-z0-9][A-Za-z0-9._:>-]{{0,254}}$",
            detail={"router": name},
        )


def _topic_field(body: dict[str, Any], field: str) -> str:
    value = body.get(field)
    if value is None:
        raise InvalidRequest(f"{field} is required", detail={"field": field})
    if not isinstance(value, str) or not is_valid_topic_name(value):
        raise InvalidRequest(f"{field} must be a valid topic name", detail={"field": field})
    return value


def parse_filter(raw: Any) -> tuple[str, ...] | None:
    try:
        match = parse_match(raw)
    except InvalidRequest as exc:
        raise InvalidRequest(exc.message, detail={"field": "filter"}) from exc
    if match is None:
        return None
    if match.prefix:
        return ("tag", "Glob", match.value + "*")
    return ("tag", "Eq", match.value)


def parse_router(name: str, body: Any) -> RouterItem:
    body = require_object(body)
    source = _topic_field(body, "source")
    dest = _topic_field(body, "dest")
    if source == dest:
        raise InvalidRequest("source and dest must differ", detail={"field": "dest"})
    guarantee = body.get("guarantee", "at_least_once")
    if guarantee not in GUARANTEES:
        raise InvalidRequest(
            'guarantee must be "at_least_once" or "exactly_once"',
            detail={"field": "guarantee"},
        )
    return RouterItem(
        name=name,
        source=source,
        dest=dest,
        preserve_node=boolean(body, "preserve_node", True),
        preserve_tag=boolean(body, "preserve_tag", True),
        create_dest=boolean(body, "create_dest", True),
        filter=parse_filter(body.get("filter")),
        allow_cycle=boolean(body, "allow_cycle", False),
        guarantee=str(guarantee),
    )


def definition_body(item: RouterItem) -> dict[str, Any]:
    return {
        "source": item.source,
        "dest": item.dest,
        "preserve_node": item.preserve_node,
        "preserve_tag": item.preserve_tag,
        "filter": list(item.filter) if item.filter is not None else None,
        "allow_cycle": item.allow_cycle,
        "guarantee": item.guarantee,
    }


async def _as_seen_by(svc: Services, exc: Conflict, principal: Principal) -> Conflict:
    """A router refusal as this key may see it: a fan-in on another tenant's router or a
    cycle through another tenant's topics is said without naming them."""
    if not principal.restricted:
        return exc
    detail = exc.detail or {}
    names = [n for n in detail.get("cycle") or [] if isinstance(n, str)]
    other = detail.get("router")
    if isinstance(other, str):
        names.append(other)
        try:
            found = await svc.routers.get(other)
            names += [found.source, found.dest]
        except RouterNotFound:
            pass
    if all(principal.allows_name(n) for n in names):
        return exc
    kept = {k: v for k, v in detail.items() if k not in ("router", "cycle")}
    what = "a cycle" if exc.code == "router_cycle" else "a second source for dest"
    return Conflict(
        f"router would create {what} through routers or topics outside this key's allowlist",
        detail=kept or None,
        code=exc.code,
    )


@router.put(
    "/v0/routers/{name}",
    **doc(
        "v0-routers",
        "Create or configure a router",
        request=body("RouterRequest"),
        ok={200: model("RouterPut", "Existing router"), 201: model("RouterPut", "Created")},
        errors=(*V0_BODY_ERRORS, 404, 409),
    ),
)
async def put_router(name: str, request: Request) -> Response:
    svc = services(request)
    # admin creates it (spec §0.2); the router then reads `source` and appends to `dest` on
    # this key's behalf, so the key needs read and write too (else an admin+read key could
    # write, and an admin+write key copy what it may not read).
    principal = authorize(request, svc, "admin", "read", "write", name=name)
    validate_router_name(name)
    body = await read_json(request, svc.settings.limits.max_body_bytes)
    item = parse_router(name, body)
    principal.require_names(item.source, item.dest)
    try:
        stored, created = await svc.routers.put(item)
    except Conflict as exc:
        seen = await _as_seen_by(svc, exc, principal)
        if seen is exc:
            raise
        raise seen from None
    return json_response(
        request,
        {"router": name, "created": created, **definition_body(stored)},
        201 if created else 200,
    )


@router.get(
    "/v0/routers/{name}",
    **doc("v0-routers", "A router", ok={200: model("RouterState")}, errors=(*V0_ERRORS, 404)),
)
async def get_router(name: str, request: Request) -> Response:
    svc = services(request)
    principal = authorize(request, svc, "read", name=name)
    validate_router_name(name)
    item = await svc.routers.get(name)
    # As in the listing: a router is visible only when its topics are too.
    principal.require_names(item.source, item.dest)
    return json_response(
        request,
        {"router": name, **definition_body(item), "forwarded_total": item.forwarded_total},
    )


@router.get(
    "/v0/routers",
    **doc(
        "v0-routers",
        "List routers",
        params=[
            query("prefix", {"type": "string"}, "Only names starting with this"),
            query("source", {"type": "string"}, "Only routers reading this topic"),
            query("dest", {"type": "string"}, "Only routers feeding this topic"),
            query("page_size", {"type": "integer", "minimum": 1}, "Default 100, max 1000"),
            query("cursor", {"type": "string"}, "next_cursor of the previous page"),
        ],
        ok={200: model("RouterList")},
        errors=V0_ERRORS,
    ),
)
async def list_routers(request: Request) -> Response:
    svc = services(request)
    principal = authorize(request, svc, "read")
    q = request.query_params
    prefix = q.get("prefix", "")
    source = q.get("source")
    dest = q.get("dest")
    page_size = query_int(q, "page_size", 100, 1, 1000)
    after = decode_cursor(q.get("cursor"))
    picked: list[RouterItem] = []
    more = False
    for r in await svc.routers.list_all():  # ordered by name
        if after is not None and r.name <= after:
            continue
        if not r.name.startswith(prefix):
            continue
        if (source is not None and r.source != source) or (dest is not None and r.dest != dest):
            continue
        if not principal.allows_names(r.name, r.source, r.dest):
            continue
        if len(picked) == page_size:
            more = True
            break
        picked.append(r)
    body: dict[str, Any] = {
        "routers": [
            {
                "router": r.name,
                "source": r.source,
                "dest": r.dest,
                "guarantee": r.guarantee,
                "forwarded_total": r.forwarded_total,
            }
            for r in picked
        ]
    }
    if more:
        body["next_cursor"] = encode_cursor(picked[-1].name)
    return json_response(request, body)


@router.delete(
    "/v0/routers/{name}",
    **doc("v0-routers", "Delete a router", ok={200: model("RouterDeleted")}, errors=V0_ERRORS),
)
async def delete_router(name: str, request: Request) -> Response:
    svc = services(request)
    principal = authorize(request, svc, "delete", name=name)
    validate_router_name(name)
    if principal.restricted:
        # A router in the key's namespace that moves another tenant's data is not the key's
        # to remove (nor is its existence news to it: 403, as on GET).
        try:
            item = await svc.routers.get(name)
        except RouterNotFound:
            item = None
        if item is not None:
            principal.require_names(item.source, item.dest)
    deleted = await svc.routers.delete(name)
    return json_response(request, {"router": name, "deleted": deleted})


__all__ = ["router"]
