"""The DynamoDB adapter of the log-tail port (LogTailStore): a topic's frames in the log
table (the one-write append, the transaction with idempotency keys, tags and producers'
claims), holes, evictions, record deletes and frame summaries.

One piece on purpose (over 600 lines): it is one adapter of one port, and every method
writes or reads the same item layout (frame items at the reserved key, the head item's
condition, the tag and idempotency items of one transaction); the layout's helpers shared
with the heads adapter already live in head_items.py and ddb.py. Splitting it by method
would put one DynamoDB item format in several files (docs/storage.md documents it as one)."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

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
    frame_pk,
)
from headwater.engine.records import Frame, StoredRecord, decode_records
from headwater.errors import StorageUnavailable
from headwater.settings import Settings
from headwater.storage.ddb import (
    CID_ATTR,
    any_mine,
    batch_delete,
    conditional,
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
from headwater.storage.head_items import (
    BATCH_GET_MAX,
    HOLE_ATTR,
    claim_hit,
    claim_op,
    encode_evictions,
    ext_condition,
    head_from_item,
    head_to_item,
    producer_pk,
    read_head,
    segment_pk,
    segment_sk,
)
from headwater.storage.schema import HEADS, INDEX, LOG


def _tag_sk(tag: str, frame_seq: int) -> str:
    # The fixed-width suffix makes the tag recoverable exactly whatever bytes it contains.
    return f"{tag}\x00{frame_seq:020d}"


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
            ext_cond, ext_values = ext_condition(c.ext_expected)
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
        for i in range(0, len(wanted), BATCH_GET_MAX):
            keys = [
                {"pk": _s(head.frame_pk(s)), "sk": _n(s)} for s in wanted[i : i + BATCH_GET_MAX]
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
