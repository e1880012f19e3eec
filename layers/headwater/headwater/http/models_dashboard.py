"""/api/v2 dashboard bodies (spec dashboard-sse-contract; docs/dashboard.md), for
/openapi.json (documentation only: `headwater.dashboard` checks items and configurations)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel

from headwater.http.models_common import absent

Ticker = str


class SentimentItem(BaseModel):
    """One sentiment item (other fields are ignored)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "ticker": "AAPL",
                    "score": 0.62,
                    "label": "positive",
                    "confidence": 0.9,
                    "source": "newswire",
                    "timestamp": "2025-12-02T10:30:00.000Z",
                }
            ]
        }
    )

    ticker: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,15}$", description="Case-insensitive (upper)"
    )
    score: float = Field(ge=-1, le=1)
    label: Literal["positive", "neutral", "negative"]
    confidence: float = Field(ge=0, le=1)
    source: str = Field(min_length=1, max_length=64)
    timestamp: str = absent("ISO 8601 date-time with a zone; default: the append time")


class SentimentBatch(BaseModel):
    items: list[SentimentItem] = Field(min_length=1)


class IngestRequest(RootModel[SentimentBatch | list[SentimentItem] | SentimentItem]):
    """POST /api/v2/sentiment: `{"items": [...]}`, a list of items or one item (at most
    10000; all or nothing: one bad item writes none)."""


class Ingested(BaseModel):
    """201: appended; 200: an Idempotency-Key matched an earlier request (deduped)."""

    topic: str
    accepted: int
    first_seq: int
    last_seq: int
    deduped: bool


class DashboardMetrics(BaseModel):
    """GET /api/v2/metrics: the `metrics` event's data, now."""

    total: int
    positive: int
    neutral: int
    negative: int
    by_tag: dict[str, int]
    rate_last_hour: int
    rate_last_24h: int
    timestamp: str


class ConfigurationCreate(BaseModel):
    """POST /api/v2/configurations: both fields required; unknown fields are refused."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"name": "Big tech", "tickers": ["AAPL", "MSFT"]}]},
    )

    name: str = Field(min_length=1, max_length=100)
    tickers: list[Ticker] = Field(max_length=5, description="At most five distinct tickers")


class ConfigurationUpdate(BaseModel):
    """PUT /api/v2/configurations/{config_id}: either field or both."""

    model_config = ConfigDict(extra="forbid")

    name: str = absent("At most 100 characters")
    tickers: list[Ticker] = absent("At most five distinct tickers")


class Configuration(BaseModel):
    config_id: str
    name: str
    tickers: list[str]
    created_at: str
    updated_at: str


class ConfigurationList(BaseModel):
    configurations: list[Configuration]
    count: int


class StreamStatus(BaseModel):
    connections: int
    max_connections: int
    available: int
    uptime_seconds: int


class DashboardItemError(BaseModel):
    index: int = absent("Ingest: the item's index in the batch")
    field: str
    message: str


class DashboardError(BaseModel):
    """Every /api/v2 error: `{"detail": message, ...}` (extra fields say more)."""

    detail: str
    errors: list[DashboardItemError] = absent("The invalid fields")
    max_connections: int = absent("503: the connection cap")
    retry_after: int = absent("503: seconds to wait")
    count: int = absent("400: items given")


MODELS: tuple[type[BaseModel], ...] = (
    IngestRequest,
    Ingested,
    DashboardMetrics,
    ConfigurationCreate,
    ConfigurationUpdate,
    Configuration,
    ConfigurationList,
    StreamStatus,
    DashboardError,
)
