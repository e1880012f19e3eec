"""SealerFunction entry point: storage upkeep on a schedule (EventBridge, every minute).

The serving Lambdas never run a timer, so this sweep does on AWS what the in-process timer
does locally: for every live topic, evict what caps and TTLs no longer keep, seal the tail
into S3 segments once a threshold is reached, trim sealed frames from DynamoDB after the
grace period, and drop dead units (headwater.engine.tiering.Upkeep). Every step is
conditional on the head it read, so overlapping invocations (or a local process sharing
the tables) are safe. Thin by design: no AWS client at import.
"""

from __future__ import annotations

import gc

# INIT, the cold start every environment pays: no cyclic garbage collection while the imports
# and module-level objects below allocate; at the end of the module they are frozen out of
# every later collection and collection resumes (docs/operations.md "Cold start").
gc.disable()

import time
from typing import Any

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from headwater.engines import Core
from headwater.obs import function_logger, traced
from headwater.settings import Settings

logger = function_logger()  # the core's loggers write through it too
metrics = Metrics()

# Stop visiting topics this long before the timeout: the topic in hand must still finish.
SAFETY_MARGIN_S = 20.0

_core: Core | None = None


def _built() -> Core:
    global _core
    if _core is None:
        _core = Core.build(Settings.from_env())
    return _core


@metrics.log_metrics(capture_cold_start_metric=True)
# The schedule's EventBridge event id: one sweep's lines, the core's warnings included.
@traced  # EnableTracing: Powertools Tracer around the rest (obs.traced)
@logger.inject_lambda_context(correlation_id_path=correlation_paths.EVENT_BRIDGE, clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, int]:
    core = _built()
    deadline = time.monotonic() + context.get_remaining_time_in_millis() / 1000 - SAFETY_MARGIN_S
    reports = core.upkeep.sweep(deadline)
    summary = {
        "topics": len(reports),
        "segments_sealed": sum(r.sealed for r in reports),
        "records_evicted": sum(r.evicted for r in reports),
        "units_dropped": sum(r.dropped for r in reports),
    }
    metrics.add_metric(name="TopicsVisited", unit=MetricUnit.Count, value=summary["topics"])
    metrics.add_metric(
        name="SegmentsSealed", unit=MetricUnit.Count, value=summary["segments_sealed"]
    )
    metrics.add_metric(
        name="RecordsEvicted", unit=MetricUnit.Count, value=summary["records_evicted"]
    )
    logger.info("upkeep sweep", extra=summary)
    return summary


gc.freeze()
gc.enable()
