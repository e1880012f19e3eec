"""aviso-server's error bodies for /api/v1 (notify, watch, replay).

aviso answers every error it produces itself with one JSON object whose keys come out sorted
(serde_json maps are BTreeMaps): `code`, `details`, `error`, `message`, `request_id`. `message`
is the outermost line of the error chain and `details` the innermost (they are equal for a
one-line error). Unknown event types use a smaller body with `configured_event_types`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from headwater.errors import HeadwaterError


class RequestKind(StrEnum):
    NOTIFICATION = "notification"
    WATCH = "watch"
    REPLAY = "replay"

    @property
    def validation_code(self) -> str:
        return f"INVALID_{self.name}_REQUEST"

    @property
    def label(self) -> str:
        return f"Invalid {self.value.capitalize()} Request"


class FieldError(Exception):
    """A rejected identifier value: `message` (outer line) and `details` (root cause)."""

    def __init__(self, message: str, details: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = message if details is None else details


class AvisoError(HeadwaterError):
    """An error carrying aviso's body; `body(request_id)` is what goes on the wire."""

    status = 400

    def __init__(
        self,
        *,
        code: str,
        error: str,
        message: str,
        details: str | None,
        status: int = 400,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message, code=code, status=status)
        self.error = error
        self.details = details
        self.extra = dict(extra or {})

    def body(self, request_id: str) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "code": self.code,
            "error": self.error,
            "message": self.message,
            "request_id": request_id,
            **self.extra,
        }
        if self.details is not None:
            fields["details"] = self.details
        return dict(sorted(fields.items()))


class RequestParseError(AvisoError):
    """The body is not JSON (`INVALID_JSON`), has a key outside the request model
    (`UNKNOWN_FIELD`) or does not fit the model (`INVALID_REQUEST_SHAPE`)."""

    def __init__(self, kind: RequestKind, code: str, message: str) -> None:
        super().__init__(code=code, error=kind.label, message=message, details=message)
        self.kind = kind


class RequestValidationError(AvisoError):
    """The request parsed but broke a rule: `INVALID_{NOTIFICATION,WATCH,REPLAY}_REQUEST`."""

    def __init__(self, kind: RequestKind, message: str, details: str | None = None) -> None:
        super().__init__(
            code=kind.validation_code,
            error=kind.label,
            message=message,
            details=message if details is None else details,
        )
        self.kind = kind


class UnknownEventType(AvisoError):
    """An `event_type` that no schema declares (aviso's strict mode, always on here)."""

    def __init__(self, event_type: str, configured: list[str]) -> None:
        super().__init__(
            code="UNKNOWN_EVENT_TYPE",
            error="unknown_event_type",
            message=f"unknown event type '{event_type}'",
            details=None,
            extra={"configured_event_types": sorted(configured)},
        )
        self.event_type = event_type
