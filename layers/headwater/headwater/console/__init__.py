"""The web console (docs/console.md): a static single-page app (`static/`: HTML, CSS and
plain ES modules, no build step, nothing loaded from another origin) served at /console.

The page itself is public, like any static asset; it holds no data and no secret. Every
call it makes goes to this same origin with the credentials the user typed into it (the
API key as `Authorization: Bearer`, the flag token, the dashboard user id), so the API's
own authorization applies exactly as for any other client.

`ConsoleRoute` is one route for `/console` and everything under it. It is not an API route
(no methods are declared, nothing under it takes a body or a credential) and, unlike a
`Mount`, it serves the bare `/console` itself instead of redirecting it to `/console/` with
an absolute URL built from the request (the wrong scheme behind a proxy that terminates
TLS). The page finds its assets through `<base href>`, written per request with the ASGI
`root_path`, so it works under a path prefix too."""

from __future__ import annotations

import hashlib
import html
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.datastructures import URLPath
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, NoMatchFound
from starlette.types import Receive, Scope, Send

from headwater.errors import MethodNotAllowed, NotFound

PREFIX = "/console"
STATIC = Path(__file__).resolve().parent / "static"
INDEX = "index.html"
BASE_TAG = '<base href="/console/">'  # in static/index.html; rewritten with the root_path

_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}\.(?:html|js|css|svg)")
_TYPES = {
    "html": "text/html; charset=utf-8",
    "js": "text/javascript; charset=utf-8",
    "css": "text/css; charset=utf-8",
    "svg": "image/svg+xml",
}
# Everything from this origin, nothing inline, nothing from anywhere else (no CDN, no fonts).
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; manifest-src 'self'; base-uri 'self'; "
    "form-action 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Cache-Control": "no-cache",  # revalidate (ETag): a new deploy is picked up at once
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}


@dataclass(frozen=True, slots=True)
class Asset:
    body: bytes
    media_type: str
    etag: str


_cache: dict[str, tuple[int, Asset]] = {}


def asset(name: str) -> Asset | None:
    """A file of `static/` by its bare name (no folders: nothing else is reachable). Kept in
    memory while the file's mtime stays the same (an edited file is served at once)."""
    if not _NAME.fullmatch(name):
        return None
    path = STATIC / name
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        return None
    cached = _cache.get(name)
    if cached is not None and cached[0] == mtime:
        return cached[1]
    if not path.is_file():
        return None
    body = path.read_bytes()
    digest = hashlib.sha256(body).hexdigest()[:20]
    # weak: the GZip middleware may re-encode the bytes on the way out
    found = Asset(body, _TYPES[name.rsplit(".", 1)[1]], f'W/"{digest}"')
    _cache[name] = (mtime, found)
    return found


def route_path(scope: Scope) -> str:
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


OPEN_META = b'<meta name="headwater-auth" content="none">'


def _index(found: Asset, root_path: str, open_server: bool = False) -> Asset:
    """The page for this mount point (its <base>), and on a server without API keys a meta
    tag that says so: the console then goes straight in instead of asking for a key."""
    if not root_path and not open_server:
        return found
    body = found.body
    if root_path:
        base = f'<base href="{html.escape(root_path.rstrip("/") + PREFIX + "/", quote=True)}">'
        body = body.replace(BASE_TAG.encode(), base.encode(), 1)
    if open_server:
        body = body.replace(b"</head>", OPEN_META + b"\n</head>", 1)
    digest = hashlib.sha256(body).hexdigest()[:20]
    return Asset(body, found.media_type, f'W/"{digest}"')


def _not_modified(if_none_match: str | None, etag: str) -> bool:
    if not if_none_match:
        return False
    tags = {t.strip() for t in if_none_match.split(",")}
    return "*" in tags or etag in tags or etag.removeprefix("W/") in tags


class ConsoleRoute(BaseRoute):
    """GET/HEAD /console, /console/ (the page) and /console/<file> (its assets)."""

    path = PREFIX
    name = "console"

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] != "http":
            return Match.NONE, {}
        path = route_path(scope)
        if path == PREFIX or path.startswith(PREFIX + "/"):
            return Match.FULL, {}
        return Match.NONE, {}

    def url_path_for(self, name: str, /, **path_params: Any) -> URLPath:
        if name != self.name or path_params:
            raise NoMatchFound(name, path_params)
        return URLPath(PREFIX + "/", protocol="http")

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        if request.method not in ("GET", "HEAD"):
            raise MethodNotAllowed(
                f"method {request.method} not allowed on {request.url.path}",
                headers={"Allow": "GET, HEAD"},
            )
        rest = route_path(scope)[len(PREFIX) :].lstrip("/")
        found = asset(rest or INDEX)
        if found is None:
            raise NotFound(f"no console file {rest!r}", detail={"path": request.url.path})
        if rest in ("", INDEX):
            lazy = getattr(getattr(scope.get("app"), "state", None), "services", None)
            found = _index(
                found, scope.get("root_path", ""), bool(getattr(lazy, "open_without_keys", False))
            )
        headers = {**HEADERS, "ETag": found.etag}
        if _not_modified(request.headers.get("if-none-match"), found.etag):
            response = Response(status_code=304, headers=headers)
        else:
            body = b"" if request.method == "HEAD" else found.body
            response = Response(body, 200, headers=headers, media_type=found.media_type)
            if request.method == "HEAD":
                response.headers["Content-Length"] = str(len(found.body))
        await response(scope, receive, send)
