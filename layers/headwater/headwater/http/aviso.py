"""HTTP plumbing every /api/v1 (aviso-compatible) response shares: the request id, aviso's
error bodies, and authorization mapped onto Headwater's API keys.

Request id. aviso gives every request a fresh UUID (tracing-actix-web), answers it in the
`X-Request-ID` header and repeats it in every error body and in the first SSE frame. Headwater
does the same, and also adopts an incoming `X-Request-ID` that is a UUID (lower-cased), so a
proxy or client can correlate its own id; anything else is ignored and a fresh UUID is used.

Errors. An `AvisoError` answers with `body(request_id)` exactly; any other error on these
paths (storage, caps, an unknown route) answers in the same shape:
`{code: <UPPER_CASE>, error: <lower_case>, message, request_id}`.

Authorization (aviso's rules, with API keys for aviso's users and an `admin` scope for its
admin roles; only when keys are configured — without keys everything is open, as aviso with
auth disabled):
- `/api/v1/schema*` never needs a key.
- `/api/v1/admin/*` needs a key with the `admin` scope: 401 without a usable bearer, 403
  without the scope.
- notify/watch/replay: a bearer that does not authenticate is 401 on any event type (aviso
  rejects bad credentials before routing); a malformed Authorization header counts as none.
  Event types whose schema says `auth: {required: true}` then need a key: reads (watch,
  replay) with the `read` scope if the schema lists `read_roles`, writes (notify) with the
  `write` scope if it lists `write_roles`, else only `admin` keys may write (aviso: writes
  without `write_roles` are for admins). An `admin` key may always read and write. A key
  restricted to name prefixes may only use event types that match them, on the admin routes
  too (and only an unrestricted admin key may wipe every stream).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from typing import Any

from starlette.requests import HTTPConnection, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from headwater import jsoncodec
from headwater.access.keys import ANONYMOUS, KeyStore, Principal
from headwater.errors import HeadwaterError, Unauthorized
from headwater.notify.errors import AvisoError
from headwater.notify.schema import EventSchema

PREFIX = "/api/v1"
HEADER = "x-request-id"
SCOPE_KEY = "headwater.request_id"
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def is_api_v1(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


def request_id(conn: HTTPConnection) -> str:
    """This request's id (set by RequestIdMiddleware; a fresh one if it did not run)."""
    rid = conn.scope.get(SCOPE_KEY)
    if not isinstance(rid, str):
        rid = str(uuid.uuid4())
        conn.scope[SCOPE_KEY] = rid
    return rid


def _incoming(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == HEADER.encode():
            text = value.decode("latin-1").strip().lower()
            return text if _UUID.fullmatch(text) else None
    return None


class RequestIdMiddleware:
    """Outermost on /api/v1 paths: fixes the request id before anything runs and puts it on
    the response's `X-Request-ID`, whatever produced the response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_api_v1(scope["path"]):
            await self.app(scope, receive, send)
            return
        rid = _incoming(scope) or str(uuid.uuid4())
        scope[SCOPE_KEY] = rid
        header = (HEADER.encode(), rid.encode())

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = dict(message)
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() != header[0]]
                message["headers"] = [*kept, header]
            await send(message)

        await self.app(scope, receive, send_with_id)


# --- responses ---------------------------------------------------------------------------------
def json_bytes(body: Mapping[str, Any]) -> bytes:
    return jsoncodec.dumps(dict(body))


def aviso_json(body: Mapping[str, Any], status: int = 200) -> Response:
    return Response(json_bytes(body), status, media_type="application/json")


def error_body(exc: HeadwaterError, rid: str) -> dict[str, Any]:
    if isinstance(exc, AvisoError):
        return exc.body(rid)
    code = exc.code if exc.code != "internal" else "internal_error"
    return {"code": code.upper(), "error": code, "message": exc.message, "request_id": rid}


def error_response(request: Request, exc: HeadwaterError, headers: dict[str, str]) -> Response:
    body = json_bytes(error_body(exc, request_id(request)))
    return Response(body, exc.status, headers=headers, media_type="application/json")


class AuthFailure(AvisoError):
    """aviso's 401/403 body: `{code, error, message, request_id}`."""

    def __init__(self, status: int, message: str) -> None:
        code = "UNAUTHORIZED" if status == 401 else "FORBIDDEN"
        super().__init__(
            code=code, error=code.lower(), message=message, details=None, status=status
        )
        if status == 401:
            self.headers = {"WWW-Authenticate": "Bearer"}


# --- authorization -----------------------------------------------------------------------------
def _bearer(request: Request) -> tuple[str | None, str | None]:
    """(token, None), or (None, why the header is unusable), or (None, None) without one."""
    raw = request.headers.get("authorization")
    if raw is None:
        return None, None
    scheme, _, token = raw.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None, "Authorization header must use Bearer token"
    if not token.strip():
        return None, "Authorization header cannot contain an empty token"
    return token.strip(), None


def _authenticate(keys: KeyStore, token: str) -> Principal:
    try:
        return keys.authenticate(f"Bearer {token}")
    except Unauthorized:
        raise AuthFailure(401, "Invalid or expired token") from None


def require_admin(request: Request, keys: KeyStore) -> Principal:
    """The admin key behind the bearer (ANONYMOUS without keys configured). A key limited to
    name prefixes is an admin of those streams only: see `require_admin_of`."""
    if not keys.enabled:
        return ANONYMOUS
    token, malformed = _bearer(request)
    if token is None:
        raise AuthFailure(401, malformed or "Authorization header is required")
    principal = _authenticate(keys, token)
    if "admin" not in principal.scopes:
        raise AuthFailure(403, "User does not have required administrative role")
    return principal


def require_admin_of(principal: Principal, stream: str, event_type: str | None) -> None:
    """A prefix-limited admin key administers only the event types its allowlist covers:
    `event_type` is what `stream` names (None: nothing, then the name itself is judged, so
    a 404 never tells such a key about a stream outside its allowlist)."""
    if not principal.allows_name(event_type if event_type is not None else stream):
        raise AuthFailure(403, "User does not have access to this stream")


def require_admin_of_all(principal: Principal) -> None:
    """An action on every stream (wipe all) needs an admin key not limited to prefixes."""
    if principal.restricted:
        raise AuthFailure(403, "Only an administrator of every stream can wipe all data")


def caller(request: Request, keys: KeyStore) -> Principal | None:
    """The key behind a usable bearer (ANONYMOUS without keys configured), None without one;
    a bearer that does not authenticate is 401 here, before the body is read."""
    if not keys.enabled:
        return ANONYMOUS
    token, _malformed = _bearer(request)
    return None if token is None else _authenticate(keys, token)


def require_stream_access(
    principal: Principal | None, schema: EventSchema, *, write: bool, keys: KeyStore
) -> None:
    auth = schema.auth
    if not keys.enabled or not auth or not auth.get("required"):
        return
    if principal is None:
        raise AuthFailure(401, "Authentication is required for this stream")
    scopes = principal.scopes
    admin = "admin" in scopes
    if not principal.allows_name(schema.event_type):
        raise AuthFailure(403, "User does not have access to this stream")
    if not write:
        if auth.get("read_roles") is not None and not admin and "read" not in scopes:
            raise AuthFailure(403, "User does not have required read role for this stream")
    elif auth.get("write_roles") is not None:
        if not admin and "write" not in scopes:
            raise AuthFailure(403, "User does not have required write role for this stream")
    elif not admin:
        raise AuthFailure(403, "Only administrators can write to this stream")
