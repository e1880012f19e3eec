"""ApiFunction entry point: the headwater ASGI app behind Mangum (BUFFERED function URL).

Thin by design. The app object is built at import (that is the cold start), but
create_app() makes no AWS call and creates no client: settings are read here, while the
clients, the engine and the API keys (from the SSM parameter / secret named by
HEADWATER_API_KEYS_PARAMETER) are built on the first request that needs them. Mangum
buffers whole responses, so SSE and long-poll belong to StreamFunction.
"""

from __future__ import annotations

import gc

# INIT, the cold start every environment pays: no cyclic garbage collection while the imports
# and module-level objects below allocate; at the end of the module they are frozen out of
# every later collection and collection resumes (docs/operations.md "Cold start").
gc.disable()

import asyncio
import time
from typing import Any, cast

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext
from mangum import Mangum

from headwater.http.app import create_app
from headwater.obs import function_logger, traced

logger = function_logger()  # the core's loggers write through it too
metrics = Metrics()

# The Lambda runtime calls the handler on one thread; give it a loop explicitly (Mangum's
# own asyncio.get_event_loop() fallback warns on 3.12 and 3.13 and is gone in 3.14).
asyncio.set_event_loop(asyncio.new_event_loop())
# lifespan "off": Mangum would run the app's startup and shutdown around every invocation;
# the app initialises lazily instead and lives as long as the execution environment.
asgi = Mangum(create_app(), lifespan="off")

_cold_start = True


@traced  # EnableTracing: Powertools Tracer around the rest (obs.traced)
@logger.inject_lambda_context(
    correlation_id_path=correlation_paths.LAMBDA_FUNCTION_URL, clear_state=True
)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    global _cold_start
    if _cold_start:
        _cold_start = False
        # Emitted as its own EMF blob at once, so warm invocations never flush an empty
        # metric set (function URL metrics already count requests and 4xx/5xx).
        metrics.provider.add_cold_start_metric(context)
    started = time.perf_counter()
    # Mangum declares its own LambdaContext protocol; the runtime object satisfies both.
    response = asgi(event, cast(Any, context))
    http = event.get("requestContext", {}).get("http", {})
    logger.info(
        "request",
        method=http.get("method"),
        path=event.get("rawPath"),
        status=response.get("statusCode"),
        duration_ms=round((time.perf_counter() - started) * 1000, 2),
    )
    return response


gc.freeze()
gc.enable()
