"""/v1 Durable Streams bodies (spec durable-streams-protocol), for /openapi.json
(documentation only). Stream bodies are the stream's own content type (bytes, or JSON arrays
of messages): the protocol's headers carry the metadata (Stream-Next-Offset, Stream-Cursor,
ETag, ...), so only the error envelope, the stream listing and the server views are JSON
shapes here."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, RootModel


class V1ErrorBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    code: str
    message: str


class V1Error(BaseModel):
    """Every /v1 error (protocol §11): exactly `{"error": {"code", "message"}}`."""

    model_config = ConfigDict(extra="forbid")

    error: V1ErrorBody


class StreamDescriptor(BaseModel):
    """One entry of GET /v1/streams."""

    name: str
    content_type: str
    profile: str = Field(description="The stream's profile kind (generic unless one was set)")
    created_at: int = Field(description="Epoch ms")
    ttl_seconds: int | None
    expires_at: str | None
    closed: bool
    epoch: int
    next_offset: str = Field(description="The offset the next append will get")


class StreamList(RootModel[list[StreamDescriptor]]):
    """One page of streams (filtered to the key's allowlist); the `Stream-List-Next-After`
    header names the next page."""


class ServerView(BaseModel):
    """GET /v1/server/_details (configured limits and live state of this process) or
    /v1/server/_mem (its memory snapshot): an object whose sections may grow."""

    model_config = ConfigDict(extra="allow")


class JsonDocument(BaseModel):
    """A JSON subresource of a stream (_schema, _profile, _search, _aggregate,
    _routing_keys, _index_status, _details, touch/*): its shape is the protocol section's."""

    model_config = ConfigDict(extra="allow")


MODELS: tuple[type[BaseModel], ...] = (
    V1Error,
    StreamDescriptor,
    StreamList,
    ServerView,
    JsonDocument,
)
