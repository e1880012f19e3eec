"""ForwarderFunction entry point: routers driven by the log table's DynamoDB stream.

On AWS there is no long-lived process to run the forwarder loop, so every new log frame
(one stream INSERT: pk = "<topic>#<epoch>", sk = the frame's last seq) runs the loop's own
step, RouterEngine.forward_to_head, for each router whose source is that topic (through
headwater.engine.router_stream.StreamBatch). Thin by design: no AWS client at import; the
engine is built on the first invocation and kept for the execution environment's life.

- Replays are no-ops: a router whose durable cursor has passed the frame is not touched.
- A router leased by another forwarder (a uvicorn loop, another invocation) is skipped; the
  lease holder forwards it up to the head.
- A dest that rejects (topic_full backpressure) or a storage error fails that stream record
  only (ReportBatchItemFailures), so Lambda retries from it; the cursor never moved past it.

The same frames drive live /v0/ws delivery on API Gateway (ws/gateway.py): each new
frame of topic T delivers T's WebSocket subscriptions from their stored cursors to the
head (once per topic per batch, unless a later frame of T is past what was delivered),
posting with post_to_connection and advancing each cursor conditionally. A client gone
(GoneException) is cleaned up, not a failure; a storage or post error fails the record.
Routers and WebSocket delivery each run even when the other fails.
"""

from __future__ import annotations

import gc

# INIT, the cold start every environment pays: no cyclic garbage collection while the imports
# and module-level objects below allocate; at the end of the module they are frozen out of
# every later collection and collection resumes (docs/operations.md "Cold start").
gc.disable()

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import (
    DynamoDBRecord,
    DynamoDBRecordEventName,
)
from aws_lambda_powertools.utilities.typing import LambdaContext

from headwater.engine.ports import log_key_parts
from headwater.engine.router_stream import StreamBatch
from headwater.engine.routers import RouterEngine
from headwater.engines import Core
from headwater.obs import function_logger, traced
from headwater.settings import Settings
from headwater.storage.ws_connections import ApiGatewayPoster, DynamoWsStore
from headwater.ws.gateway import Delivery

logger = function_logger()  # the core's loggers write through it too
metrics = Metrics()
processor = BatchProcessor(event_type=EventType.DynamoDBStreams)

# Stop starting new batches this long before the function's timeout: the batch in flight
# (a diff, one dest append, one cursor write) must still finish.
SAFETY_MARGIN_S = 10.0

_core: Core | None = None
_ws: Delivery | None = None


def _built() -> Core:
    global _core
    if _core is None:
        # The same engines as the HTTP functions (quotas included): forwarded copies count
        # against max_topics / max_total_bytes like any other write.
        _core = Core.build(Settings.from_env())
    return _core


def _engine() -> RouterEngine:
    return _built().routers


def _delivery() -> Delivery:
    """WebSocket delivery (API Gateway): the endpoint of each connection is stored with
    its subscriptions, so this needs no configuration of its own."""
    global _ws
    if _ws is None:
        core = _built()
        store = DynamoWsStore(core.clients.dynamodb, core.settings)
        poster = ApiGatewayPoster(core.settings.region)
        _ws = Delivery(core.engine, store, poster, core.quotas)
    return _ws


@dataclass(slots=True)
class _Tally:
    frames: int = 0
    copied: int = 0
    skipped_leased: int = 0
    ws_frames: int = 0
    ws_gone: int = 0


def frame_key(record: DynamoDBRecord) -> tuple[str, int, int] | None:
    """(topic, epoch, last seq) of a new log frame, or None for any other change. Frames are
    keyed by their first seq, under one of the incarnation's partition keys; the last seq is
    the image's `ls`. A hole (`hl`: seqs reserved that no append committed) holds nothing
    to forward."""
    if record.event_name is not DynamoDBRecordEventName.INSERT or record.dynamodb is None:
        return None
    keys = record.dynamodb.keys or {}
    parts = log_key_parts(str(keys.get("pk", "")))
    image = record.dynamodb.new_image or {}
    if parts is None or "sk" not in keys or "ls" not in image or "hl" in image:
        return None
    return parts[0], parts[1], int(image["ls"])


@traced  # EnableTracing: Powertools Tracer around the rest (obs.traced)
@metrics.log_metrics(capture_cold_start_metric=True)
@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    routers = _engine()
    ws = _delivery()
    deadline = time.monotonic() + context.get_remaining_time_in_millis() / 1000 - SAFETY_MARGIN_S
    batch = StreamBatch(routers, deadline=deadline)
    ws_through: dict[str, int] = {}  # topic -> lowest cursor its subscriptions were left at
    tally = _Tally()
    # Added first, so the flush is never empty even when the whole batch fails.
    metrics.add_metric(name="StreamRecords", unit=MetricUnit.Count, value=len(event["Records"]))
    loop = asyncio.new_event_loop()

    def record_handler(record: DynamoDBRecord) -> None:
        key = frame_key(record)
        if key is None:
            return  # MODIFY (a record delete marks its frame) / REMOVE: nothing to forward
        tally.frames += 1
        topic, _epoch, last_seq = key
        failure: Exception | None = None
        try:
            for done in loop.run_until_complete(batch.frame_appended(*key)):
                tally.copied += done.copied
                tally.skipped_leased += int(done.leased_elsewhere)
        except Exception as exc:  # WebSocket subscribers still get the frame
            failure = exc
        if ws_through.get(topic, -1) < last_seq:
            delivered, through = loop.run_until_complete(ws.deliver_topic(topic, deadline))
            ws_through[topic] = through
            tally.ws_frames += sum(d.frames for d in delivered)
            tally.ws_gone += sum(d.gone for d in delivered)
        if failure is not None:
            raise failure

    try:
        response = process_partial_response(
            event=event, record_handler=record_handler, processor=processor, context=context
        )
    finally:
        loop.close()
    failures = len(response.get("batchItemFailures", []))
    metrics.add_metric(name="RouterCopies", unit=MetricUnit.Count, value=tally.copied)
    metrics.add_metric(name="RouterLeaseSkips", unit=MetricUnit.Count, value=tally.skipped_leased)
    metrics.add_metric(name="StreamRecordFailures", unit=MetricUnit.Count, value=failures)
    metrics.add_metric(name="WebSocketFrames", unit=MetricUnit.Count, value=tally.ws_frames)
    metrics.add_metric(name="WebSocketGone", unit=MetricUnit.Count, value=tally.ws_gone)
    logger.info(
        "stream batch",
        records=len(event["Records"]),
        frames=tally.frames,
        copied=tally.copied,
        skipped_leased=tally.skipped_leased,
        failures=failures,
        ws_frames=tally.ws_frames,
        ws_gone=tally.ws_gone,
    )
    return dict(response)


gc.freeze()
gc.enable()
