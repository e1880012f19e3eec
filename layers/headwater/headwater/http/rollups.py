"""GET /v0/topics/{topic}/rollups: the per-minute or per-hour windows the rollup Glue job
computed from sealed segments (headwater.rollups). Rollups lag the log: `through_seq` says how
far they reach, `generated_at` when the job last ran (null: no rollup for this topic yet)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from headwater.errors import InvalidRequest
from headwater.http.common import authorize, services
from headwater.http.lean_route import LeanRoute
from headwater.http.openapi_decl import V0_ERRORS, doc, model, query
from headwater.http.responses import json_response
from headwater.names import validate_topic_name
from headwater.rollups import GRANULARITY_MS, RollupReader

router = APIRouter(route_class=LeanRoute)


def _opt_int(params: Any, name: str) -> int | None:
    raw = params.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError as exc:
        raise InvalidRequest(
            f"query parameter {name} must be an integer (epoch ms)", detail={"field": name}
        ) from exc
    if value < 0:
        raise InvalidRequest(f"query parameter {name} must be >= 0", detail={"field": name})
    return value


@router.get(
    "/v0/topics/{topic}/rollups",
    **doc(
        "v0",
        "Per-minute or per-hour rollups",
        params=[
            query("granularity", {"enum": ["minute", "hour"]}, "Default minute"),
            query("from_ms", {"type": "integer", "minimum": 0}, "Windows from (epoch ms)"),
            query("to_ms", {"type": "integer", "minimum": 0}, "Windows before (epoch ms)"),
        ],
        ok={200: model("Rollups")},
        errors=(*V0_ERRORS, 404),
    ),
)
async def get_rollups(topic: str, request: Request) -> Response:
    svc = services(request)
    authorize(request, svc, "read", name=topic)
    validate_topic_name(topic)
    q = request.query_params
    granularity = q.get("granularity") or "minute"
    if granularity not in GRANULARITY_MS:
        raise InvalidRequest(
            "query parameter granularity must be minute or hour", detail={"field": "granularity"}
        )
    from_ms, to_ms = _opt_int(q, "from_ms"), _opt_int(q, "to_ms")
    if from_ms is not None and to_ms is not None and to_ms < from_ms:
        raise InvalidRequest("to_ms must be >= from_ms", detail={"field": "to_ms"})
    head = await svc.engine.get_topic(topic, touch=False)
    reader = RollupReader(svc.engine.blobs)
    found = await asyncio.to_thread(
        reader.topic, topic, granularity, from_ms=from_ms, to_ms=to_ms, epoch=head.epoch
    )
    body: dict[str, Any] = {"topic": topic, "granularity": granularity}
    if found is None:
        body.update(epoch=head.epoch, through_seq=0, generated_at=None, rollups=[])
    else:
        body.update(
            epoch=found.epoch,
            through_seq=found.through_seq,
            generated_at=found.generated_at,
            rollups=found.windows,
        )
    return json_response(request, body)
