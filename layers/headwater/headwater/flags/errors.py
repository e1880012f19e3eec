"""Errors of the flag surface. Every one answers `{"error": {"code", "message", "details"?}}`
(`envelope()`), except 414 which the spec sends with no body (`envelope()` is None).

`details` is whatever the spec puts there: an object (`{"reason": "too_many_flags",
"namespace": "billing"}`) or, for `lint_failed`, the list of every finding."""

from __future__ import annotations

from typing import Any

from headwater.errors import HeadwaterError


class FlagError(HeadwaterError):
    status = 400
    code = "invalid_request"
    has_body = True

    def __init__(
        self,
        message: str,
        *,
        details: dict[str, Any] | list[dict[str, Any]] | None = None,
        code: str | None = None,
        status: int | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(
            message,
            detail=details if isinstance(details, dict) else None,
            code=code,
            status=status,
            headers=headers,
        )
        self.details = details

    def envelope(self) -> dict[str, Any] | None:
        if not self.has_body:
            return None
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details is not None:
            error["details"] = self.details
        return {"error": error}


class InvalidRequest(FlagError):
    status, code = 400, "invalid_request"


class InvalidSubscription(FlagError):
    """400 `invalid_subscription`; `details.reason` says which rule (spec table)."""

    status, code = 400, "invalid_subscription"

    def __init__(self, message: str, reason: str, **details: Any) -> None:
        super().__init__(message, details={"reason": reason, **details})
        self.reason = reason


def unknown_namespace(label: str) -> InvalidSubscription:
    """400 for a listed namespace that does not exist (checked by the caller, after 403)."""
    return InvalidSubscription(
        f"namespace {label!r} does not exist", "unknown_namespace", namespace=label
    )


class Unauthorized(FlagError):
    status, code = 401, "unauthorized"


class ClosureTokenInvalid(FlagError):
    """401 `closure_token_invalid`; `reason` is malformed, expired, tampered or
    principal_mismatch (kept in details for logs; the client treats them alike)."""

    status, code = 401, "closure_token_invalid"

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message, details={"reason": reason})
        self.reason = reason


class Forbidden(FlagError):
    status, code = 403, "forbidden"


class NamespaceNotFound(FlagError):
    status, code = 404, "namespace_not_found"


class ClosureUnavailable(FlagError):
    status, code = 410, "closure_unavailable"


class PayloadTooLarge(FlagError):
    status, code = 413, "payload_too_large"


class QueryTooLong(FlagError):
    """414 URI Too Long: the spec sends no body."""

    status, code = 414, "uri_too_long"
    has_body = False


class LintFailed(FlagError):
    """422 `lint_failed`; details is every finding, `[{path, code, message}, ...]`."""

    status, code = 422, "lint_failed"


class RateLimitExceeded(FlagError):
    status, code = 429, "rate_limit_exceeded"
