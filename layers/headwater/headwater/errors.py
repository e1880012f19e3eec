"""One error hierarchy. Each error carries its HTTP status and stable code; the HTTP layer
maps it to the envelope of the surface that raised it (exception handlers in headwater.http)."""

from __future__ import annotations

from typing import Any


class ConfigurationError(Exception):
    """Bad settings at start: the process refuses to start."""


class HeadwaterError(Exception):
    status: int = 500
    code: str = "internal"

    def __init__(
        self,
        message: str,
        *,
        detail: dict[str, Any] | None = None,
        code: str | None = None,
        status: int | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        self.headers = headers or {}


class InvalidRequest(HeadwaterError):
    status, code = 400, "invalid_request"


class BatchTooLarge(HeadwaterError):
    status, code = 400, "batch_too_large"


class RecordTooLarge(HeadwaterError):
    status, code = 400, "record_too_large"


class Unauthorized(HeadwaterError):
    status, code = 401, "unauthorized"


class Forbidden(HeadwaterError):
    status, code = 403, "forbidden"


class NotFound(HeadwaterError):
    status, code = 404, "not_found"


class TopicNotFound(NotFound):
    code = "topic_not_found"

    def __init__(self, topic: str) -> None:
        super().__init__(f"topic {topic!r} does not exist", detail={"topic": topic})


class MethodNotAllowed(HeadwaterError):
    status, code = 405, "method_not_allowed"


class NotAcceptable(HeadwaterError):
    status, code = 406, "not_acceptable"


class Conflict(HeadwaterError):
    status, code = 409, "conflict"


class TopicExistsIncompatible(Conflict):
    code = "topic_exists_incompatible"


class TopicNotEmpty(Conflict):
    code = "topic_not_empty"


class NotAQueue(Conflict):
    code = "not_a_queue"


class PayloadTooLarge(HeadwaterError):
    status, code = 413, "payload_too_large"


class UnsupportedMediaType(HeadwaterError):
    status, code = 415, "unsupported_media_type"


class TopicFull(HeadwaterError):
    status, code = 422, "topic_full"


class Throttled(HeadwaterError):
    status, code = 429, "throttled"


class NotReady(HeadwaterError):
    status, code = 503, "not_ready"


class StorageUnavailable(HeadwaterError):
    """The storage backend failed or throttled past our retries (adapters raise it)."""

    status, code = 503, "storage_unavailable"


class OutcomeUnknown(StorageUnavailable):
    """A write whose outcome storage never confirmed: every attempt, and every re-send of the
    same request (same ClientRequestToken / commit id), failed without an answer. It may or
    may not have applied; it never applies twice. Clients retry with their idempotency key."""

    def __init__(self, message: str, **kwargs: Any) -> None:
        kwargs.setdefault("detail", {"outcome": "unknown"})
        kwargs.setdefault("headers", {"Retry-After": "1"})
        super().__init__(message, **kwargs)


class BlobNotFound(StorageUnavailable):
    """An object that should exist does not (a segment dropped under a reader)."""


def error_body(exc: HeadwaterError) -> dict[str, Any]:
    """The /v0 error envelope (and the WebSocket error frame's): {"error": {code, message,
    detail?}}."""
    err: dict[str, Any] = {"code": exc.code, "message": exc.message}
    if exc.detail is not None:
        err["detail"] = exc.detail
    return {"error": err}
