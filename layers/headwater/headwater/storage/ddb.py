"""Small helpers every DynamoDB adapter shares: the error code of a ClientError, a
conditional write whose failed condition is an answer (False), not an error, and the
retry-safe writes (docs/storage.md "Exactly-once writes").

botocore re-sends a request whose response was lost (a reset connection, a read timeout, a
500). If the first attempt applied, the re-sent conditional write finds its own change and
fails its condition: without more, an adapter would report "someone else won" for a write
that succeeded, and the engine would write again. So every write that is not naturally
idempotent is recognisable:

- a transaction carries a ClientRequestToken (DynamoDB answers a repeat with the original
  success for 10 minutes) *and* writes the commit id into the items it puts or updates, with
  ReturnValuesOnConditionCheckFailure=ALL_OLD, so a cancelled repeat shows our own id;
- a single conditional write writes the commit id (attribute `hc`) too, asking for the old
  item on a failed condition: `hc` equal to ours means our earlier attempt applied.

When botocore gives up without an answer (every attempt lost or refused with a retryable
error) the outcome is unknown: the same request (same token, same commit id) is sent again,
with back-off, until storage answers or RESOLVE_BUDGET_S passes; then OutcomeUnknown."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from headwater.errors import OutcomeUnknown, StorageUnavailable

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


CID_ATTR = "hc"  # the commit id of the write that last put or updated an item
RESOLVE_BUDGET_S = 10.0  # re-sending an unanswered write; far inside the token's 10 minutes
_RESEND_BASE_S = 0.05

# Answers that say what happened, whatever earlier attempts of the same call did: the request
# itself is invalid (so no attempt of it ever applied) or the table is not there.
_DEFINITE = frozenset(
    {
        "ValidationException",
        "ResourceNotFoundException",
        "AccessDeniedException",
        "UnrecognizedClientException",
        "IdempotentParameterMismatchException",
        "SerializationException",
        "ItemCollectionSizeLimitExceededException",
        "MissingAuthenticationTokenException",
        "IncompleteSignatureException",
    }
)
# Cancellation reasons that are an answer about the items (a condition evaluated, or the
# request is invalid); the others (TransactionConflict, throttling) say nothing about them.
_EVIDENCE = frozenset(
    {"ConditionalCheckFailed", "ValidationError", "ItemCollectionSizeLimitExceeded"}
)
_SET = re.compile(r"\bSET\b")


def new_cid() -> str:
    """A commit id: 96 random bits, also usable as a ClientRequestToken (1-36 chars)."""
    return uuid.uuid4().hex[:24]


def call(fn: Callable[..., T], **kwargs: Any) -> T:
    """A DynamoDB call whose every failure is StorageUnavailable."""
    try:
        return fn(**kwargs)
    except ClientError as exc:
        raise StorageUnavailable(
            f"storage error: {error_code(exc)}", detail={"aws_error": error_code(exc)}
        ) from exc
    except BotoCoreError as exc:  # no answer at all (connection refused, reset, timed out)
        raise StorageUnavailable(f"storage unreachable: {type(exc).__name__}") from exc


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def mine(item: Mapping[str, Any] | None, cid: str) -> bool:
    """Whether an item (wire form) was last written by the commit `cid`."""
    return bool(item) and item.get(CID_ATTR, {}).get("S") == cid  # type: ignore[union-attr]


def with_cid(kwargs: dict[str, Any], cid: str, *, once: bool = False) -> dict[str, Any]:
    """A PutItem/UpdateItem request (or a transaction's Put/Update) that also writes the
    commit id and returns the old item when its condition fails. `once`: also refuse to apply
    over our own commit id, for a write whose condition would pass again (an ADD, a counter
    step): a repeat then fails and is recognised instead of applying twice."""
    out = dict(kwargs)
    if once:
        guard = f"(attribute_not_exists({CID_ATTR}) OR {CID_ATTR} <> :hc__)"
        cond = out.get("ConditionExpression")
        out["ConditionExpression"] = f"({cond}) AND {guard}" if cond else guard
        out["ExpressionAttributeValues"] = {
            **(out.get("ExpressionAttributeValues") or {}),
            ":hc__": {"S": cid},
        }
    if "Item" in out:
        out["Item"] = {**out["Item"], CID_ATTR: {"S": cid}}
    elif "UpdateExpression" in out:
        expr = out["UpdateExpression"]
        if _SET.search(expr):
            expr = _SET.sub(f"SET {CID_ATTR} = :hc__,", expr, count=1)
        else:
            expr = f"SET {CID_ATTR} = :hc__ {expr}"
        out["UpdateExpression"] = expr
        out["ExpressionAttributeValues"] = {
            **(out.get("ExpressionAttributeValues") or {}),
            ":hc__": {"S": cid},
        }
    if "ConditionExpression" in out:
        out["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
    return out


def _resend_wait(attempt: int, deadline: float, what: str, exc: BaseException) -> None:
    """Back off before re-sending an unanswered write, or give up: OutcomeUnknown."""
    delay = min(1.0, _RESEND_BASE_S * 2**attempt)
    if time.monotonic() + delay > deadline:
        raise OutcomeUnknown(
            f"storage did not confirm the {what}; it may or may not have applied, and will "
            "not apply twice (retry with an idempotency key to learn which)"
        ) from exc
    time.sleep(delay)


def write_once(
    fn: Callable[..., Any],
    cid: str | None = None,
    *,
    once: bool = False,
    conflict: bool = False,
    **kwargs: Any,
) -> dict[str, Any] | None:
    """One retry-safe conditional PutItem/UpdateItem: the response, or None if the condition
    failed because of someone else's write (with `conflict`: {"Conflict": True, "Attributes":
    their item} instead). A failed condition on an item holding our own commit id means an
    earlier attempt of this very write applied: that is success, and the old item stands in
    as the response's Attributes. `once`: see with_cid."""
    cid = cid or new_cid()
    request = with_cid(kwargs, cid, once=once)
    deadline = time.monotonic() + RESOLVE_BUDGET_S
    attempt = 0
    while True:
        try:
            return dict(fn(**request))
        except ClientError as exc:
            code = error_code(exc)
            if code == "ConditionalCheckFailedException":
                old = exc.response.get("Item")
                if mine(old, cid):
                    return {"Attributes": old, "Repeated": True}
                return {"Attributes": old, "Conflict": True} if conflict else None
            if code in _DEFINITE:
                raise StorageUnavailable(
                    f"storage error: {code}", detail={"aws_error": code}
                ) from exc
            _resend_wait(attempt, deadline, "write", exc)
        except BotoCoreError as exc:
            _resend_wait(attempt, deadline, "write", exc)
        attempt += 1


