"""DynamoDB adapters for the heads and log-tail ports. The only module (with blobs.py) that
speaks the DynamoDB wire format or sees ClientError; AWS errors become engine errors here."""

from __future__ import annotations

import dataclasses
import json
import random
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from headwater.engine.ports import (
    AppendCommit,
    AppendRejected,
    BlobStore,
    DeleteCommit,
    EvictCommit,
    FrameDelete,
    FrameSummary,
    Head,
    IdemHit,
    KnownRecords,
    ProducerClaim,
    Reservation,
    TagEntry,
    frame_pk,
)
from headwater.engine.records import Frame, StoredRecord, decode_records
from headwater.errors import StorageUnavailable, Throttled
from headwater.settings import Settings
from headwater.storage.ddb import (
    CID_ATTR,
    any_mine,
    batch_delete,
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
from headwater.storage.frame_chain import DynamoFrameChain
from headwater.storage.schema import HEADS, INDEX, LOG

LIVE_GSI_KEY = "topic"
_BATCH_GET_MAX = 100

INTERNAL_PREFIX = "~"  # the surfaces' internal logs: ~ds/, ~flags/, ~aviso/


def head_from_item(item: dict[str, Any]) -> Head:
    tp = item.get("tp", {}).get("M", {})
    return Head(
        topic=item["pk"]["S"],
        epoch=_i(item, "ep", 1),
        head_seq=_i(item, "hs"),
        earliest_seq=_i(item, "es", 1),
        evict_floor=_i(item, "ef", 1),
        count=_i(item, "cnt"),
        bytes=_i(item, "byt"),
        config=json.loads(item["cfg"]["S"]) if "cfg" in item else {},
        created_ms=_i(item, "cr"),
        last_write_ts=_opt_i(item, "lw"),
        last_read_ts=_opt_i(item, "lr"),
        del_ver=_i(item, "dv"),
        tag_pending={int(k): int(v["N"]) for k, v in tp.items()},
        deleted="dl" in item,
        sealed_through=_i(item, "st"),
        trimmed_through=_i(item, "tt"),
        unsealed_bytes=max(0, _i(item, "ub")),
        evictions=decode_evictions(item.get("ev", {}).get("S", "")),
        prev_head_seq=_i(item, "ph"),
        ext=item["x"]["S"] if "x" in item else "",
        appended=_i(item, "ac"),
        appended_bytes=_i(item, "ab"),
        partitions=_i(item, "lp", 1),
    )


HOLE_ATTR = "hl"  # a hole: seqs reserved that no append committed (no records)


PRODUCER_TTL_S = 30 * 86_400  # an idempotent producer idle this long starts over


def producer_pk(topic: str, epoch: int) -> str:
    return f"p#{topic}#{epoch}"


def claim_op(
    table: str,
    topic: str,
    epoch: int,
    claim: ProducerClaim,
    at: int,
    cid: str,
    now_ms: int,
    *,
    ordered: bool = True,
) -> dict[str, Any]:
    """A producer's claim as a transaction item (docs/storage.md "Producers"): its state
    moves to (epoch, seq) and its last frame key to `at`, iff it takes that write next (and,
    `ordered`, its last frame is before `at`); a refusal returns the stored state."""
    values: dict[str, Any] = {
        ":e": _n(claim.epoch),
        ":q": _n(claim.seq),
        ":s": _n(at),
        ":ttl": _n(now_ms // 1000 + PRODUCER_TTL_S),
        ":cid": _s(cid),
    }
    if claim.seq == 0:
        cond = "(attribute_not_exists(pk) OR e < :e)"
    else:
        cond = "e = :e AND q = :qp"
        values[":qp"] = _n(claim.seq - 1)
    if ordered:
        cond += " AND (attribute_not_exists(s) OR s < :s)"
    return {
        "Update": {
            "TableName": table,
            "Key": {"pk": _s(producer_pk(topic, epoch)), "sk": _s(claim.producer)},
            "UpdateExpression": f"SET e = :e, q = :q, s = :s, #ttl = :ttl, {CID_ATTR} = :cid",
            "ConditionExpression": cond,
            "ExpressionAttributeNames": {"#ttl": "ttl"},
            "ExpressionAttributeValues": values,
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
    }


def claim_hit(reason: dict[str, Any]) -> tuple[int, int, int] | None:
    """The stored (epoch, seq, last frame key) a refused claim returned (None: no state)."""
    old = reason.get("Item")
    if not old or "e" not in old:
        return None
    return _i(old, "e"), _i(old, "q"), _i(old, "s")


def _ext_condition(expected: str) -> tuple[str, dict[str, Any]]:
    """The condition that a head's ext attribute still holds `expected` ("" = absent)."""
    if not expected:
        return "attribute_not_exists(x)", {}
    return "x = :x1", {":x1": _s(expected)}


def encode_evictions(runs: Sequence[tuple[int, str]]) -> str:
    return ",".join(f"{upto}:{reason}" for upto, reason in runs)


def decode_evictions(raw: str) -> tuple[tuple[int, str], ...]:
    out: list[tuple[int, str]] = []
    for part in raw.split(","):
        if part:
            upto, _, reason = part.partition(":")
            out.append((int(upto), reason))
    return tuple(out)


def head_to_item(h: Head) -> dict[str, Any]:
    item: dict[str, Any] = {
        "pk": _s(h.topic),
        "ep": _n(h.epoch),
        "hs": _n(h.head_seq),
        "es": _n(h.earliest_seq),
        "ef": _n(h.evict_floor),
        "cnt": _n(h.count),
        "byt": _n(h.bytes),
        "cfg": _s(json.dumps(h.config, sort_keys=True)),
        "cr": _n(h.created_ms),
        "dv": _n(h.del_ver),
        "tp": {"M": {str(k): _n(v) for k, v in h.tag_pending.items()}},
        "st": _n(h.sealed_through),
        "tt": _n(h.trimmed_through),
        "ub": _n(h.unsealed_bytes),
        "ph": _n(h.prev_head_seq),
        "ac": _n(h.appended),
        "ab": _n(h.appended_bytes),
        "lp": _n(h.partitions),
    }
    if h.evictions:
        item["ev"] = _s(encode_evictions(h.evictions))
    if h.ext:
        item["x"] = _s(h.ext)
    if h.last_write_ts is not None:
        item["lw"] = _n(h.last_write_ts)
    if h.last_read_ts is not None:
        item["lr"] = _n(h.last_read_ts)
    if h.deleted:
        item["dl"] = {"BOOL": True}
    else:
        item["gk"] = _s(LIVE_GSI_KEY)
    return item


# Throttling answers that mean nothing was applied: a key (here a topic's head) past its
# write rate. A reservation that must not wait for them answers 429 instead (fail_fast).
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
            ext_cond, ext_values = _ext_condition(ext)
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
        cond, values = _ext_condition(head.ext)
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
            ext_cond, ext_values = _ext_condition(if_ext)
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


def _tag_sk(tag: str, frame_seq: int) -> str:
    # The fixed-width suffix makes the tag recoverable exactly whatever bytes it contains.
    return f"{tag}\x00{frame_seq:020d}"


def read_head(client: Any, heads_table: str, topic: str, consistent: bool) -> Head | None:
    """The topic's head item, or None if there is none."""
    item = _call(
        client.get_item, TableName=heads_table, Key={"pk": _s(topic)}, ConsistentRead=consistent
    ).get("Item")
    return head_from_item(item) if item is not None else None


class DynamoLogTailStore:
    def __init__(self, client: Any, settings: Settings, blobs: BlobStore) -> None:
        self._ddb = client
        self._heads_table = settings.table_name(HEADS.logical)
        self._log_table = settings.table_name(LOG.logical)
        self._index_table = settings.table_name(INDEX.logical)
        self._blobs = blobs
        # Spilled frames of one read are fetched concurrently, and a chain read queries its
        # partitions together; one pool for the adapter.
        self._blob_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="headwater-s3")
        self._chain = DynamoFrameChain(
            client,
            settings,
            ThreadPoolExecutor(max_workers=8, thread_name_prefix="headwater-chain"),
        )

    # --- append -------------------------------------------------------------------------
    def commit_append(self, c: AppendCommit) -> bool:
        """Write the group commit at its reserved key: the frame alone (`c.single`), or in one
        transaction with its tag entries, idempotency keys and, for a guarded append that
        changes it, the head's ext (or, creating the topic, the head itself). Returns True
        when storage showed that an earlier attempt of this same commit applied (its
        response was lost and the retry found the commit id)."""
        cid = c.cid or new_cid()
        base = c.new_head or c.expected
        assert base is not None
        frame: dict[str, Any] = {
            # Keyed by its first seq (a reserved one: nobody else writes there but a reader
            # that fills the slot as a hole once its writer is overdue), in its partition.
            "pk": _s(base.frame_pk(c.first_seq)),
            "sk": _n(c.first_seq),
            "ls": _n(c.last_seq),
            "ts": _n(c.ts),
            "sz": _n(c.payload_bytes),
            "dn": _n(0),
            "dz": _n(0),
            "ab": _n(c.appended_bytes),
            CID_ATTR: _s(cid),
        }
        if c.expires_s is not None:
            frame["ttl"] = _n(c.expires_s)
        if c.spill_key is not None:
            frame["s3"] = _s(c.spill_key)
        else:
            assert c.blob is not None
            frame["rb"] = {"B": c.blob}
        if c.single:
            return self._put_frame(c, frame, cid)
        items: list[dict[str, Any]] = [
            {
                "Put": {
                    "TableName": self._log_table,
                    "Item": frame,
                    "ConditionExpression": "attribute_not_exists(pk)",
                    # the frame holding our commit id: an earlier attempt of ours applied
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            }
        ]
        head_op = self._head_op(c, cid)
        if head_op is not None:
            items.append(head_op)
        epoch = base.epoch
        tag_pk = f"t#{c.topic}#{epoch}"
        for e in c.tag_entries:
            items.append(
                {
                    "Put": {
                        "TableName": self._index_table,
                        "Item": {
                            "pk": _s(tag_pk),
                            "sk": _s(_tag_sk(e.tag, e.frame_seq)),
                            "q": _s(",".join(map(str, e.seqs))),
                        },
                    }
                }
            )
        claim_start = len(items)
        for claim in c.claims:
            items.append(claim_op(self._index_table, c.topic, epoch, claim, c.first_seq, cid, c.ts))
        idem_start = len(items)
        idem_pk = f"i#{c.topic}#{epoch}"
        for ie in c.idem:
            items.append(
                {
                    "Put": {
                        "TableName": self._index_table,
                        "Item": {
                            "pk": _s(idem_pk),
                            "sk": _s(ie.key),
                            "f": _n(ie.first_seq),
                            "l": _n(ie.last_seq),
                            "ex": _n(ie.expires_ms),
                            "ttl": _n(ie.expires_ms // 1000 + 1),
                            CID_ATTR: _s(cid),
                        },
                        "ConditionExpression": "attribute_not_exists(pk) OR ex < :now",
                        "ExpressionAttributeValues": {":now": _n(c.ts)},
                        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                    }
                }
            )
        outcome = transact(self._ddb, items, cid)
        if outcome.committed:
            return False
        reasons = outcome.reasons
        if any_mine(reasons, cid):
            return True  # an earlier attempt of this commit applied
        frame_code = reasons[0].get("Code") if reasons else None
        slot_lost = frame_code == "ConditionalCheckFailed"
        head_conflict = False
        current: Head | None = None
        hits: dict[str, IdemHit | None] = {}
        claim_hits: dict[str, tuple[int, int, int] | None] = {}
        for idx, reason in enumerate(reasons):
            rcode = reason.get("Code", "None")
            if rcode in ("None", None, "") or idx == 0:
                continue
            if claim_start <= idx < idem_start and rcode == "ConditionalCheckFailed":
                claim_hits[c.claims[idx - claim_start].producer] = claim_hit(reason)
            elif idx >= idem_start and rcode == "ConditionalCheckFailed":
                old = reason.get("Item")
                key = c.idem[idx - idem_start].key
                hits[key] = IdemHit(_i(old, "f"), _i(old, "l")) if old else None
            elif idx == 1 and head_op is not None and rcode == "ConditionalCheckFailed":
                head_conflict = True
                if reason.get("Item"):
                    current = head_from_item(reason["Item"])
            elif rcode in ("ThrottlingError", "ProvisionedThroughputExceeded"):
                raise StorageUnavailable(f"storage throttled: {rcode}")
            else:
                head_conflict = True
        if not reasons:
            head_conflict = True
        if c.new_head is not None and head_conflict and current is None:
            current = self._current_head(c.topic)
        raise AppendRejected(
            head_conflict, hits, current, slot_lost=slot_lost, claim_hits=claim_hits
        )

    def _put_frame(self, c: AppendCommit, frame: dict[str, Any], cid: str) -> bool:
        """The one-write append: the frame at its reserved key, iff the key is free. A failed
        condition on a frame holding our commit id is our own earlier attempt (a lost
        answer, re-sent); anything else there is a hole a reader filled because we were
        late: the seqs are lost to us, and the append reserves again."""
        got = write_once(
            self._ddb.put_item,
            cid,
            conflict=True,
            TableName=self._log_table,
            Item=frame,
            ConditionExpression="attribute_not_exists(pk)",
        )
        assert got is not None  # `conflict`: a failed condition answers with the holder
        if got.get("Conflict"):
            raise AppendRejected(False, {}, None, slot_lost=True)
        return bool(got.get("Repeated"))

    def _current_head(self, topic: str) -> Head | None:
        return read_head(self._ddb, self._heads_table, topic, True)

    def fill_hole(
        self,
        head: Head,
        first_seq: int,
        last_seq: int | None = None,
        void_bytes: int = 0,
        expires_s: int | None = None,
    ) -> Frame:
        """A hole at `first_seq` iff the key is free; the frame standing there afterwards.
        The hole holds no records: readers step over its seqs. It carries the tail TTL of
        the log's frames (the caller's `expires_s`), so its key stays taken as long as any
        late writer could still try it."""
        last = first_seq if last_seq is None else last_seq
        item: dict[str, Any] = {
            "pk": _s(head.frame_pk(first_seq)),
            "sk": _n(first_seq),
            "ls": _n(last),
            "ts": _n(0),
            "sz": _n(0),
            "dn": _n(0),
            "dz": _n(0),
            HOLE_ATTR: _n(1),
        }
        if void_bytes:
            item["vb"] = _n(void_bytes)
        if expires_s is not None:
            item["ttl"] = _n(expires_s)
        got = write_once(
            self._ddb.put_item,
            conflict=True,
            TableName=self._log_table,
            Item=item,
            ConditionExpression="attribute_not_exists(pk)",
        )
        assert got is not None
        holder = got.get("Attributes") if got.get("Conflict") else None
        return self._frame_from_item(holder or item)

    def _head_op(self, c: AppendCommit, cid: str) -> dict[str, Any] | None:
        """The head item's part of the transaction: created with the first frame, or (a
        guarded append that changes the ext: serialized) its seqs, counters and ext moved
        with the frame, iff it is as the writer read it; a frame whose tag entries are
        written after the commit is marked pending on it."""
        if c.new_head is not None:
            if c.expected is None:
                cond: dict[str, Any] = {"ConditionExpression": "attribute_not_exists(pk)"}
            else:
                cond = {
                    "ConditionExpression": "attribute_exists(dl) AND ep = :ep",
                    "ExpressionAttributeValues": {":ep": _n(c.expected.epoch)},
                }
            return {
                "Put": {
                    "TableName": self._heads_table,
                    "Item": {**head_to_item(c.new_head), CID_ATTR: _s(cid)},
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                    **cond,
                }
            }
        h = c.expected
        assert h is not None
        serial = c.ext_expected is not None
        if not serial and not c.tag_pending:
            return None
        sets = [f"{CID_ATTR} = :cid"]
        names: dict[str, str] = {}
        values: dict[str, Any] = {":cid": _s(cid), ":ep": _n(h.epoch)}
        cond_s = "ep = :ep AND attribute_not_exists(dl)"
        adds = ""
        if c.tag_pending:
            sets.append("tp.#k = :ls")
            names["#k"] = str(c.first_seq)
            values[":ls"] = _n(c.last_seq)
        if serial:
            # the head moves with the frame: its seqs (from where the writer read them, with
            # nothing reserved since) and counters, and the ext
            assert c.ext_expected is not None
            ext_cond, ext_values = _ext_condition(c.ext_expected)
            cond_s += f" AND {ext_cond} AND hs = :h0"
            values.update(ext_values)
            n = c.last_seq - c.first_seq + 1
            values.update(
                {":h0": _n(h.head_seq), ":n": _n(n), ":b": _n(c.payload_bytes), ":ts": _n(c.ts)}
            )
            sets.append("lw = :ts")
            adds = " ADD hs :n, ac :n, ab :b, cnt :n, byt :b, ub :b"
            if not c.ext_new:
                raise ValueError("ext_new must not be empty")
            sets.append("x = :x2")
            values[":x2"] = _s(c.ext_new)
            if c.max_count is not None:
                cond_s += " AND cnt <= :mc"
                values[":mc"] = _n(c.max_count)
            if c.max_bytes is not None:
                cond_s += " AND byt <= :mb"
                values[":mb"] = _n(c.max_bytes)
        op: dict[str, Any] = {
            "TableName": self._heads_table,
            "Key": {"pk": _s(h.topic)},
            "UpdateExpression": "SET " + ", ".join(sets) + adds,
            "ConditionExpression": cond_s,
            "ExpressionAttributeValues": values,
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        if names:
            op["ExpressionAttributeNames"] = names
        return {"Update": op}

    # --- reads --------------------------------------------------------------------------
    def _frames_from_items(
        self, items: list[dict[str, Any]], known: KnownRecords | None = None
    ) -> list[Frame]:
        """Decode frames; spilled frames are fetched from S3 concurrently, not one by one,
        unless `known` has their records."""
        have: dict[int, list[StoredRecord]] = {}
        if known is not None:
            for it in items:
                if "s3" in it and (recs := known(_i(it, "sk"), _i(it, "ls"))) is not None:
                    have[_i(it, "sk")] = recs
        spilled = [it["s3"]["S"] for it in items if "s3" in it and _i(it, "sk") not in have]
        blobs: dict[str, bytes] = {}
        if len(spilled) > 1:
            fetched = self._blob_pool.map(self._blobs.get, spilled)
            blobs = dict(zip(spilled, fetched, strict=True))
        return [self._frame_from_item(it, blobs, have.get(_i(it, "sk"))) for it in items]

    def _frame_from_item(
        self,
        item: dict[str, Any],
        blobs: dict[str, bytes] | None = None,
        records: list[StoredRecord] | None = None,
    ) -> Frame:
        first = _i(item, "sk")
        last = _i(item, "ls")
        ts = _i(item, "ts")
        if HOLE_ATTR in item:
            return Frame(first, last, ts, [], hole=True, void_bytes=_i(item, "vb"))
        if records is None:
            if "s3" in item:
                key = item["s3"]["S"]
                blob = (blobs or {}).get(key) or self._blobs.get(key)
            else:
                blob = item["rb"]["B"]
            records = decode_records(blob, first, ts)
        deleted = frozenset(int(x) for x in item.get("dx", {}).get("NS", []))
        return Frame(
            first_seq=first,
            last_seq=last,
            ts=ts,
            records=records,
            deleted=deleted,
            deleted_count=_i(item, "dn"),
            deleted_bytes=_i(item, "dz"),
            payload_bytes=_i(item, "sz"),
        )

    def read_frames(
        self,
        head: Head,
        after_seq: int,
        upto_seq: int,
        max_records: int,
        max_bytes: int = 0,
        known: KnownRecords | None = None,
    ) -> list[Frame]:
        """The chain from the frame holding after_seq + 1 (frame_chain.DynamoFrameChain.walk), up
        to the frame that fills the budget (records after `after_seq`, payload bytes)."""
        items: list[dict[str, Any]] = []
        got = nbytes = 0
        for item in self._chain.walk(head, after_seq, upto_seq, max_records):
            items.append(item)
            got += _i(item, "ls") - max(_i(item, "sk"), after_seq + 1) + 1
            nbytes += _i(item, "sz")
            if got >= max_records or 0 < max_bytes <= nbytes:
                break
        return self._frames_from_items(items, known)

    def get_frames(self, head: Head, frame_seqs: Sequence[int]) -> dict[int, Frame]:
        out: dict[int, Frame] = {}
        wanted = sorted(set(frame_seqs))
        for i in range(0, len(wanted), _BATCH_GET_MAX):
            keys = [
                {"pk": _s(head.frame_pk(s)), "sk": _n(s)} for s in wanted[i : i + _BATCH_GET_MAX]
            ]
            request: dict[str, Any] = {self._log_table: {"Keys": keys, "ConsistentRead": True}}
            while request:
                resp = _call(self._ddb.batch_get_item, RequestItems=request)
                for item in resp.get("Responses", {}).get(self._log_table, []):
                    f = self._frame_from_item(item)
                    out[f.first_seq] = f
                request = resp.get("UnprocessedKeys") or {}
        return out

    def get_producer(self, head: Head, producer: str) -> tuple[int, int, int] | None:
        item = _call(
            self._ddb.get_item,
            TableName=self._index_table,
            Key={"pk": _s(producer_pk(head.topic, head.epoch)), "sk": _s(producer)},
            ConsistentRead=True,
        ).get("Item")
        return claim_hit({"Item": item}) if item else None

    def get_idempotency(self, head: Head, key: str, now_ms: int) -> IdemHit | None:
        resp = _call(
            self._ddb.get_item,
            TableName=self._index_table,
            Key={"pk": _s(f"i#{head.topic}#{head.epoch}"), "sk": _s(key)},
            ConsistentRead=True,
        )
        item = resp.get("Item")
        if not item or _i(item, "ex") < now_ms:
            return None
        return IdemHit(_i(item, "f"), _i(item, "l"))

    def tag_lookup(self, head: Head, tag: str, prefix: bool) -> list[TagEntry]:
        needle = tag if prefix else tag + "\x00"
        values = {":pk": _s(f"t#{head.topic}#{head.epoch}")}
        condition = "pk = :pk"
        if needle:  # an empty key-condition value is invalid; Glob "*" reads every tag entry
            condition += " AND begins_with(sk, :p)"
            values[":p"] = _s(needle)
        kwargs: dict[str, Any] = {
            "TableName": self._index_table,
            "KeyConditionExpression": condition,
            "ExpressionAttributeValues": values,
            "ConsistentRead": True,
        }
        out: list[TagEntry] = []
        while True:
            resp = _call(self._ddb.query, **kwargs)
            for item in resp.get("Items", []):
                sk = item["sk"]["S"]
                entry_tag, frame_seq = sk[:-21], int(sk[-20:])
                if not prefix and entry_tag != tag:
                    continue
                seqs = tuple(int(x) for x in item["q"]["S"].split(",") if x)
                out.append(TagEntry(entry_tag, frame_seq, seqs))
            lek = resp.get("LastEvaluatedKey")
            if not lek:
                return out
            kwargs["ExclusiveStartKey"] = lek

    def write_tag_entries(self, head: Head, entries: Sequence[TagEntry]) -> None:
        pk = f"t#{head.topic}#{head.epoch}"
        requests = [
            {
                "PutRequest": {
                    "Item": {
                        "pk": _s(pk),
                        "sk": _s(_tag_sk(e.tag, e.frame_seq)),
                        "q": _s(",".join(map(str, e.seqs))),
                    }
                }
            }
            for e in entries
        ]
        for i in range(0, len(requests), 25):
            pending: dict[str, Any] = {self._index_table: requests[i : i + 25]}
            while pending:
                resp = _call(self._ddb.batch_write_item, RequestItems=pending)
                pending = resp.get("UnprocessedItems") or {}

    # --- deletes ------------------------------------------------------------------------
    def commit_delete(self, d: DeleteCommit) -> bool:
        cid = new_cid()
        sets = ["dv = dv + :one", "cnt = cnt - :dc", "byt = byt - :db", f"{CID_ATTR} = :cid"]
        values: dict[str, Any] = {
            ":cid": _s(cid),
            ":one": _n(1),
            ":dc": _n(d.count_delta),
            ":db": _n(d.bytes_delta),
            ":dv": _n(d.expected_del_ver),
            ":ep": _n(d.epoch),
            ":st": _n(d.expected_sealed),
        }
        if d.new_earliest is not None:
            sets.append("es = :es")
            values[":es"] = _n(d.new_earliest)
        items: list[dict[str, Any]] = [
            {
                "Update": {
                    "TableName": self._heads_table,
                    "Key": {"pk": _s(d.topic)},
                    "UpdateExpression": "SET " + ", ".join(sets),
                    "ConditionExpression": "ep = :ep AND dv = :dv AND st = :st"
                    " AND attribute_not_exists(dl)",
                    "ExpressionAttributeValues": values,
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            }
        ]
        for fd in d.frames:
            pk = frame_pk(d.topic, d.epoch, d.partitions, fd.key_seq)
            items.append(_delete_marks(self._log_table, {"pk": _s(pk), "sk": _n(fd.key_seq)}, fd))
        seg_pk = segment_pk(d.topic, d.epoch)
        for fd in d.segments:
            key = {"pk": _s(seg_pk), "sk": _s(segment_sk(fd.key_seq))}
            items.append(_delete_marks(self._index_table, key, fd))
        outcome = transact(self._ddb, items, cid)
        # the head holding our commit id: an earlier attempt applied (its dv step shows it)
        return outcome.committed or any_mine(outcome.reasons, cid)

    # --- tiering ------------------------------------------------------------------------
    def frame_summaries(
        self, head: Head, after_seq: int, upto_seq: int, limit: int, *, every: bool = False
    ) -> list[FrameSummary]:
        projection = "sk, ls, ts, sz, dn, dz, s3, #ttl, hl, vb"
        if limit <= 0:
            return []
        if every:
            items = self._chain.every(head, after_seq, upto_seq, projection)
            return [_summary(it) for it in items[:limit]]
        out: list[FrameSummary] = []
        for it in self._chain.walk(head, after_seq, upto_seq, min(limit, 1000), projection):
            out.append(_summary(it))
            if len(out) >= limit:
                break
        return out

    def delete_frames(self, head: Head, frame_seqs: Sequence[int]) -> None:
        keys = [{"pk": _s(head.frame_pk(s)), "sk": _n(s)} for s in frame_seqs]
        batch_delete(self._ddb, self._log_table, keys)

    def commit_evict(self, c: EvictCommit) -> bool:
        h = c.head
        values: dict[str, Any] = {
            ":es": _n(c.new_earliest),
            ":ef": _n(c.new_floor),
            ":dc": _n(c.count_delta),
            ":db": _n(c.bytes_delta),
            ":du": _n(c.unsealed_bytes_delta),
            ":ep": _n(h.epoch),
            ":dv": _n(h.del_ver),
            ":oes": _n(h.earliest_seq),
            ":st": _n(h.sealed_through),
        }
        sets = "es = :es, ef = :ef, cnt = cnt - :dc, byt = byt - :db, ub = ub - :du"
        if c.evictions:
            sets += ", ev = :ev"
            values[":ev"] = _s(encode_evictions(c.evictions))
        return conditional(
            self._ddb.update_item,
            TableName=self._heads_table,
            Key={"pk": _s(h.topic)},
            UpdateExpression="SET " + sets,
            ConditionExpression="ep = :ep AND dv = :dv AND es = :oes AND st = :st"
            " AND attribute_not_exists(dl)",
            ExpressionAttributeValues=values,
        )

    def set_trimmed(self, head: Head, trimmed_through: int) -> bool:
        return conditional(
            self._ddb.update_item,
            TableName=self._heads_table,
            Key={"pk": _s(head.topic)},
            UpdateExpression="SET tt = :tt",
            ConditionExpression="ep = :ep AND tt = :old AND attribute_not_exists(dl)",
            ExpressionAttributeValues={
                ":tt": _n(trimmed_through),
                ":old": _n(head.trimmed_through),
                ":ep": _n(head.epoch),
            },
        )


def _summary(it: dict[str, Any]) -> FrameSummary:
    return FrameSummary(
        first_seq=_i(it, "sk"),
        last_seq=_i(it, "ls"),
        ts=_i(it, "ts"),
        bytes=_i(it, "sz"),
        deleted_count=_i(it, "dn"),
        deleted_bytes=_i(it, "dz"),
        spill_key=it["s3"]["S"] if "s3" in it else None,
        expires_s=_opt_i(it, "ttl"),
        hole=HOLE_ATTR in it,
        void_bytes=_i(it, "vb"),
    )


def _delete_marks(table: str, key: dict[str, Any], fd: FrameDelete) -> dict[str, Any]:
    """Mark seqs deleted inside a frame or segment item, conditional on its delete count."""
    return {
        "Update": {
            "TableName": table,
            "Key": key,
            "UpdateExpression": "ADD dx :seqs SET dn = dn + :k, dz = dz + :b",
            "ConditionExpression": "dn = :exp",
            "ExpressionAttributeValues": {
                ":seqs": {"NS": [str(s) for s in fd.seqs]},
                ":k": _n(len(fd.seqs)),
                ":b": _n(fd.bytes),
                ":exp": _n(fd.expected_deleted_count),
            },
        }
    }


def segment_pk(topic: str, epoch: int) -> str:
    return f"g#{topic}#{epoch}"


def segment_sk(last_seq: int) -> str:
    return f"{last_seq:020d}"
