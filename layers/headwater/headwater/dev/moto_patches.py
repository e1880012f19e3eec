"""Fidelity fixes for moto, applied only in the embedded emulator and in tests.

moto's TransactWriteItems deep-copies every table a transaction touches (so its cost grows
with the table, making a long log quadratic) and rolls back by restoring that copy, which
under concurrent requests also erases other requests' writes. DynamoDB itself checks every
condition and then applies all writes atomically; this replacement does exactly that:
phase 1 evaluates all conditions without writing, phase 2 applies, with an item-level undo
log if an apply step raises. Callers must serialize requests: the emulator's server runs
one at a time (moto_serialized.py), and in-process moto (`mock_aws`, used by the test
tiers) is serialized here (`_serialize_in_process`), since one app's worker threads and
two apps in one test call it concurrently.

moto 5.2.5 also ignores TransactWriteItems' ClientRequestToken (a retried transaction whose
first attempt applied fails its conditions, where DynamoDB answers success): `_token_cache`
gives it DynamoDB's semantics. A token seen on a committed transaction in the last 10
minutes answers success again without applying anything when the request is identical, and
IdempotentParameterMismatchException when it is not. HEADWATER_EMULATOR_TOKENS=off turns
this off (stock moto) so tests can also prove the commit-id path, which works without it."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from typing import Any

_APPLIED = False
TOKEN_WINDOW_S = 600.0
ENV_TOKENS = "HEADWATER_EMULATOR_TOKENS"
_tokens: dict[str, tuple[str, float]] = {}
_tokens_lock = threading.Lock()


def tokens_enabled() -> bool:
    return os.environ.get(ENV_TOKENS, "on").lower() not in ("off", "0", "false", "no")


def _fingerprint(body: dict[str, Any]) -> str:
    payload = json.dumps(
        body.get("TransactItems"), sort_keys=True, separators=(",", ":"), default=repr
    )
    return hashlib.sha256(payload.encode()).hexdigest()


def _token_cache() -> None:
    from moto.core.responses import ActionResult
    from moto.dynamodb.exceptions import DynamodbException
    from moto.dynamodb.responses import DynamoHandler

    class IdempotentParameterMismatch(DynamodbException):
        error_type = "com.amazonaws.dynamodb.v20120810#IdempotentParameterMismatchException"

        def __init__(self) -> None:
            super().__init__(
                self.error_type,
                message="Request was submitted with a ClientRequestToken already used "
                "for a different request",
            )

    original = DynamoHandler.transact_write_items

    def transact_write_items(self: Any) -> ActionResult:
        token = self.body.get("ClientRequestToken")
        if not token or not tokens_enabled():
            return original(self)
        fingerprint = _fingerprint(self.body)
        now = time.monotonic()
        with _tokens_lock:
            for old in [t for t, (_, at) in _tokens.items() if now - at > TOKEN_WINDOW_S]:
                del _tokens[old]
            seen = _tokens.get(token)
        if seen is not None:
            if seen[0] != fingerprint:
                raise IdempotentParameterMismatch()
            return ActionResult({"ConsumedCapacity": [], "ItemCollectionMetrics": {}})
        result = original(self)  # raises when cancelled: only committed tokens are kept
        with _tokens_lock:
            _tokens[token] = (fingerprint, time.monotonic())
        return result

    DynamoHandler.transact_write_items = transact_write_items  # type: ignore[method-assign]


def apply() -> None:
    global _APPLIED
    if _APPLIED:
        return
    from moto.dynamodb.comparisons import get_filter_expression
    from moto.dynamodb.exceptions import (
        ConditionalCheckFailed,
        MockValidationException,
        MultipleTransactionsException,
        TooManyTransactionsException,
        TransactionCanceledException,
        TransactWriteSingleOpException,
    )
    from moto.dynamodb.models import DynamoDBBackend

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        if len(transact_items) > 100:
            raise TooManyTransactionsException()
        seen: set[tuple[str, str]] = set()
        planned: list[tuple[str, dict[str, Any], str, dict[str, Any], Any]] = []
        errors: list[tuple[str | None, str | None, dict[str, Any] | None]] = []
        for entry in transact_items:
            if len(entry) > 1:
                raise TransactWriteSingleOpException
            op_type, op = next(iter(entry.items()))
            if op_type not in {"ConditionCheck", "Put", "Delete", "Update"}:
                raise ValueError("Unsupported transaction operation")
            table_name = op["TableName"]
            table = self.get_table(table_name)
            if op_type == "Put":
                attrs = op["Item"]
                key = {table.hash_key_attr: attrs[table.hash_key_attr]}
                if table.range_key_attr is not None:
                    key[table.range_key_attr] = attrs[table.range_key_attr]
            else:
                key = op["Key"]
            ident = (str(table_name), str(dict(sorted(key.items()))))
            if ident in seen:
                raise MultipleTransactionsException()
            seen.add(ident)
            current = self.get_item(table_name, key)
            cond = op.get("ConditionExpression")
            if cond is not None:
                check = get_filter_expression(
                    cond, op.get("ExpressionAttributeNames"), op.get("ExpressionAttributeValues")
                )
                if not check.expr(current):
                    old = None
                    if op.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD" and current:
                        old = current.to_json()["Attributes"]
                    errors.append(("ConditionalCheckFailed", "The conditional request failed", old))
                    continue
            errors.append((None, None, None))
            planned.append((op_type, op, table_name, key, current))
        if any(code is not None for code, _, _ in errors):
            raise TransactionCanceledException(errors)

        undo: list[tuple[str, dict[str, Any], Any]] = []
        try:
            for op_type, op, table_name, key, current in planned:
                if op_type == "ConditionCheck":
                    continue
                undo.append((table_name, key, current.to_json()["Attributes"] if current else None))
                names = op.get("ExpressionAttributeNames")
                values = op.get("ExpressionAttributeValues")
                if op_type == "Put":
                    self.put_item(table_name, op["Item"])
                elif op_type == "Delete":
                    self.delete_item(table_name, key)
                else:
                    self.update_item(
                        table_name,
                        key,
                        update_expression=op["UpdateExpression"],
                        expression_attribute_names=names,
                        expression_attribute_values=values,
                    )
        except (MockValidationException, ConditionalCheckFailed):
            for table_name, key, old_attrs in reversed(undo):
                if old_attrs is None:
                    self.delete_item(table_name, key)
                else:
                    self.put_item(table_name, old_attrs)
            raise

    DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]
    _token_cache()
    _memoize_dispatch()
    _partition_local_query()
    _serialize_in_process()
    _APPLIED = True


def _serialize_in_process() -> None:
    """In-process moto answers each request on the calling thread, so concurrent callers
    interleave inside one conditional write (two conditional PutItems both pass their
    check). DynamoDB makes each request atomic; one lock around moto's request processing
    gives the in-process mock the same one-at-a-time semantics as the emulator's server."""
    from moto.core.botocore_stubber import BotocoreStubber

    original = BotocoreStubber.process_request
    lock = threading.RLock()

    def process_request(self: Any, request: Any) -> Any:
        with lock:
            return original(self, request)

    BotocoreStubber.process_request = process_request  # type: ignore[method-assign]


