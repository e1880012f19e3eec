"""The DynamoDB adapter of the heads port (HeadStore): a topic's head item — the counter
every append reserves its seqs from, its state, its conditional ext writes — and the
listing of live heads. The only module (with log_tail.py and blobs.py) that speaks the
DynamoDB wire format or sees ClientError; AWS errors become engine errors here."""

from __future__ import annotations

import dataclasses
import json
import random
import threading
import time
from collections.abc import Sequence
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from headwater.engine.ports import (
    AppendRejected,
    Head,
    ProducerClaim,
    Reservation,
)
from headwater.errors import StorageUnavailable, Throttled
from headwater.settings import Settings
from headwater.storage.ddb import (
    any_mine,
    conditional,
    error_code,
    mark_cid,
    new_cid,
    transact,
    write_once,
)
from headwater.storage.ddb import call as _call
from headwater.storage.ddb import int_of as _i
from headwater.storage.ddb import num as _n
from headwater.storage.ddb import opt_int_of as _opt_i
from headwater.storage.ddb import text as _s
from headwater.storage.head_items import (
    INTERNAL_PREFIX,
    LIVE_GSI_KEY,
    claim_hit,
    claim_op,
    ext_condition,
    head_from_item,
    head_to_item,
    read_head,
)
from headwater.storage.schema import HEADS, INDEX

THROTTLE_CODES = frozenset(
    {"ThrottlingException", "ProvisionedThroughputExceededException", "RequestLimitExceeded"}
)
_fast = threading.local()


class _ThrottledNow(Exception):
    """Raised out of botocore's retry decision for a throttled call made under fail_fast."""


def _no_throttle_retry(response: Any = None, **_: Any) -> None:
    """botocore's `needs-retry` event for UpdateItem: under fail_fast, a throttled answer
    ends the call (nothing of it applied) instead of botocore's back-off (1 s base, random,
    up to 8 attempts: seconds billed in a Lambda doing nothing)."""
    if getattr(_fast, "on", False) and response is not None:
        parsed = response[1] if isinstance(response, tuple) else {}
        if parsed.get("Error", {}).get("Code") in THROTTLE_CODES:
            raise _ThrottledNow(parsed["Error"]["Code"])


