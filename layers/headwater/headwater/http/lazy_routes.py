"""Routes of one surface imported on the first request under its prefixes (docs/operations.md
"Cold start"). A Lambda environment serves what its requests use: one that only ever sees
/v1 never imports the notifications, flags or dashboard code, and INIT (the cold start every
environment pays) builds only the app, its middleware and the probes.

A `LazyRoutes` entry stands in the app's route list where the surface's routes go. The first
request whose path starts with one of its prefixes imports the modules, includes their
routers and puts the routes where the entry stood (so the order of matching is the order the
app declared), then dispatches the request again through the now complete list. Anything
that reads the whole route list (the OpenAPI document, the route-walking tests) calls
`load_all(app)` first."""

from __future__ import annotations

import importlib
import threading
from typing import Any

from fastapi import FastAPI
from starlette.routing import BaseRoute, Match, NoMatchFound
from starlette.types import Receive, Scope, Send

_lock = threading.Lock()


class LazyRoutes(BaseRoute):
    def __init__(self, app: FastAPI, prefixes: tuple[str, ...], modules: tuple[str, ...]) -> None:
        self.app = app
        self.prefixes = prefixes
        self.modules = modules

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] in ("http", "websocket") and scope["path"].startswith(self.prefixes):
            return Match.FULL, {}
        return Match.NONE, {}

    def url_path_for(self, name: str, /, **path_params: Any) -> Any:
        raise NoMatchFound(name, path_params)

    def load(self) -> None:
        """Import the modules and put their routes where this entry stands (once)."""
        with _lock:
            routes = self.app.router.routes
            if self not in routes:
                return  # another request loaded them
            at = routes.index(self)
            before = len(routes)
            for name in self.modules:
                self.app.include_router(importlib.import_module(name).router)
            added = routes[before:]
            del routes[before:]
            routes[at : at + 1] = added

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.load()
        await self.app.router.app(scope, receive, send)


def on_first_use(app: FastAPI, prefixes: tuple[str, ...], *modules: str) -> None:
    app.router.routes.append(LazyRoutes(app, prefixes, modules))


def load_all(app: FastAPI) -> None:
    for route in list(app.router.routes):
        if isinstance(route, LazyRoutes):
            route.load()
