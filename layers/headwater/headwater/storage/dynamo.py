"""DynamoDB adapters for the heads and log-tail ports. The only module (with blobs.py) that
speaks the DynamoDB wire format or sees ClientError; AWS errors become engine errors here."""

from __future__ import annotations

import json
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
    TagEntry,
)
from headwater.engine.records import Frame, StoredRecord, decode_records
from headwater.errors import StorageUnavailable
from headwater.settings import Settings
from headwater.storage.ddb import (
    CID_ATTR,
    any_mine,
    batch_delete,
    conditional,
    error_code,
    new_cid,
    transact,
    write_once,
)
from headwater.storage.ddb import call as _call
from headwater.storage.ddb import int_of as _i
from headwater.storage.ddb import num as _n
from headwater.storage.ddb import opt_int_of as _opt_i
from headwater.storage.ddb import text as _s
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
    )


FENCE_ATTR = "fn"  # a fence frame: no records, closes an epoch to single writes
SINGLE_ATTR = "sw"  # a frame written alone (no head write with it)


def merged(head: Head, newest: dict[str, Any] | None) -> Head:
    """`head` brought up to `newest`, the newest frame of its log (projected: `ls`, `ts`,
    `ac`, `ab`), when it lies past it (Head.past)."""
    if newest is None:
        return head
    return head.past(_i(newest, "ls"), _i(newest, "ac"), _i(newest, "ab"), _i(newest, "ts"))


def _stepped(c: AppendCommit, holder: dict[str, Any] | None) -> Head | None:
    """The head `c` expected, stepped past `holder`, the frame a failed condition found at
    its key, when that frame was written alone (so the head item did not move with it)."""
    if (
        c.expected is None
        or holder is None
        or SINGLE_ATTR not in holder
        or FENCE_ATTR in holder
        or "ls" not in holder
    ):
        return None
    return merged(c.expected, holder)


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


