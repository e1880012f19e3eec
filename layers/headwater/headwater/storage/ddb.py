"""Small helpers every DynamoDB adapter shares: the error code of a ClientError, and a
conditional write whose failed condition is an answer (False), not an error."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from botocore.exceptions import ClientError

from headwater.errors import StorageUnavailable

T = TypeVar("T")


def num(v: int) -> dict[str, str]:
    return {"N": str(v)}


def text(v: str) -> dict[str, str]:
    return {"S": v}


def int_of(item: dict[str, Any], name: str, default: int = 0) -> int:
    v = item.get(name)
    return int(v["N"]) if v is not None else default


def opt_int_of(item: dict[str, Any], name: str) -> int | None:
    v = item.get(name)
    return int(v["N"]) if v is not None else None


def call(fn: Callable[..., T], **kwargs: Any) -> T:
    """A DynamoDB call whose every failure is StorageUnavailable."""
    try:
        return fn(**kwargs)
    except ClientError as exc:
        raise StorageUnavailable(
            f"storage error: {error_code(exc)}", detail={"aws_error": error_code(exc)}
        ) from exc


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


def batch_delete(client: Any, table: str, keys: Sequence[dict[str, Any]]) -> None:
    """Delete items by key, 25 per BatchWriteItem, retrying what comes back unprocessed."""
    for i in range(0, len(keys), 25):
        pending: dict[str, Any] = {table: [{"DeleteRequest": {"Key": k}} for k in keys[i : i + 25]]}
        while pending:
            resp = call(client.batch_write_item, RequestItems=pending)
            pending = resp.get("UnprocessedItems") or {}