@dataclass(frozen=True, slots=True)
class TxnOutcome:
    """How a retry-safe transaction ended. `reasons` (when not committed): one per item, Code
    and, for a failed condition asked with ALL_OLD, the Item. `retried`: more than one attempt
    was sent, so an earlier one may have applied (look for our commit id in the reasons)."""

    committed: bool
    reasons: list[dict[str, Any]]
    retried: bool


def _retried(exc: ClientError) -> bool:
    return int(exc.response.get("ResponseMetadata", {}).get("RetryAttempts", 0) or 0) > 0


def transact(client: Any, items: list[dict[str, Any]], token: str) -> TxnOutcome:
    """One retry-safe TransactWriteItems under ClientRequestToken `token`: committed (now, or
    in an earlier attempt DynamoDB remembered by the token), or cancelled with reasons that
    say something about the items. Reasons without such evidence (a conflicting transaction
    in flight, throttling) and unanswered attempts are re-sent with the same token; a caller
    that also wrote `token` as the commit id into its items checks `any_mine(reasons, token)`
    when `retried`."""
    deadline = time.monotonic() + RESOLVE_BUDGET_S
    attempt = 0
    retried = False
    while True:
        try:
            client.transact_write_items(TransactItems=items, ClientRequestToken=token)
            return TxnOutcome(True, [], retried)
        except ClientError as exc:
            retried = retried or _retried(exc)
            code = error_code(exc)
            if code == "TransactionCanceledException":
                reasons = list(exc.response.get("CancellationReasons") or [])
                if any(r.get("Code") in _EVIDENCE for r in reasons):
                    return TxnOutcome(False, reasons, retried)
            elif code in _DEFINITE:
                raise StorageUnavailable(
                    f"storage error: {code}", detail={"aws_error": code}
                ) from exc
            _resend_wait(attempt, deadline, "transaction", exc)
        except BotoCoreError as exc:
            _resend_wait(attempt, deadline, "transaction", exc)
        attempt += 1
        retried = True


