"""What every HTTP surface shares: the request's Services and the caller's Principal checked
for scopes (and a topic/stream name against the key's prefixes). Neutral ground: surfaces
import this, never each other (checked by the import contracts in .importlinter)."""

from __future__ import annotations

from starlette.requests import Request

from headwater.access.keys import Principal
from headwater.services import LazyServices, Services


def services(request: Request) -> Services:
    lazy: LazyServices = request.app.state.services
    return lazy.get()


def authorize(request: Request, svc: Services, *scopes: str, name: str | None = None) -> Principal:
    principal = svc.keys.authenticate(request.headers.get("authorization"))
    principal.require(*scopes)
    if name is not None:
        principal.require_name(name)
    return principal
