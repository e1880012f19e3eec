"""Each surface's routes are imported on its first request (http/lazy_routes.py): a fresh app
holds placeholders in the declared order, the first request under a prefix loads exactly
that surface's routes where its placeholder stood and is served by them, unknown paths keep
their surface's 404 envelope, concurrent first requests load once, and `load_all` (the
OpenAPI document) sees every route."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from api_helpers import MakeClient
from fastapi import FastAPI

from headwater.http.lazy_routes import LazyRoutes, load_all

pytestmark = pytest.mark.api

ALL = [("/v1/",), ("/v0/",), ("/api/v1/",), ("/api/v2/",)]


def _pending(app: FastAPI) -> list[tuple[str, ...]]:
    return [r.prefixes for r in app.router.routes if isinstance(r, LazyRoutes)]


def _routes(app: FastAPI) -> list[Any]:
    def walk(routes: list[Any]) -> list[Any]:
        out: list[Any] = []
        for r in routes:
            inner = getattr(r, "original_router", None)  # an included router
            out += walk(inner.routes) if inner is not None else [r]
        return out

    return walk(app.router.routes)


def _paths(app: FastAPI) -> list[str]:
    return [getattr(r, "path", "") for r in _routes(app)]


def test_a_surface_loads_on_its_first_request_and_serves_it(make_client: MakeClient) -> None:
    c = make_client()
    app: FastAPI = c.app  # type: ignore[assignment]
    assert _pending(app) == ALL
    # WHEN the first /v1 request arrives THEN /v1's routes serve it, the rest still wait
    r = c.put("/v1/stream/lazy-a", headers={"Content-Type": "text/plain"})
    assert r.status_code == 201, r.text
    assert _pending(app) == ALL[1:]
    assert c.get("/v1/stream/lazy-a", params={"offset": "-1"}).status_code == 200
    # an unknown path under a lazy prefix loads that surface and answers its own 404
    r = c.get("/v0/no-such-thing")
    assert r.status_code == 404 and "error" in r.json()
    assert _pending(app) == ALL[2:]


def test_loaded_routes_keep_the_declared_order(make_client: MakeClient) -> None:
    c = make_client()
    app: FastAPI = c.app  # type: ignore[assignment]
    assert c.get("/api/v2/configurations").status_code < 500  # loads /api/v2 first
    load_all(app)
    assert _pending(app) == []
    paths = _paths(app)

    def first(prefix: str) -> int:
        return next(i for i, p in enumerate(paths) if p.startswith(prefix))

    order = [first(p) for p in ("/v1/", "/v0/health", "/v0/topics", "/api/v1/", "/api/v2/")]
    assert order == sorted(order)
    # the route nearly every request takes is the first one tried (each route tried costs
    # a match, twice over through an included router)
    assert paths[0] == "/v1/stream/{path:path}"
    assert first("/api/v2/") < paths.index("/openapi.json")


def test_the_v1_routes_and_their_methods_in_matching_order(make_client: MakeClient) -> None:
    # /v1's routes are declared in http/v1.py alone (its route modules, v1_reads, v1_writes,
    # v1_search and v1_touch, are dispatched to from the stream route): the stream route first,
    # with all five methods, then the stream list and the server views
    c = make_client()
    app: FastAPI = c.app  # type: ignore[assignment]
    load_all(app)
    v1 = [
        (r.path, sorted(r.methods), r.endpoint.__module__)
        for r in _routes(app)
        if getattr(r, "path", "").startswith("/v1/")
    ]
    assert v1 == [
        ("/v1/stream/{path:path}", ["DELETE", "GET", "HEAD", "POST", "PUT"], "headwater.http.v1"),
        ("/v1/streams", ["GET"], "headwater.http.v1"),
        ("/v1/server/_details", ["GET"], "headwater.http.v1"),
        ("/v1/server/_mem", ["GET"], "headwater.http.v1"),
    ]


def test_concurrent_first_requests_load_once_and_are_all_served(make_client: MakeClient) -> None:
    c = make_client()
    app: FastAPI = c.app  # type: ignore[assignment]
    statuses: list[int] = []
    lock = threading.Lock()

    def first_request(n: int) -> None:
        r = c.post(f"/v0/topics/lazy-{n}", json={"records": [{"data": n}]})
        with lock:
            statuses.append(r.status_code)

    threads = [threading.Thread(target=first_request, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert statuses == [201] * 6
    assert _pending(app) == [ALL[0], *ALL[2:]]
    # each /v0 route is in the list once (the loads did not include a router twice)
    v0 = [r for r in _routes(app) if getattr(r, "path", "").startswith("/v0/topics")]
    keys = [(r.path, tuple(sorted(getattr(r, "methods", None) or ()))) for r in v0]
    assert keys and len(keys) == len(set(keys))