def _memoize_dispatch() -> None:
    """Two lookups moto's server repeats on every request, whose answers never change in a
    process: which service packages moto has (os.listdir + isdir over its install, for
    every request whose Host names no service: all of ours) and which handler methods a
    response class has (inspect.getmembers). Together they were ~15% of the emulator's CPU
    per DynamoDB call."""
    from moto import backends
    from moto.core import responses

    modules = tuple(backends.list_of_moto_modules())
    setattr(backends, "list_of_moto_modules", lambda: modules)  # noqa: B010

    names_of = getattr(responses, "method_names_from_class")  # noqa: B009
    known: dict[type, frozenset[str]] = {}

    def method_names_from_class(clazz: object) -> frozenset[str]:
        cls = clazz if isinstance(clazz, type) else type(clazz)
        names = known.get(cls)
        if names is None:
            names = known[cls] = frozenset(names_of(clazz))
        return names

    setattr(responses, "method_names_from_class", method_names_from_class)  # noqa: B010


def _partition_local_query() -> None:
    """moto answers every Query on a table by sorting *all* the table's items (every
    partition) and then keeping the queried one, so a Query's cost grows with the table
    rather than with its partition: with a few tens of thousands of hot-tail and lease items
    the emulator spent ~90% of its CPU there and appends timed out under load. DynamoDB
    reads one partition. For a Query on the base table (no index) `all_items` is pointed
    at the queried partition for the duration of the call; moto's own code then filters,
    sorts by range key, pages and projects exactly as before. Index queries are unchanged."""
    from moto.dynamodb.models.table import Table

    original_query = Table.query
    original_all_items = Table.all_items
    local = threading.local()

    def all_items(self: Any) -> Any:
        hint = getattr(local, "partition", None)
        if hint is not None and hint[0] is self and self.range_key_attr:
            return list(self.items.get(hint[1], {}).values())
        return original_all_items(self)

    def query(self: Any, hash_key: Any, *args: Any, **kwargs: Any) -> Any:
        index_name = kwargs.get("index_name") if len(args) < 7 else args[6]
        if index_name or hash_key is None:
            return original_query(self, hash_key, *args, **kwargs)
        local.partition = (self, hash_key)
        try:
            return original_query(self, hash_key, *args, **kwargs)
        finally:
            local.partition = None

    Table.all_items = all_items  # type: ignore[method-assign]
    Table.query = query  # type: ignore[method-assign]