class DynamoHeadStore:
    """Heads as readers see them: the head item, brought up to the newest frame of its log
    when single writes have appended past it (one extra Query per head read)."""

    def __init__(self, client: Any, settings: Settings) -> None:
        self._ddb = client
        self._table = settings.table_name(HEADS.logical)
        self._log_table = settings.table_name(LOG.logical)
        self._merge_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="headwater-head")

    def get(self, topic: str, *, consistent: bool = True) -> Head | None:
        return read_head(self._ddb, self._table, self._log_table, topic, consistent)

    def merge(self, head: Head, *, consistent: bool = True) -> Head:
        """`head` as stored, brought up to the newest frame past it (if any)."""
        return read_merged(self._ddb, self._table, self._log_table, head, consistent)

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

    def put_ext(self, head: Head, ext: str) -> bool:
        if not ext:
            raise ValueError("ext must not be empty")
        cond, values = _ext_condition(head.ext)
        values.update({":x2": _s(ext), ":ep": _n(head.epoch), ":h": _n(head.head_seq)})
        return conditional(
            self._ddb.update_item,
            TableName=self._table,
            Key={"pk": _s(head.topic)},
            UpdateExpression="SET x = :x2",
            ConditionExpression=f"ep = :ep AND hs = :h AND attribute_not_exists(dl) AND {cond}",
            ExpressionAttributeValues=values,
        )

    def mark_deleted(self, head: Head, *, if_empty: bool, if_ext: str | None = None) -> bool:
        """Replace the head with its deleted marker and close the epoch's log with a fence
        frame at head_seq + 1, in one transaction: a single write from a process that has
        not seen the delete meets the fence (or a frame before it) instead of landing in a
        log nobody reads. `head`: as read (merged); the marker is conditional on the stored
        item still being its checkpoint."""
        marker = Head(
            topic=head.topic,
            epoch=head.epoch,
            deleted=True,
            config=head.config,
            prev_head_seq=head.head_seq,
        )
        ck = head.checkpoint
        cond = "ep = :ep AND attribute_not_exists(dl) AND hs = :ck"
        values: dict[str, Any] = {":ep": _n(head.epoch), ":ck": _n(ck.seq)}
        if if_empty:
            # empty: the stored count plus what was appended past it is 0
            cond += " AND cnt = :c0"
            values[":c0"] = _n(-(head.appended - ck.appended))
        if if_ext is not None:
            ext_cond, ext_values = _ext_condition(if_ext)
            cond += f" AND {ext_cond}"
            values.update(ext_values)
        cid = new_cid()
        items: list[dict[str, Any]] = [
            {
                "Put": {
                    "TableName": self._table,
                    "Item": {**head_to_item(marker), CID_ATTR: _s(cid)},
                    "ConditionExpression": cond,
                    "ExpressionAttributeValues": values,
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            },
            {
                "Put": {
                    "TableName": self._log_table,
                    "Item": {
                        "pk": _s(head.log_key),
                        "sk": _n(head.head_seq + 1),
                        "ls": _n(head.head_seq),
                        "ts": _n(head.last_write_ts or 0),
                        "sz": _n(0),
                        "ac": _n(head.appended),
                        "ab": _n(head.appended_bytes),
                        FENCE_ATTR: _n(1),
                        CID_ATTR: _s(cid),
                    },
                    "ConditionExpression": "attribute_not_exists(pk)",
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            },
        ]
        outcome = transact(self._ddb, items, cid)
        return outcome.committed or any_mine(outcome.reasons, cid)

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
        live = [h for h in out.values() if not h.deleted]
        if len(live) == 1:
            out[live[0].topic] = self.merge(live[0], consistent=consistent)
        elif live:
            for h in self._merge_pool.map(lambda h: self.merge(h, consistent=consistent), live):
                out[h.topic] = h
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


def newest_frame(
    client: Any, log_table: str, head: Head, consistent: bool
) -> dict[str, Any] | None:
    """The newest frame of `head`'s log past its stored head_seq (projected), or None."""
    resp = _call(
        client.query,
        TableName=log_table,
        KeyConditionExpression="pk = :pk AND sk > :hs",
        ExpressionAttributeValues={":pk": _s(head.log_key), ":hs": _n(head.head_seq)},
        ProjectionExpression="sk, ls, ts, ac, ab, sw",
        ScanIndexForward=False,
        ConsistentRead=consistent,
        Limit=1,
    )
    items = resp.get("Items", [])
    return dict(items[0]) if items else None


def read_head(
    client: Any, heads_table: str, log_table: str, topic: str, consistent: bool
) -> Head | None:
    """The topic's head as readers see it: its item, merged (read_merged); None if none."""
    item = _call(
        client.get_item, TableName=heads_table, Key={"pk": _s(topic)}, ConsistentRead=consistent
    ).get("Item")
    if item is None:
        return None
    return read_merged(client, heads_table, log_table, head_from_item(item), consistent)


def read_merged(
    client: Any, heads_table: str, log_table: str, head: Head, consistent: bool
) -> Head:
    """`head` (its item as just read) brought up to the newest frame of its log. The item
    and the frame are two reads. A frame past the item that a transaction wrote (with the
    item: no `sw` mark) committed after the item was read, and is not combined with it (the
    item's other fields, the ext above all, belong with that frame): the item is read again,
    and holds that frame and everything before it, which is all a read that began before
    the transaction must see. A head with an ext (Durable Streams, flag namespaces) is never
    appended to by single writes (they need no condition on it): its item is its head."""
    if head.deleted or head.ext:
        return head
    newest = newest_frame(client, log_table, head, consistent)
    if newest is None or _i(newest, "ls") <= head.head_seq or SINGLE_ATTR in newest:
        return merged(head, newest)
    item = _call(
        client.get_item, TableName=heads_table, Key={"pk": _s(head.topic)}, ConsistentRead=True
    ).get("Item")
    if item is None:
        return head
    again = head_from_item(item)
    return again if again.head_seq >= _i(newest, "ls") or again.deleted else head


class DynamoLogTailStore:
    def __init__(self, client: Any, settings: Settings, blobs: BlobStore) -> None:
        self._ddb = client
        self._heads_table = settings.table_name(HEADS.logical)
        self._log_table = settings.table_name(LOG.logical)
        self._index_table = settings.table_name(INDEX.logical)
        self._blobs = blobs
        # Spilled frames of one read are fetched concurrently; one pool for the adapter.
        self._blob_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="headwater-s3")

    # --- append -------------------------------------------------------------------------
    def commit_append(self, c: AppendCommit) -> bool:
        """Write the group commit: its frame alone (`c.single`), or in one transaction with
        the head (and tag entries, idempotency keys). Returns True when storage showed that
        an earlier attempt of this same commit applied (its response was lost and the retry
        found the commit id): committed, but the head may have moved on since."""
        cid = c.cid or new_cid()
        frame: dict[str, Any] = {
            "pk": _s(f"{c.topic}#{(c.new_head or c.expected).epoch}"),  # type: ignore[union-attr]
            # Keyed by its first seq: two writers that start from the same tail meet on one
            # key, whatever their lengths, so the put's condition alone keeps seqs unique.
            "sk": _n(c.first_seq),
            "ls": _n(c.last_seq),
            "ts": _n(c.ts),
            "sz": _n(c.payload_bytes),
            "dn": _n(0),
            "dz": _n(0),
            "ac": _n(c.appended),
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
            frame[SINGLE_ATTR] = _n(1)
            return self._put_frame(c, frame, cid)
        items: list[dict[str, Any]] = [self._head_op(c, cid)]
        items.append(
            {
                "Put": {
                    "TableName": self._log_table,
                    "Item": frame,
                    "ConditionExpression": "attribute_not_exists(pk)",
                    # the frame holding our commit id: an earlier attempt of ours applied
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            }
        )
        epoch = (c.new_head or c.expected).epoch  # type: ignore[union-attr]
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
        head_conflict = False
        current: Head | None = None
        stored_seq = -1  # the head item's seq when the condition failed, if returned
        hits: dict[str, IdemHit | None] = {}
        for idx, reason in enumerate(reasons):
            rcode = reason.get("Code", "None")
            if rcode in ("None", None, ""):
                continue
            if idx == 0 and rcode == "ConditionalCheckFailed" and reason.get("Item"):
                stored_seq = head_from_item(reason["Item"]).head_seq
                current = self._current_head(c.topic, reason["Item"])
            if idx >= idem_start and rcode == "ConditionalCheckFailed":
                old = reason.get("Item")
                key = c.idem[idx - idem_start].key
                hits[key] = IdemHit(_i(old, "f"), _i(old, "l")) if old else None
            elif rcode in ("ConditionalCheckFailed", "TransactionConflict"):
                head_conflict = True
            elif rcode in ("ThrottlingError", "ProvisionedThroughputExceeded"):
                raise StorageUnavailable(f"storage throttled: {rcode}")
            else:
                head_conflict = True
        if not reasons:
            head_conflict = True
        frame_code = reasons[1].get("Code") if len(reasons) > 1 else None
        head_held = bool(reasons) and reasons[0].get("Code") in ("None", None, "")
        if current is None and not hits and head_held:
            # only the frame's key was taken (the head item unmoved): by a single write?
            stepped = _stepped(c, reasons[1].get("Item") if len(reasons) > 1 else None)
            if stepped is not None:
                raise AppendRejected(True, {}, stepped, stepped=True)
        raise AppendRejected(
            head_conflict,
            hits,
            current,
            # judged on the item as the failed condition saw it (the merged `current` is read
            # after, and other writers may have taken our key meanwhile): re-sent, our key
            # free, and the stored head already past it
            unconfirmed=outcome.retried
            and frame_code in ("None", None, "")
            and stored_seq >= c.first_seq,
        )

    def _put_frame(self, c: AppendCommit, frame: dict[str, Any], cid: str) -> bool:
        """The one-write append: the frame, iff its key is free. A failed condition on a
        frame holding our commit id is our own earlier attempt (a lost answer, re-sent)."""
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
            # Another writer's frame holds the key: step past it when it was written alone
            # (the loser retries at once, without a read that lets the winner win again),
            # else re-read the head (merged) to retry from.
            stepped = _stepped(c, got.get("Attributes"))
            if stepped is not None:
                raise AppendRejected(True, {}, stepped, stepped=True)
            raise AppendRejected(True, {}, self._current_head(c.topic))
        return bool(got.get("Repeated"))

    def _current_head(self, topic: str, item: dict[str, Any] | None = None) -> Head | None:
        """The head as a reader sees it (merged with its newest frame), from the item a
        failed condition returned or a strong read."""
        if item is None:
            return read_head(self._ddb, self._heads_table, self._log_table, topic, True)
        return read_merged(
            self._ddb, self._heads_table, self._log_table, head_from_item(item), True
        )

    def checkpoint(self, head: Head) -> bool:
        if head.stored is None:
            return True  # the item is this head already
        ck = head.stored
        dn = head.appended - ck.appended
        db = head.appended_bytes - ck.appended_bytes
        return conditional(
            self._ddb.update_item,
            TableName=self._heads_table,
            Key={"pk": _s(head.topic)},
            UpdateExpression="SET hs = :hs, ac = :ac, ab = :ab, lw = :lw, cnt = cnt + :dn, "
            "byt = byt + :db, ub = ub + :db",
            ConditionExpression="ep = :ep AND hs = :ck AND attribute_not_exists(dl)",
            ExpressionAttributeValues={
                ":hs": _n(head.head_seq),
                ":ac": _n(head.appended),
                ":ab": _n(head.appended_bytes),
                ":lw": _n(head.last_write_ts or 0),
                ":dn": _n(dn),
                ":db": _n(db),
                ":ep": _n(head.epoch),
                ":ck": _n(ck.seq),
            },
        )

    def _head_op(self, c: AppendCommit, cid: str) -> dict[str, Any]:
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
        # The stored item moves from its checkpoint to this commit: its counters by what was
        # appended since the checkpoint (single writes past it, and this frame).
        ck = h.checkpoint
        n = c.appended - ck.appended
        b = c.appended_bytes - ck.appended_bytes
        sets = ["hs = :h2", "cnt = cnt + :n", "byt = byt + :b", "lw = :ts", "ub = ub + :b"]
        sets += ["ac = :ac", "ab = :ab", f"{CID_ATTR} = :cid"]
        names: dict[str, str] = {}
        values: dict[str, Any] = {
            ":cid": _s(cid),
            ":h2": _n(c.last_seq),
            ":n": _n(n),
            ":b": _n(b),
            ":ac": _n(c.appended),
            ":ab": _n(c.appended_bytes),
            ":ts": _n(c.ts),
            ":h": _n(ck.seq),
            ":ep": _n(h.epoch),
        }
        if c.tag_pending:
            sets.append("tp.#k = :ls")
            names["#k"] = str(c.first_seq)
            values[":ls"] = _n(c.last_seq)
        cond_s = "ep = :ep AND hs = :h AND attribute_not_exists(dl)"
        if c.ext_expected is not None:
            ext_cond, ext_values = _ext_condition(c.ext_expected)
            cond_s += " AND " + ext_cond
            values.update(ext_values)
            if not c.ext_new:
                raise ValueError("ext_new must not be empty")
            sets.append("x = :x2")
            values[":x2"] = _s(c.ext_new)
        # caps: the count before this commit (stored count + appended past the checkpoint)
        # must stay <= max_count
        if c.max_count is not None:
            cond_s += " AND cnt <= :mc"
            values[":mc"] = _n(c.max_count - (h.appended - ck.appended))
        if c.max_bytes is not None:
            cond_s += " AND byt <= :mb"
            values[":mb"] = _n(c.max_bytes - (h.appended_bytes - ck.appended_bytes))
        op: dict[str, Any] = {
            "TableName": self._heads_table,
            "Key": {"pk": _s(h.topic)},
            "UpdateExpression": "SET " + ", ".join(sets),
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
        if upto_seq <= after_seq:
            return []  # empty range
        kwargs: dict[str, Any] = {
            "TableName": self._log_table,
            "KeyConditionExpression": "pk = :pk AND sk BETWEEN :lo AND :hi",
            "ExpressionAttributeValues": {
                ":pk": _s(head.log_key),
                ":lo": _n(after_seq + 1),
                ":hi": _n(upto_seq),
            },
            "ConsistentRead": True,
            "Limit": 8,
        }
        items: list[dict[str, Any]] = []
        got = nbytes = 0
        full = False  # enough records or bytes: frames past this are not fetched
        while not full:
            resp = _call(self._ddb.query, **kwargs)
            for item in resp.get("Items", []):
                if FENCE_ATTR in item:
                    continue  # a deleted incarnation's fence holds no records
                items.append(item)
                got += _i(item, "ls") - _i(item, "sk") + 1
                nbytes += _i(item, "sz")
                full = got >= max_records or 0 < max_bytes <= nbytes
                if full:
                    break
            lek = resp.get("LastEvaluatedKey")
            if not lek:
                break
            kwargs["ExclusiveStartKey"] = lek
            kwargs["Limit"] = min(kwargs["Limit"] * 2, 64)
        if not items or _i(items[0], "sk") > after_seq + 1:
            holding = self._frame_holding(head, after_seq, None)
            if holding is not None:
                items = _within(
                    [holding, *items], after_seq, max_records, max_bytes
                )  # the budget counts the holding frame's records first
        return self._frames_from_items(items, known)

    def _frame_holding(
        self, head: Head, after_seq: int, projection: str | None
    ) -> dict[str, Any] | None:
        """The frame that starts at or before `after_seq` and ends after it (a cursor inside a
        frame: frames are keyed by their first seq), or None."""
        if after_seq < 1:
            return None
        kwargs: dict[str, Any] = {
            "TableName": self._log_table,
            "KeyConditionExpression": "pk = :pk AND sk <= :a",
            "ExpressionAttributeValues": {":pk": _s(head.log_key), ":a": _n(after_seq)},
            "ScanIndexForward": False,
            "ConsistentRead": True,
            "Limit": 1,
        }
        if projection:
            kwargs["ProjectionExpression"] = projection
            if "#ttl" in projection:  # a reserved word
                kwargs["ExpressionAttributeNames"] = {"#ttl": "ttl"}
        for item in _call(self._ddb.query, **kwargs).get("Items", []):
            if _i(item, "ls") > after_seq and FENCE_ATTR not in item:
                return dict(item)
        return None

    def get_frames(self, head: Head, frame_seqs: Sequence[int]) -> dict[int, Frame]:
        out: dict[int, Frame] = {}
        wanted = sorted(set(frame_seqs))
        for i in range(0, len(wanted), _BATCH_GET_MAX):
            keys = [{"pk": _s(head.log_key), "sk": _n(s)} for s in wanted[i : i + _BATCH_GET_MAX]]
            request: dict[str, Any] = {self._log_table: {"Keys": keys, "ConsistentRead": True}}
            while request:
                resp = _call(self._ddb.batch_get_item, RequestItems=request)
                for item in resp.get("Responses", {}).get(self._log_table, []):
                    if FENCE_ATTR in item:
                        continue
                    f = self._frame_from_item(item)
                    out[f.first_seq] = f
                request = resp.get("UnprocessedKeys") or {}
        return out

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
        log_pk = f"{d.topic}#{d.epoch}"
        for fd in d.frames:
            items.append(
                _delete_marks(self._log_table, {"pk": _s(log_pk), "sk": _n(fd.key_seq)}, fd)
            )
        seg_pk = segment_pk(d.topic, d.epoch)
        for fd in d.segments:
            key = {"pk": _s(seg_pk), "sk": _s(segment_sk(fd.key_seq))}
            items.append(_delete_marks(self._index_table, key, fd))
        outcome = transact(self._ddb, items, cid)
        # the head holding our commit id: an earlier attempt applied (its dv step shows it)
        return outcome.committed or any_mine(outcome.reasons, cid)

    # --- tiering ------------------------------------------------------------------------
    def frame_summaries(
        self, head: Head, after_seq: int, upto_seq: int, limit: int
    ) -> list[FrameSummary]:
        projection = "sk, ls, ts, sz, dn, dz, s3, #ttl, fn"
        kwargs: dict[str, Any] = {
            "TableName": self._log_table,
            "KeyConditionExpression": "pk = :pk AND sk > :lo",
            "ExpressionAttributeValues": {":pk": _s(head.log_key), ":lo": _n(after_seq)},
            "ProjectionExpression": projection,
            "ExpressionAttributeNames": {"#ttl": "ttl"},
            "ConsistentRead": True,
        }
        out: list[FrameSummary] = []
        holding = self._frame_holding(head, after_seq, projection) if limit > 0 else None
        if holding is not None and _i(holding, "sk") <= upto_seq:
            out.append(_summary(holding))
        while len(out) < limit:
            kwargs["Limit"] = min(1000, limit - len(out))
            resp = _call(self._ddb.query, **kwargs)
            for it in resp.get("Items", []):
                if _i(it, "sk") > upto_seq:
                    return out
                if FENCE_ATTR not in it:
                    out.append(_summary(it))
            lek = resp.get("LastEvaluatedKey")
            if not lek:
                break
            kwargs["ExclusiveStartKey"] = lek
        return out

    def delete_frames(self, head: Head, frame_seqs: Sequence[int]) -> None:
        keys = [{"pk": _s(head.log_key), "sk": _n(s)} for s in frame_seqs]
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


def _within(
    items: list[dict[str, Any]], after_seq: int, max_records: int, max_bytes: int
) -> list[dict[str, Any]]:
    """The leading frame items up to and including the one that fills the budget (records
    after `after_seq`, payload bytes)."""
    got = nbytes = 0
    for n, item in enumerate(items, start=1):
        got += _i(item, "ls") - max(_i(item, "sk"), after_seq + 1) + 1
        nbytes += _i(item, "sz")
        if got >= max_records or 0 < max_bytes <= nbytes:
            return items[:n]
    return items


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