class DynamoHeadStore:
    """Heads: one item per topic, whose counter hands out seqs (reserve). A head read is
    one GetItem: the item holds every seq reserved and every counter."""

    def __init__(self, client: Any, settings: Settings) -> None:
        self._ddb = client
        self._table = settings.table_name(HEADS.logical)
        self._index_table = settings.table_name(INDEX.logical)
        events = getattr(getattr(client, "meta", None), "events", None)
        if events is not None:  # one registration per client, however many stores
            events.register(
                "needs-retry.dynamodb.UpdateItem",
                _no_throttle_retry,
                unique_id="headwater-reserve-fail-fast",
            )

    def get(self, topic: str, *, consistent: bool = True) -> Head | None:
        return read_head(self._ddb, self._table, topic, consistent)

    def reserve(
        self,
        head: Head,
        n: int,
        nbytes: int,
        ts: int,
        *,
        ext: str | None = None,
        max_count: int | None = None,
        max_bytes: int | None = None,
        patient: bool = True,
    ) -> Reservation:
        """One UpdateItem: ADD n to the head seq (and every counter with it), iff the head is
        live in its epoch with the config (and ext, caps) the append was judged on.
        UPDATED_OLD returns the counters before the step: our seqs follow its head seq. The
        commit id
        (`once`) makes a re-sent step that applied fail instead of stepping twice, unless
        another reservation came between (then ours applies again, and its first seqs
        are a hole readers fill)."""
        cond = "ep = :ep AND attribute_not_exists(dl) AND cfg = :cfg"
        values: dict[str, Any] = {
            ":ep": _n(head.epoch),
            ":cfg": _s(json.dumps(head.config, sort_keys=True)),
            ":n": _n(n),
            ":b": _n(nbytes),
            ":ts": _n(ts),
        }
        if ext is not None:
            ext_cond, ext_values = ext_condition(ext)
            cond += f" AND {ext_cond}"
            values.update(ext_values)
        if max_count is not None:
            cond += " AND cnt <= :mc"
            values[":mc"] = _n(max_count)
        if max_bytes is not None:
            cond += " AND byt <= :mb"
            values[":mb"] = _n(max_bytes)
        _fast.on = not patient
        try:
            got = self._step(head, cond, values)
        except _ThrottledNow as exc:
            # The topic is at its write ceiling (its head key): nothing was reserved, and the
            # client is told to come back rather than waiting here (spec: 429 throttled).
            raise Throttled(
                f"topic {head.topic!r} is at its write rate; retry",
                # sub-second and spread (HTTP's Retry-After is whole seconds): writers that
                # come back at once, but not together, keep the topic at its ceiling
                detail={
                    "topic": head.topic,
                    "aws_error": str(exc),
                    "retry_after_ms": random.randint(20, 200),
                },
                headers={"Retry-After": "1"},
            ) from None
        finally:
            _fast.on = False
        assert got is not None  # `conflict`: a failed condition answers with the item
        old = got.get("Attributes")
        if got.get("Conflict"):
            raise AppendRejected(True, {}, head_from_item(old) if old else None)
        assert old is not None
        if got.get("Repeated"):
            # our earlier attempt applied and nobody stepped since: the item (all of it, from
            # the failed condition) is just after it
            after = head_from_item(old)
            before = dataclasses.replace(
                after.reserved(-n, -nbytes, after.last_write_ts or ts),
                last_write_ts=None,
            )
        else:
            before = dataclasses.replace(
                head,
                head_seq=_i(old, "hs"),
                appended=_i(old, "ac"),
                appended_bytes=_i(old, "ab"),
                count=_i(old, "cnt"),
                bytes=_i(old, "byt"),
                unsealed_bytes=_i(old, "ub"),
                last_write_ts=_opt_i(old, "lw"),
            )
            after = before.reserved(n, nbytes, ts)
        meta = got.get("ResponseMetadata", {})
        return Reservation(
            first_seq=before.head_seq + 1,
            last_seq=before.head_seq + n,
            ts=max(ts, before.last_write_ts or 0),
            appended_bytes=before.appended_bytes + nbytes,
            head=after,
            retried=bool(got.get("Repeated")) or int(meta.get("RetryAttempts", 0) or 0) > 0,
        )

    def _step(self, head: Head, cond: str, values: dict[str, Any]) -> dict[str, Any] | None:
        return write_once(
            self._ddb.update_item,
            once=True,
            conflict=True,
            TableName=self._table,
            Key={"pk": _s(head.topic)},
            UpdateExpression="SET lw = :ts ADD hs :n, ac :n, ab :b, cnt :n, byt :b, ub :b",
            ConditionExpression=cond,
            ExpressionAttributeValues=values,
            # the counters before the step (what was updated), not the whole item: the rest
            # is as `head` says, or the condition would have failed
            ReturnValues="UPDATED_OLD",
        )

    def get_many(self, topics: Sequence[str], *, consistent: bool = True) -> dict[str, Head]:
        return self._batch_get(list(dict.fromkeys(topics)), consistent=consistent)

    def create(self, head: Head, *, replacing: Head | None) -> bool:
        if replacing is None:
            cond: dict[str, Any] = {"ConditionExpression": "attribute_not_exists(pk)"}
        else:
            cond = {
                "ConditionExpression": "attribute_exists(dl) AND ep = :ep",
                "ExpressionAttributeValues": {":ep": _n(replacing.epoch)},
            }
        return conditional(
            self._ddb.put_item, TableName=self._table, Item=head_to_item(head), **cond
        )

    def put_config(self, head: Head, config: dict[str, Any]) -> bool:
        return conditional(
            self._ddb.update_item,
            TableName=self._table,
            Key={"pk": _s(head.topic)},
            UpdateExpression="SET cfg = :cfg",
            ConditionExpression="ep = :ep AND attribute_not_exists(dl)",
            ExpressionAttributeValues={
                ":cfg": _s(json.dumps(config, sort_keys=True)),
                ":ep": _n(head.epoch),
            },
        )

    def put_ext(self, head: Head, ext: str, claim: ProducerClaim | None = None) -> bool:
        if not ext:
            raise ValueError("ext must not be empty")
        cond, values = ext_condition(head.ext)
        values.update({":x2": _s(ext), ":ep": _n(head.epoch), ":h": _n(head.head_seq)})
        update: dict[str, Any] = {
            "TableName": self._table,
            "Key": {"pk": _s(head.topic)},
            "UpdateExpression": "SET x = :x2",
            "ConditionExpression": f"ep = :ep AND hs = :h AND attribute_not_exists(dl) AND {cond}",
            "ExpressionAttributeValues": values,
        }
        if claim is None:
            return conditional(self._ddb.update_item, **update)
        # the ext and a producer's claim at once (a close-only write with producer headers)
        cid = new_cid()
        now = int(time.time() * 1000)
        items = [
            *mark_cid([{"Update": update}], cid),
            claim_op(
                self._index_table,
                head.topic,
                head.epoch,
                claim,
                head.head_seq,
                cid,
                now,
                ordered=False,
            ),
        ]
        outcome = transact(self._ddb, items, cid)
        if outcome.committed or any_mine(outcome.reasons, cid):
            return True
        reasons = outcome.reasons
        if len(reasons) > 1 and reasons[1].get("Code") == "ConditionalCheckFailed":
            raise AppendRejected(False, {}, claim_hits={claim.producer: claim_hit(reasons[1])})
        return False

    def mark_deleted(self, head: Head, *, if_empty: bool, if_ext: str | None = None) -> bool:
        """Replace the head with its deleted marker, iff nothing was reserved since `head`
        was read (so every seq of the incarnation is one the delete saw). A writer that
        reserved before may still put its frame: it lands in a log nobody reads, and its
        append is ordered before the delete. Reservations after it fail (`dl`)."""
        marker = Head(
            topic=head.topic,
            epoch=head.epoch,
            deleted=True,
            config=head.config,
            prev_head_seq=head.head_seq,
        )
        cond = "ep = :ep AND attribute_not_exists(dl) AND hs = :hs"
        values: dict[str, Any] = {":ep": _n(head.epoch), ":hs": _n(head.head_seq)}
        if if_empty:
            cond += " AND cnt = :c0"  # counts every seq reserved, appends in flight too
            values[":c0"] = _n(0)
        if if_ext is not None:
            ext_cond, ext_values = ext_condition(if_ext)
            cond += f" AND {ext_cond}"
            values.update(ext_values)
        return conditional(
            self._ddb.put_item,
            TableName=self._table,
            Item=head_to_item(marker),
            ConditionExpression=cond,
            ExpressionAttributeValues=values,
        )

    def list_live(self, prefix: str, after: str | None, limit: int) -> list[Head]:
        if after is not None and prefix and not after.startswith(prefix):
            # DynamoDB rejects an ExclusiveStartKey outside the key condition ("does not match
            # the range key predicate"). Such a cursor sorts before every prefixed name (drop
            # it) or after all of them (nothing left). str order == UTF-8 byte order.
            if after > prefix:
                return []
            after = None
        key_cond = "gk = :gk"
        values: dict[str, Any] = {":gk": _s(LIVE_GSI_KEY)}
        if prefix:
            key_cond += " AND begins_with(pk, :p)"
            values[":p"] = _s(prefix)
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "IndexName": HEADS.indexes[0].name,
            "KeyConditionExpression": key_cond,
            "ExpressionAttributeValues": values,
            "Limit": limit,
        }
        if after is not None:
            kwargs["ExclusiveStartKey"] = {"gk": _s(LIVE_GSI_KEY), "pk": _s(after)}
        names: list[str] = []
        while len(names) < limit:
            resp = _call(self._ddb.query, **kwargs)
            names.extend(it["pk"]["S"] for it in resp.get("Items", []))
            lek = resp.get("LastEvaluatedKey")
            if not lek:
                break
            kwargs["ExclusiveStartKey"] = lek
            kwargs["Limit"] = limit - len(names)
        # The index is KEYS_ONLY (so appends never write it); the heads come from the table,
        # strongly consistent. A topic deleted in between simply drops out of the page.
        heads = self._batch_get(names[:limit])
        return [heads[n] for n in names[:limit] if n in heads and not heads[n].deleted]

    def _batch_get(self, names: list[str], *, consistent: bool = True) -> dict[str, Head]:
        out: dict[str, Head] = {}
        for i in range(0, len(names), 100):
            request: dict[str, Any] = {
                self._table: {
                    "Keys": [{"pk": _s(n)} for n in names[i : i + 100]],
                    "ConsistentRead": consistent,
                }
            }
            while request:
                resp = _call(self._ddb.batch_get_item, RequestItems=request)
                for item in resp.get("Responses", {}).get(self._table, []):
                    head = head_from_item(item)
                    out[head.topic] = head
                request = resp.get("UnprocessedKeys") or {}
        return out

    def count_live(self, internal: bool = True) -> int:
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "IndexName": HEADS.indexes[0].name,
            "KeyConditionExpression": "gk = :gk",
            "ExpressionAttributeValues": {":gk": _s(LIVE_GSI_KEY)},
            "Select": "COUNT",
        }
        if not internal:
            # internal names start with "~", after every character a /v0 name may hold
            kwargs["KeyConditionExpression"] += " AND pk < :internal"
            kwargs["ExpressionAttributeValues"][":internal"] = _s(INTERNAL_PREFIX)
        total = 0
        while True:
            resp = _call(self._ddb.query, **kwargs)
            total += int(resp.get("Count", 0))
            lek = resp.get("LastEvaluatedKey")
            if not lek:
                return total
            kwargs["ExclusiveStartKey"] = lek

    def total_live_bytes(self) -> int:
        """Sum of retained record bytes over live topics: one paged Scan of the heads table
        (the byte quota's recount; it runs only when that cap refuses a write)."""
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "ProjectionExpression": "byt",
            "FilterExpression": "attribute_exists(gk)",
        }
        total = 0
        while True:
            resp = _call(self._ddb.scan, **kwargs)
            total += sum(_i(it, "byt") for it in resp.get("Items", []))
            lek = resp.get("LastEvaluatedKey")
            if not lek:
                return total
            kwargs["ExclusiveStartKey"] = lek

    def touch_read(self, head: Head, ts: int) -> None:
        try:
            self._ddb.update_item(
                TableName=self._table,
                Key={"pk": _s(head.topic)},
                UpdateExpression="SET lr = :ts",
                ConditionExpression="ep = :ep AND attribute_not_exists(dl)",
                ExpressionAttributeValues={":ts": _n(ts), ":ep": _n(head.epoch)},
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise StorageUnavailable(f"storage error: {error_code(exc)}") from exc
        except BotoCoreError as exc:
            raise StorageUnavailable(f"storage unreachable: {type(exc).__name__}") from exc

    def clear_tag_pending(self, head: Head, frame_seq: int) -> None:
        try:
            self._ddb.update_item(
                TableName=self._table,
                Key={"pk": _s(head.topic)},
                UpdateExpression="REMOVE tp.#k",
                ConditionExpression="ep = :ep",
                ExpressionAttributeNames={"#k": str(frame_seq)},
                ExpressionAttributeValues={":ep": _n(head.epoch)},
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise StorageUnavailable(f"storage error: {error_code(exc)}") from exc
        except BotoCoreError as exc:
            raise StorageUnavailable(f"storage unreachable: {type(exc).__name__}") from exc
