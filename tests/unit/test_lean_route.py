"""LeanRoute (http/lean_route.py): an endpoint that takes the raw Request and its path
parameters and returns a Response is called directly, without FastAPI's dependency solving;
any other endpoint keeps FastAPI's handler. Matching, 405, exception handlers and the
OpenAPI operation are FastAPI's either way."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import APIRouter, FastAPI
from fastapi.testclient import TestClient
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from headwater.http.lean_route import LeanRoute, direct_call

pytestmark = pytest.mark.unit


class Teapot(Exception):
    pass


def _app() -> FastAPI:
    router = APIRouter(route_class=LeanRoute)

    @router.get("/items/{item}/parts/{part:path}")
    async def part(part: str, request: Request, item: str) -> Response:
        if item == "teapot":
            raise Teapot
        return JSONResponse({"item": item, "part": part, "q": request.query_params.get("q")})

    @router.get("/typed/{n}")
    async def typed(n: int, limit: int = 5) -> dict[str, int]:
        return {"n": n, "limit": limit}

    app = FastAPI()
    app.include_router(router)

    @app.exception_handler(Teapot)
    async def teapot(request: Request, exc: Teapot) -> Response:
        return JSONResponse({"error": "teapot"}, status_code=418)

    return app


def test_a_raw_endpoint_is_called_directly_and_a_typed_one_keeps_fastapis_handler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN an app with one raw endpoint and one typed endpoint, FastAPI's solver counted
    import fastapi.routing

    solved: list[int] = []
    real = fastapi.routing.solve_dependencies

    async def counting(*args: Any, **kwargs: Any) -> Any:
        solved.append(1)
        return await real(*args, **kwargs)

    monkeypatch.setattr(fastapi.routing, "solve_dependencies", counting)
    client = TestClient(_app(), raise_server_exceptions=False)
    # WHEN the raw endpoint is called
    r = client.get("/items/a%20b/parts/x/y", params={"q": "1"})
    # THEN it got its path parameters (decoded, the path one with its slashes) and its
    # request, and nothing was solved
    assert r.status_code == 200 and r.json() == {"item": "a b", "part": "x/y", "q": "1"}
    assert solved == []
    # AND its exceptions reach the app's handlers, a wrong method is FastAPI's 405
    assert client.get("/items/teapot/parts/p").status_code == 418
    assert client.post("/items/a/parts/p").status_code == 405
    # WHEN the typed endpoint is called THEN FastAPI solves and validates it as always
    assert client.get("/typed/3", params={"limit": "2"}).json() == {"n": 3, "limit": 2}
    assert client.get("/typed/x").status_code == 422
    assert len(solved) == 2
    # AND both are in the OpenAPI document, the raw one with its path parameters
    doc = client.app.openapi()  # type: ignore[attr-defined]
    params = doc["paths"]["/items/{item}/parts/{part}"]["get"]["parameters"]
    assert {p["name"] for p in params} == {"item", "part"}
    assert "/typed/{n}" in doc["paths"]


async def _ok(request: Request, name: str) -> Response:
    return Response()


async def _defaulted(request: Request, name: str = "x") -> Response:
    return Response()


async def _untyped_return(request: Request, name: str):  # type: ignore[no-untyped-def]
    return Response()


async def _int_param(request: Request, name: int) -> Response:
    return Response()


async def _extra(request: Request, name: str, limit: str) -> Response:
    return Response()


def _sync(request: Request, name: str) -> Response:
    return Response()


@pytest.mark.parametrize(
    ("endpoint", "direct"),
    [
        (_ok, True),
        (_defaulted, False),
        (_untyped_return, False),
        (_int_param, False),
        (_extra, False),  # a query parameter FastAPI would fill in
        (_sync, False),  # FastAPI runs it in a thread
    ],
)
def test_only_the_raw_shape_is_called_directly(endpoint: Any, direct: bool) -> None:
    assert direct_call(endpoint, {"name"}) is direct


def test_a_route_with_dependencies_keeps_fastapis_handler() -> None:
    # GIVEN a raw-shaped endpoint on a router that declares a dependency
    from fastapi import Depends

    ran: list[str] = []

    def audit(request: Request) -> None:
        ran.append(request.url.path)

    router = APIRouter(route_class=LeanRoute, dependencies=[Depends(audit)])

    @router.get("/audited/{name}")
    async def audited(request: Request, name: str) -> Response:
        return JSONResponse({"name": name})

    app = FastAPI()
    app.include_router(router)
    # WHEN it is called THEN the dependency ran: FastAPI's handler served it
    assert TestClient(app).get("/audited/x").json() == {"name": "x"}
    assert ran == ["/audited/x"]
