"""Typed exceptions. Every non-2xx answer from the server becomes an `ApiError` subclass that
carries the server's error envelope: `{"error": {"code", "message", "detail"}}` on /v0 (spec
§0.5), `{"error": {"code", "message"}}` on /v1 (Durable Streams)."""

from __future__ import annotations

import json
from typing import Any

import httpx

__all__ = [
    "ApiError",
    "Conflict",
    "ConnectionFailed",
    "Forbidden",
    "Gone",
    "HeadwaterError",
    "InvalidRequest",
    "NotAcceptable",
    "NotFound",
    "PayloadTooLarge",
    "ServerError",
    "Throttled",
    "Unauthorized",
    "error_from_response",
]


class HeadwaterError(Exception):
    """Base class of every error this client raises."""


class ConnectionFailed(HeadwaterError):
    """The server could not be reached, or the connection broke mid-request."""

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.cause = cause


class ApiError(HeadwaterError):
    """The server answered with an error status. `code` and `message` are the envelope's;
    `detail` is the /v0 envelope's optional `detail` object."""

    status: int
    code: str
    message: str
    detail: Any
    retry_after: float | None
    body: Any

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        detail: Any = None,
        *,
        retry_after: float | None = None,
        body: Any = None,
        method: str = "",
        url: str = "",
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.detail = detail
        self.retry_after = retry_after
        self.body = body
        self.method = method
        self.url = url


class InvalidRequest(ApiError):
    """400: the request was malformed (the envelope names the field in `detail`)."""


class Unauthorized(ApiError):
    """401: missing or unknown api key."""


class Forbidden(ApiError):
    """403: the key lacks the scope, or the name is outside its prefix allowlist."""


class NotFound(ApiError):
    """404: no such topic, queue, watch session or stream."""


class NotAcceptable(ApiError):
    """406: a stream was asked for without `Accept: text/event-stream`."""


class Conflict(ApiError):
    """409: e.g. `not_a_queue`, `topic_exists_incompatible`, a Durable Streams sequence
    conflict."""


class Gone(ApiError):
    """410: e.g. a Durable Streams offset of an earlier incarnation of the stream."""


class PayloadTooLarge(ApiError):
    """413: a record or body over the server's limits."""


class Throttled(ApiError):
    """429: a resource cap or a saturated topic; `retry_after` holds the server's hint in
    seconds (`error.detail.retry_after_ms` when given, else the Retry-After header)."""


class ServerError(ApiError):
    """5xx: the server failed (503: not ready or shutting down)."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    406: NotAcceptable,
    409: Conflict,
    410: Gone,
    413: PayloadTooLarge,
    429: Throttled,
}


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(0.0, float(value.strip()))
    except ValueError:
        return None


def _retry_after_ms(detail: Any) -> float | None:
    """A sub-second hint (`error.detail.retry_after_ms`, /v0's elastic throttle) wins over
    the header, which HTTP keeps to whole seconds."""
    ms = detail.get("retry_after_ms") if isinstance(detail, dict) else None
    if isinstance(ms, (int, float)) and not isinstance(ms, bool) and ms >= 0:
        return ms / 1000
    return None


def error_class(status: int) -> type[ApiError]:
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    if status >= 500:
        return ServerError
    return ApiError


def error_from_response(response: httpx.Response) -> ApiError:
    """The typed exception for an error response (its body must have been read)."""
    status = response.status_code
    body: Any = None
    code = "http_error"
    message = response.reason_phrase or f"HTTP {status}"
    detail: Any = None
    text = response.text if response.content else ""
    if text:
        try:
            body = json.loads(text)
        except ValueError:
            body = text
            message = text.strip()[:500] or message
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        err = body["error"]
        code = str(err.get("code", code))
        message = str(err.get("message", message))
        detail = err.get("detail")
    cls = error_class(status)
    return cls(
        status,
        code,
        message,
        detail,
        retry_after=_retry_after_ms(detail) or _retry_after(response.headers.get("retry-after")),
        body=body,
        method=response.request.method if _has_request(response) else "",
        url=str(response.request.url) if _has_request(response) else "",
    )


def _has_request(response: httpx.Response) -> bool:
    try:
        response.request  # noqa: B018 - raises RuntimeError when the response has none
    except RuntimeError:
        return False
    return True


def raise_for_error(response: httpx.Response) -> None:
    if response.status_code >= 400:
        raise error_from_response(response)
