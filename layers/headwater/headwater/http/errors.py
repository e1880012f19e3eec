"""The one place engine errors become HTTP responses. Each surface's envelope is chosen by
path prefix; /v0 uses {"error": {"code", "message", "detail"}} (spec §0.5)."""

from __future__ import annotations

import logging

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import Response

from headwater.errors import (
    HeadwaterError,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
)
from headwater.http.responses import error_response

log = logging.getLogger(__name__)


def install(app: FastAPI) -> None:
    @app.exception_handler(HeadwaterError)
    async def _engine_error(request: Request, exc: HeadwaterError) -> Response:
        return error_response(request, exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 405:
            mapped: HeadwaterError = MethodNotAllowed(
                f"method {request.method} not allowed on {request.url.path}"
            )
        elif exc.status_code == 404:
            mapped = NotFound(f"no route for {request.url.path}")
        else:
            mapped = HeadwaterError(str(exc.detail), status=exc.status_code, code="http_error")
        return error_response(request, mapped)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> Response:
        return error_response(request, InvalidRequest("invalid request parameters"))

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(request, HeadwaterError("internal error"))
