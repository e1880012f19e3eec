"""The /v0 request helpers that do not depend on FastAPI: what POST /v0/topics/:topic and
POST /v0/watch share with the WebSocket commands (ws/commands.py), so the WebSocket
path (WsFunction on API Gateway) imports neither FastAPI nor the /v0 routes."""

from __future__ import annotations

import time
from typing import Any

from headwater.access.keys import Principal
from headwater.engine import AppendRequest, AppendResult, LogEngine, TopicRequest, WatchSpec
from headwater.errors import InvalidRequest
from headwater.names import validate_topic_name
from headwater.settings import Limits
from headwater.v0.parse import boolean, require_object, require_text, u64

DEFAULT_BATCH_BYTES = 262_144
SERVER_BATCH_BYTES = 1 << 20  # max_batch_bytes: 0
MAX_BATCH_BYTES = 8 << 20


def require_config_names(principal: Principal, patch: dict[str, Any] | None) -> None:
    """A config naming another topic must name one the key may touch: a queue's
    `dead_letter` is appended to (and auto-created) by the engine on the key's behalf."""
    dead_letter = (patch or {}).get("dead_letter")
    if isinstance(dead_letter, str):
        principal.require_name(dead_letter)


async def commit_append(
    engine: LogEngine, topic: str, req: AppendRequest
) -> tuple[AppendResult, dict[str, Any]]:
    """The engine append, timed: the result and its `performance` fields (spec §2). Shared
    by POST /v0/topics/:topic and the WebSocket publish command."""
    t0 = time.perf_counter()
    result = await engine.append(topic, req)
    commit_ms = round((time.perf_counter() - t0) * 1000, 3)
    return result, {"wal_append_ms": commit_ms, "fsync_ms": 0.0}


def append_body(topic: str, result: AppendResult, return_seqs: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "topic": topic,
        "first_seq": result.first_seq,
        "last_seq": result.last_seq,
    }
    if return_seqs:
        out["seqs"] = list(range(result.first_seq, result.last_seq + 1))
    out.update(
        head_seq=result.head_seq,
        count=result.last_seq - result.first_seq + 1,
        created=result.created,
        deduped=result.deduped,
    )
    return out


def parse_watch(
    body: Any, limits: Limits, max_topics: int
) -> tuple[dict[str, TopicRequest], WatchSpec]:
    body = require_object(body)
    topics = body.get("topics")
    if not isinstance(topics, dict) or not topics:
        raise InvalidRequest(
            "topics must be a non-empty object of topic -> options", detail={"field": "topics"}
        )
    if len(topics) > max_topics:
        raise InvalidRequest(
            f"too many topics (max {max_topics})",
            detail={"field": "topics", "max": max_topics},
        )
    requested: dict[str, TopicRequest] = {}
    for name, opts in topics.items():
        validate_topic_name(name)
        opts = {} if opts is None else opts
        if not isinstance(opts, dict):
            raise InvalidRequest(
                f"topics[{name!r}] must be an object", detail={"field": f"topics.{name}"}
            )
        requested[name] = TopicRequest(u64(opts, "from_seq", 0), boolean(opts, "tail", False))
    node = body.get("node")
    if node is not None and (
        not isinstance(node, str)
        or not node
        or len(require_text(node, "node").encode()) > limits.max_node_bytes
    ):
        raise InvalidRequest(
            f"node must be a non-empty string of at most {limits.max_node_bytes} bytes",
            detail={"field": "node"},
        )
    limit = u64(body, "limit", limits.default_limit)
    limit = limits.default_limit if limit == 0 else min(limit, limits.max_limit)
    batch = u64(body, "max_batch_bytes", DEFAULT_BATCH_BYTES)
    batch = SERVER_BATCH_BYTES if batch == 0 else min(batch, MAX_BATCH_BYTES)
    heartbeat = min(max(u64(body, "heartbeat_ms", 15_000), 1000), 60_000)
    consistency = body.get("consistency", "eventual")
    if consistency not in ("eventual", "strong"):
        raise InvalidRequest(
            'consistency must be "eventual" or "strong"', detail={"field": "consistency"}
        )
    spec = WatchSpec(
        topics=(),
        node=node,
        limit=limit,
        max_batch_bytes=batch,
        heartbeat_ms=heartbeat,
        include_meta=boolean(body, "include_meta", True),
        include_tags=boolean(body, "include_tags", False),
        include_data=boolean(body, "include_data", True),
        consistency=str(consistency),
    )
    return requested, spec
