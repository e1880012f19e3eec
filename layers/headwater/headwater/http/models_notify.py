"""/api/v1 notification bodies (aviso-server's API; spec notifications-watch-replay), for
/openapi.json (documentation only: `headwater.notify.requests` parses the bodies, in aviso's
order and with aviso's errors).

Identifier values are scalars (strings, numbers) checked by the event type's schema
(`GET /api/v1/schema/{event_type}` lists the fields); on watch and replay a field may instead
hold one constraint object (`{"gte": 5}`, `{"in": [...]}`, `{"between": [a, b]}`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from headwater.http.models_common import absent

Scalar = str | int | float


class NotificationRequest(BaseModel):
    """POST /api/v1/notification: one notification. Unknown top-level keys are refused."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "event_type": "mars",
                    "identifier": {"class": "od", "date": "20250706", "step": 1},
                    "payload": {"path": "/data/file.grib"},
                }
            ]
        },
    )

    event_type: str = Field(description="A configured event type")
    identifier: dict[str, Scalar] = Field(
        description="Every field of the event type's schema, as scalars"
    )
    payload: Any = Field(None, description="Stored and replayed as sent (required by schema)")


class AvisoWatchRequest(BaseModel):
    """POST /api/v1/watch: live notifications, after a replay when from_id or from_date is
    given (not both)."""

    model_config = ConfigDict(extra="forbid")

    event_type: str
    identifier: dict[str, Scalar | dict[str, Any]] = Field(
        description="Values (`*` for any) or one constraint object per field; `point` "
        "(`lat,lon`) or the polygon field filters spatially"
    )
    from_id: str | None = Field(None, description="Replay from this sequence number")
    from_date: str | None = Field(
        None, description="Replay from this date-time (RFC 3339, naive UTC, Unix s or ms)"
    )


class AvisoReplayRequest(AvisoWatchRequest):
    """POST /api/v1/replay: history from from_id or from_date (exactly one), then the stream
    ends (`end_of_stream`)."""


class NotificationAccepted(BaseModel):
    status: Literal["success"]
    request_id: str
    processed_at: str = Field(description="UTC, whole seconds: YYYY-MM-DDTHH:MM:SSZ")


class AvisoError(BaseModel):
    """aviso's error body on /api/v1 (keys sorted); `request_id` equals X-Request-ID."""

    code: str = Field(description="UPPER_CASE, e.g. INVALID_JSON, UNKNOWN_EVENT_TYPE")
    error: str
    message: str
    request_id: str
    details: str = absent("The innermost cause")
    configured_event_types: list[str] = absent("UNKNOWN_EVENT_TYPE: the event types")


class SchemaList(BaseModel):
    """GET /api/v1/schema: every event type's public schema."""

    event_types: list[str]
    schema_: dict[str, Any] = Field(alias="schema", description="event type -> schema")
    status: Literal["success"]
    total_schemas: int
    message: str = absent("When no schema is configured")


class EventTypeSchema(BaseModel):
    """GET /api/v1/schema/{event_type}."""

    event_type: str
    schema_: dict[str, Any] = Field(
        alias="schema", description="{identifier: {field: rules}, payload}"
    )
    status: Literal["success"]


class SchemaNotFound(BaseModel):
    message: str
    request_id: str
    status: Literal["error"]
    available_types: list[str] = absent("The configured event types")


class WipeStreamRequest(BaseModel):
    """DELETE /api/v1/admin/wipe/stream."""

    stream_name: str = Field(description="The stream (event type) to wipe")


class AdminResult(BaseModel):
    """The admin routes' answers, success or not (aviso's shape)."""

    success: bool
    message: str
    request_id: str
    notification_id: str = absent("DELETE /admin/notification/{id} only")


MODELS: tuple[type[BaseModel], ...] = (
    NotificationRequest,
    AvisoWatchRequest,
    AvisoReplayRequest,
    NotificationAccepted,
    AvisoError,
    SchemaList,
    EventTypeSchema,
    SchemaNotFound,
    WipeStreamRequest,
    AdminResult,
)