def mark_cid(items: list[dict[str, Any]], cid: str) -> list[dict[str, Any]]:
    """The transaction with the commit id written into each Put and Update (the ones whose
    item survives the commit; a Delete leaves nothing to recognise)."""
    out: list[dict[str, Any]] = []
    for entry in items:
        ((kind, op),) = entry.items()
        if kind == "Put":
            op = {**op, "Item": {**op["Item"], CID_ATTR: {"S": cid}}}
            if "ConditionExpression" in op:
                op["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        elif kind == "Update":
            expr = op["UpdateExpression"]
            expr = (
                _SET.sub(f"SET {CID_ATTR} = :hc__,", expr, count=1)
                if _SET.search(expr)
                else f"SET {CID_ATTR} = :hc__ {expr}"
            )
            values = {**op.get("ExpressionAttributeValues", {}), ":hc__": {"S": cid}}
            op = {**op, "UpdateExpression": expr, "ExpressionAttributeValues": values}
            if "ConditionExpression" in op:
                op["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        out.append({kind: op})
    return out


def any_mine(reasons: Sequence[Mapping[str, Any]], cid: str) -> bool:
    """Whether a cancelled transaction found an item its own earlier attempt wrote."""
    return any(mine(r.get("Item"), cid) for r in reasons)


def failed_positions(reasons: Sequence[Mapping[str, Any]]) -> set[int]:
    return {i for i, r in enumerate(reasons) if r.get("Code") == "ConditionalCheckFailed"}


def conditional(call: Callable[..., Any], *, once: bool = False, **kwargs: Any) -> bool:
    """Run a conditional write, retry-safe (write_once). False if its condition failed
    because of another writer; any other failure is StorageUnavailable."""
    return write_once(call, once=once, **kwargs) is not None


def delete_once(fn: Callable[..., Any], **kwargs: Any) -> dict[str, Any] | None:
    """A DeleteItem (ReturnValues=ALL_OLD): the deleted item, or None when there was none.
    A deleted item leaves nothing to recognise, so an item found absent after botocore had
    to re-send (an earlier attempt may have deleted it) counts as deleted by us: the caller
    asked for it to be gone, and it is. Unanswered attempts are re-sent (a delete repeats
    safely)."""
    deadline = time.monotonic() + RESOLVE_BUDGET_S
    attempt = 0
    retried = False
    if "ConditionExpression" in kwargs:
        kwargs = {**kwargs, "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}
    while True:
        try:
            resp = fn(ReturnValues="ALL_OLD", **kwargs)
        except ClientError as exc:
            code = error_code(exc)
            if code == "ConditionalCheckFailedException":
                old = exc.response.get("Item")
                return {} if (retried or _retried(exc)) and not old else None
            if code in _DEFINITE:
                raise StorageUnavailable(
                    f"storage error: {code}", detail={"aws_error": code}
                ) from exc
            _resend_wait(attempt, deadline, "delete", exc)
        except BotoCoreError as exc:
            _resend_wait(attempt, deadline, "delete", exc)
        else:
            old = resp.get("Attributes")
            if old:
                return dict(old)
            meta = resp.get("ResponseMetadata", {})
            return {} if retried or int(meta.get("RetryAttempts", 0) or 0) > 0 else None
        attempt += 1
        retried = True


def batch_delete(client: Any, table: str, keys: Sequence[dict[str, Any]]) -> None:
    """Delete items by key, 25 per BatchWriteItem, retrying what comes back unprocessed."""
    for i in range(0, len(keys), 25):
        pending: dict[str, Any] = {table: [{"DeleteRequest": {"Key": k}} for k in keys[i : i + 25]]}
        while pending:
            resp = call(client.batch_write_item, RequestItems=pending)
            pending = resp.get("UnprocessedItems") or {}
