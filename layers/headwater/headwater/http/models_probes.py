"""Probe answers (spec topics-api-v0 §8), for /openapi.json (documentation only; errors are
in the /v0 envelope, models_v0.V0Error)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from headwater.http.models_v0 import Performance


class Health(BaseModel):
    status: Literal["ok"]
    version: str
    uptime_ms: int
    performance: Performance


class Ready(BaseModel):
    status: Literal["ready"]
    wal_replay_complete: bool
    topics: int = Field(description="Topics in the deployment")
    performance: Performance


class MetricsSnapshot(BaseModel):
    """GET /v0/metrics with Accept: application/json (Prometheus text otherwise)."""

    gauges: dict[str, float] = Field(description="Process and aggregate gauges")
    topics: dict[str, dict[str, int]] = Field(
        description="Per-topic gauges (the key's topics only, at most 1000)"
    )
    truncated: bool
    performance: Performance


MODELS: tuple[type[BaseModel], ...] = (Health, Ready, MetricsSnapshot)
