"""Small helpers every DynamoDB adapter shares: the error code of a ClientError, and a
conditional write whose failed condition is an answer (False), not an error."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from headwater.errors import StorageUnavailable


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def conditional(call: Callable[..., Any], **kwargs: Any) -> bool:
    """Run a conditional write. False if its condition failed; any other failure is
    StorageUnavailable."""
    try:
        call(**kwargs)
    except ClientError as exc:
        if error_code(exc) == "ConditionalCheckFailedException":
            return False
        raise StorageUnavailable(f"storage error: {error_code(exc)}") from exc
    return True
