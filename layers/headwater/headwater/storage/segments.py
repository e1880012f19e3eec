"""DynamoDB adapter for the segment port: one item per sealed segment in the index table,
`pk` = `g#<topic>#<epoch>`, `sk` = the segment's last seq (zero-padded, so a Query for
`sk > after` finds the segment holding seq after + 1 first). The S3 object holds the
records; the item holds where it is, its block index, its counters and the seqs deleted
since it was sealed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from headwater.engine.ports import Head, SealCommit, SegmentItem
from headwater.settings import Settings
from headwater.storage.ddb import CID_ATTR, any_mine, batch_delete, new_cid, transact
from headwater.storage.ddb import call as _call
from headwater.storage.ddb import int_of as _i
from headwater.storage.ddb import num as _n
from headwater.storage.ddb import text as _s
from headwater.storage.head_items import segment_pk, segment_sk
from headwater.storage.schema import HEADS, INDEX


def _item(it: dict[str, Any]) -> SegmentItem:
    return SegmentItem(
        first_seq=_i(it, "fs"),
        last_seq=int(it["sk"]["S"]),
        key=it["k"]["S"],
        index=bytes(it["ix"]["B"]),
        count=_i(it, "n"),
        bytes=_i(it, "sz"),
        min_ts=_i(it, "mt"),
        max_ts=_i(it, "xt"),
        created_ms=_i(it, "ca"),
        deleted=frozenset(int(x) for x in it.get("dx", {}).get("NS", [])),
        deleted_count=_i(it, "dn"),
        deleted_bytes=_i(it, "dz"),
    )


class DynamoSegmentStore:
    def __init__(self, client: Any, settings: Settings) -> None:
        self._ddb = client
        self._heads_table = settings.table_name(HEADS.logical)
        self._table = settings.table_name(INDEX.logical)

    def after(self, head: Head, after_seq: int, limit: int) -> list[SegmentItem]:
        """Segments with last seq > after_seq, ascending, at most `limit` (strongly read)."""
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "pk = :pk AND sk > :lo",
            "ExpressionAttributeValues": {
                ":pk": _s(segment_pk(head.topic, head.epoch)),
                ":lo": _s(segment_sk(after_seq)),
            },
            "ConsistentRead": True,
        }
        out: list[SegmentItem] = []
        while len(out) < limit:
            kwargs["Limit"] = min(100, limit - len(out))
            resp = _call(self._ddb.query, **kwargs)
            out.extend(_item(it) for it in resp.get("Items", []))
            lek = resp.get("LastEvaluatedKey")
            if not lek:
                break
            kwargs["ExclusiveStartKey"] = lek
        return out

    def commit_seal(self, c: SealCommit) -> bool:
        """Put the segment item and move sealed_through in one transaction, only if the head
        is as read: same epoch, no record delete since (dv), nobody else sealed (st)."""
        seg, h = c.segment, c.head
        cid = new_cid()
        item: dict[str, Any] = {
            CID_ATTR: _s(cid),
            "pk": _s(segment_pk(h.topic, h.epoch)),
            "sk": _s(segment_sk(seg.last_seq)),
            "fs": _n(seg.first_seq),
            "k": _s(seg.key),
            "ix": {"B": seg.index},
            "n": _n(seg.count),
            "sz": _n(seg.bytes),
            "mt": _n(seg.min_ts),
            "xt": _n(seg.max_ts),
            "ca": _n(seg.created_ms),
            "dn": _n(seg.deleted_count),
            "dz": _n(seg.deleted_bytes),
        }
        if seg.deleted:
            item["dx"] = {"NS": [str(s) for s in sorted(seg.deleted)]}
        sets = f"SET st = :st, ub = ub - :sb, {CID_ATTR} = :cid"
        if c.void_records or c.void_bytes:  # holes in the span: reserved, never committed
            sets += ", cnt = cnt - :vn, byt = byt - :vb"
        cond = "ep = :ep AND dv = :dv AND st = :old AND attribute_not_exists(dl)"
        values: dict[str, Any] = {
            ":cid": _s(cid),
            ":st": _n(seg.last_seq),
            ":sb": _n(c.sealed_bytes),
            ":ep": _n(h.epoch),
            ":dv": _n(h.del_ver),
            ":old": _n(h.sealed_through),
        }
        if c.void_records or c.void_bytes:
            values[":vn"] = _n(c.void_records)
            values[":vb"] = _n(c.void_bytes)
        items = [
            {
                "Put": {
                    "TableName": self._table,
                    "Item": item,
                    "ConditionExpression": "attribute_not_exists(pk)",
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            },
            {
                "Update": {
                    "TableName": self._heads_table,
                    "Key": {"pk": _s(h.topic)},
                    "UpdateExpression": sets,
                    "ConditionExpression": cond,
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                    "ExpressionAttributeValues": values,
                }
            },
        ]
        outcome = transact(self._ddb, items, cid)
        # the segment item or the head holding our commit id: an earlier attempt applied
        return outcome.committed or any_mine(outcome.reasons, cid)

    def delete_items(self, head: Head, last_seqs: Sequence[int]) -> None:
        pk = _s(segment_pk(head.topic, head.epoch))
        batch_delete(
            self._ddb, self._table, [{"pk": pk, "sk": _s(segment_sk(s))} for s in last_seqs]
        )
