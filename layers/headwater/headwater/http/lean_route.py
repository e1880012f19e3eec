"""A FastAPI route that calls its endpoint directly (docs/architecture.md, "The request
path").

Headwater's handlers take the raw `Request` and their path parameters, parse the rest by
hand (each surface's exact errors) and return a `Response`. For such an endpoint FastAPI's
request handler has nothing to do but costs per request: it solves an empty dependency graph,
validates path parameters it then passes as strings, and checks the returned value. A
`LeanRoute` keeps everything FastAPI builds from the route (matching, the 405 answer, the
body limit, exception handling, the OpenAPI operation) and replaces only that handler with a
direct call. An endpoint of any other shape (a typed query parameter, a body model, a
non-Response return), or a route with dependencies, keeps FastAPI's handler."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response


def direct_call(endpoint: Callable[..., Any], path_params: set[str]) -> bool:
    """Whether `endpoint` is `async def f(request: Request, <its path params: str>) ->
    Response`, in any order."""
    if not inspect.iscoroutinefunction(endpoint):
        return False
    try:
        sig = inspect.signature(endpoint, eval_str=True)
    except (NameError, TypeError):  # an annotation only imported for type checking
        return False
    params = sig.parameters
    if set(params) != path_params | {"request"} or params["request"].annotation is not Request:
        return False
    for p in params.values():
        if p.default is not inspect.Parameter.empty or p.kind not in (
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            inspect.Parameter.KEYWORD_ONLY,
        ):
            return False
        if p.name != "request" and p.annotation is not str:
            return False
    ret = sig.return_annotation
    return isinstance(ret, type) and issubclass(ret, Response)


class LeanRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        endpoint = self.endpoint
        # dependencies (the route's or its router's) are FastAPI's to run
        if self.dependant.dependencies or not direct_call(endpoint, set(self.param_convertors)):
            return super().get_route_handler()

        async def handler(request: Request) -> Response:
            return await endpoint(request=request, **request.path_params)  # type: ignore[no-any-return]

        return handler
