"""Structured JSON logs on Lambda (docs/operations.md).

Every function logs through one Powertools handler, and the core's loggers
(`logging.getLogger("headwater.…")`) write through that same handler, so their lines carry
the keys of the function's own lines: service, function_request_id, correlation_id,
cold_start, and `name` (the logger's name). Only the function entry points import this
module (functions/*/handler.py; functions/stream/logging.json for the uvicorn process); the
core never does, so `make run` and the in-process tiers keep their own logging setup.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.shared.constants import SERVICE_NAME_ENV

from headwater.settings import ENV_LAMBDA_FUNCTION_NAME

CORE_LOGGER = "headwater"
# The record's logger name, as the `name` key of every line. Given to the formatter at
# construction, so it survives `inject_lambda_context(clear_state=True)` (which drops
# appended keys).
LOGGER_NAME = "%(name)s"


def function_logger() -> Logger:
    """The function's Powertools Logger (service and level from POWERTOOLS_SERVICE_NAME and
    POWERTOOLS_LOG_LEVEL / AWS_LAMBDA_LOG_LEVEL), with the core's loggers writing through its
    handler at its level. They hang below "headwater", so modules imported later (surfaces
    load on first use) propagate to it and are covered as well."""
    logger = Logger(name=LOGGER_NAME)
    logging.getLogger(CORE_LOGGER)  # registered even if no core module has logged yet
    copy_config_to_registered_loggers(source_logger=logger, include={CORE_LOGGER})
    return logger


TRACE_DISABLED_ENV = "POWERTOOLS_TRACE_DISABLED"


def tracing_enabled() -> bool:
    """template.yaml's EnableTracing sets POWERTOOLS_TRACE_DISABLED to "false"; unset (local
    runs) or anything else keeps tracing off."""
    return os.environ.get(TRACE_DISABLED_ENV, "").strip().lower() in ("false", "0")


def traced(handler: Callable[..., Any]) -> Callable[..., Any]:
    """The handler under Powertools Tracer (a subsegment around it, one per AWS call through
    patched botocore) when tracing is on; the handler itself otherwise. The tracer and the
    X-Ray SDK (~0.6 s of imports) load only when tracing is on, so they cost a cold start
    nothing by default."""
    if not tracing_enabled():
        return handler
    from aws_lambda_powertools import Tracer

    return Tracer().capture_lambda_handler(handler)


def stream_log_handler() -> logging.Handler:
    """The JSON handler of StreamFunction's uvicorn process (functions/stream/logging.json,
    named by UVICORN_LOG_CONFIG in template.yaml). No Lambda handler runs there (the Lambda
    Web Adapter proxies each invocation to uvicorn as an HTTP request), so the invocation's
    keys come from the adapter's headers: RequestContext (the app that run.sh serves) keeps
    them for the request, and this handler's filter writes them into every line logged
    while it runs."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(
        LambdaPowertoolsFormatter(
            service=os.environ.get(SERVICE_NAME_ENV, "service_undefined"),
            function_name=os.environ.get(ENV_LAMBDA_FUNCTION_NAME),
            name=LOGGER_NAME,
        )
    )
    handler.addFilter(_with_invocation)
    return handler


# ------------------------------------------------------------------ the stream function
# The invocation a request of StreamFunction's uvicorn belongs to: (Lambda request id, the
# function URL's request id), from the Lambda Web Adapter's x-amzn-lambda-context and
# x-amzn-request-context headers (JSON of the runtime's Context and of the event's
# requestContext).
_invocation: ContextVar[tuple[str | None, str | None]] = ContextVar(
    "headwater_invocation", default=(None, None)
)
LAMBDA_CONTEXT_HEADER = b"x-amzn-lambda-context"
REQUEST_CONTEXT_HEADER = b"x-amzn-request-context"
STREAM_METRICS_NAMESPACE = "Headwater"


def _with_invocation(record: logging.LogRecord) -> bool:
    request_id, correlation_id = _invocation.get()
    if request_id is not None:
        record.function_request_id = request_id
    if correlation_id is not None:
        record.correlation_id = correlation_id
    return True


def _header_json(headers: list[tuple[bytes, bytes]], name: bytes) -> dict[str, Any]:
    for key, value in headers:
        if key == name:
            try:
                got = json.loads(value)
            except ValueError:
                return {}
            return got if isinstance(got, dict) else {}
    return {}


class RequestContext:
    """ASGI middleware of StreamFunction (functions/stream/run.sh serves stream_app()): each
    request runs with its invocation's ids (so every line logged meanwhile carries them),
    and, when it ends, logs one `request` line (method, path, status, duration) and emits
    CloudWatch metrics in the embedded metric format: Requests, ServerErrors (5xx) and
    Duration (ms), with the function's name as dimension. One request is one invocation
    under the adapter. Pure ASGI: a stream's body passes through untouched."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.log = logging.getLogger("headwater.stream")

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = scope.get("headers") or []
        lambda_ctx = _header_json(headers, LAMBDA_CONTEXT_HEADER)
        request_ctx = _header_json(headers, REQUEST_CONTEXT_HEADER)
        request_id = lambda_ctx.get("request_id") or lambda_ctx.get("aws_request_id")
        if request_id is None:  # the adapter's readiness checks and local runs
            await self.app(scope, receive, send)
            return
        token = _invocation.set((str(request_id), _str_or_none(request_ctx.get("requestId"))))
        started = time.perf_counter()
        status = 500  # an app that raises before answering

        async def send_status(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            duration_ms = round((time.perf_counter() - started) * 1000, 2)
            self.log.info(
                "request",
                extra={
                    "method": scope.get("method"),
                    "path": scope.get("path"),
                    "status": status,
                    "duration_ms": duration_ms,
                },
            )
            _emit_request_metrics(status, duration_ms)
            _invocation.reset(token)


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _emit_request_metrics(status: int, duration_ms: float) -> None:
    """One EMF document on stdout (CloudWatch turns it into metrics on ingestion)."""
    function = os.environ.get(ENV_LAMBDA_FUNCTION_NAME, "local")
    doc = {
        "_aws": {
            "Timestamp": int(time.time() * 1000),
            "CloudWatchMetrics": [
                {
                    "Namespace": os.environ.get(
                        "POWERTOOLS_METRICS_NAMESPACE", STREAM_METRICS_NAMESPACE
                    ),
                    "Dimensions": [["function_name"]],
                    "Metrics": [
                        {"Name": "Requests", "Unit": "Count"},
                        {"Name": "ServerErrors", "Unit": "Count"},
                        {"Name": "Duration", "Unit": "Milliseconds"},
                    ],
                }
            ],
        },
        "function_name": function,
        "Requests": 1,
        "ServerErrors": int(status >= 500),
        "Duration": duration_ms,
    }
    sys.stdout.write(json.dumps(doc, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def stream_app() -> Any:
    """The app StreamFunction's uvicorn serves (run.sh: --factory headwater.obs:stream_app).
    As the handlers do, the import and build run with the cyclic GC paused, and what they
    made is frozen out of later collections."""
    import gc

    gc.disable()
    try:
        from headwater.http.app import create_app

        return RequestContext(create_app())
    finally:
        gc.freeze()
        gc.enable()
