"""DynamoDB adapter for work-queue leases (spec §10), in the LEASES table.

One partition per queue instance, pk = "q#<topic>#<epoch>" (a recreated topic starts clean):
- sk 0, the queue item: the claim cursor `cur` (every seq <= cur has been handed out at least
  once) and the cumulative `dl` (dead-lettered) counter.
- sk = seq, one lease item per job handed out and not yet completed: holder `nd` (absent once
  released by a nack), lease id `lid`, `due` (the deadline while held, the visible-at time
  once released), delivery count `dv`, and the frame key (`fl`, its first seq) and size
  (`sz`) of its record, so an ack deletes the record without reading it.

A seq <= cur with no lease item is done (acked or dead-lettered). A job is claimable when it
is above the cursor, or its lease item's `due` has passed. Every change is a conditional
write on exactly the state the caller saw (cursor value, lease id + due, holder), so two
processes can never both hold a job: the loser's condition fails and it re-reads."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from headwater.engine.ports import CONFLICT, Head
from headwater.engine.ports.queue import Guard, Lease, LeaseCommit, QueueState
from headwater.errors import StorageUnavailable
from headwater.settings import Settings
from headwater.storage.ddb import (
    TxnOutcome,
    any_mine,
    error_code,
    failed_positions,
    mark_cid,
    new_cid,
    transact,
)
from headwater.storage.schema import HEADS, LEASES, LOG


def _n(v: int) -> dict[str, str]:
    return {"N": str(v)}


def _lease_from_item(item: dict[str, Any]) -> Lease:
    return Lease(
        seq=int(item["sk"]["N"]),
        node=item["nd"]["S"] if "nd" in item else None,
        lease_id=item["lid"]["S"],
        due=int(item["due"]["N"]),
        deliveries=int(item["dv"]["N"]),
        frame=int(item["fl"]["N"]),
        size=int(item["sz"]["N"]),
    )


def _lease_item(qkey: str, lease: Lease) -> dict[str, Any]:
    item: dict[str, Any] = {
        "pk": {"S": qkey},
        "sk": _n(lease.seq),
        "lid": {"S": lease.lease_id},
        "due": _n(lease.due),
        "dv": _n(lease.deliveries),
        "fl": _n(lease.frame),
        "sz": _n(lease.size),
    }
    if lease.node is not None:
        item["nd"] = {"S": lease.node}
    return item


def _guard(guard: Guard, values: dict[str, Any], tag: str) -> str:
    """The condition a lease write holds on: the exact lease seen (its id and due), or the
    holder (its node, and lease id when the caller fenced with one)."""
    parts = ["attribute_exists(sk)"]
    if guard.lease_id is not None:
        values[f":l{tag}"] = {"S": guard.lease_id}
        parts.append(f"lid = :l{tag}")
    if guard.due is not None:
        values[f":d{tag}"] = _n(guard.due)
        parts.append(f"due = :d{tag}")
    if guard.node is not None:
        values[f":n{tag}"] = {"S": guard.node}
        parts.append(f"nd = :n{tag}")
    return " AND ".join(parts)


def _failed(outcome: TxnOutcome, cid: str) -> set[int]:
    if outcome.committed or (outcome.retried and any_mine(outcome.reasons, cid)):
        return set()
    return failed_positions(outcome.reasons) or {CONFLICT}


def _ours_before(
    c: LeaseCommit, reasons: list[dict[str, Any]], lease_start: int, answered_ms: int
) -> bool:
    """Read-back of a finish whose response was lost and whose retry was refused (a backend
    that ignores ClientRequestToken): every refusal must be what our own applied commit
    leaves behind. The lease items are gone, and nobody else could have ended them (each
    was ours, and unexpired, when storage answered: only its holder may finish it before
    its deadline); the records' frames already hold their seqs as deleted; a refused head
    shows the floor moved past them, in the same epoch."""
    wanted: dict[int, set[int]] = {}
    for frame, seq, _ in c.records:
        wanted.setdefault(frame, set()).add(seq)
    frames = sorted(wanted)
    for pos in failed_positions(reasons):
        item = reasons[pos].get("Item")
        if pos == 0:
            if not item or int(item.get("ep", {}).get("N", "0")) != c.head.epoch or "dl" in item:
                return False
        elif pos < lease_start:
            dx = {int(x) for x in (item or {}).get("dx", {}).get("NS", [])}
            if not wanted[frames[pos - 1]] <= dx:
                return False
        else:
            seq = c.leases[pos - lease_start][0]
            if item is not None or c.held_until.get(seq, 0) <= answered_ms:
                return False
    return True


class DynamoLeaseStore:
    def __init__(self, client: Any, settings: Settings) -> None:
        self._ddb = client
        self._table = settings.table_name(LEASES.logical)
        self._heads_table = settings.table_name(HEADS.logical)
        self._log_table = settings.table_name(LOG.logical)

    # --- reads --------------------------------------------------------------------------
    def load(self, qkey: str, at: int | None = None) -> QueueState:
        """The queue item and the outstanding leases, strongly consistent, by seq. With `at`
        (ms), only the leases released or expired by then come back (a filtered Query: the
        held ones are counted, from ScannedCount, but not returned)."""
        cursor = dead = scanned = 0
        seen_queue_item = False
        leases: list[Lease] = []
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": qkey}},
            "ConsistentRead": True,
        }
        if at is not None:
            # (the queue item has no holder either, so it always comes back; a filter may not
            # name a key attribute)
            kwargs["FilterExpression"] = "attribute_not_exists(nd) OR due < :at"
            kwargs["ExpressionAttributeValues"][":at"] = _n(at)
        while True:
            try:
                resp = self._ddb.query(**kwargs)
            except ClientError as exc:
                raise StorageUnavailable(f"storage error: {error_code(exc)}") from exc
            except BotoCoreError as exc:
                raise StorageUnavailable(f"storage unreachable: {type(exc).__name__}") from exc
            scanned += int(resp.get("ScannedCount", 0))
            for item in resp.get("Items", []):
                if item["sk"]["N"] == "0":
                    seen_queue_item = True
                    cursor = int(item.get("cur", {"N": "0"})["N"])
                    dead = int(item.get("dl", {"N": "0"})["N"])
                else:
                    leases.append(_lease_from_item(item))
            last = resp.get("LastEvaluatedKey")
            if not last:
                break
            kwargs["ExclusiveStartKey"] = last
        return QueueState(cursor, dead, leases, scanned - int(seen_queue_item))

    def get(self, qkey: str, seqs: Sequence[int]) -> dict[int, Lease]:
        """These seqs' lease items (those that exist), strongly consistent."""
        out: dict[int, Lease] = {}
        keys = [{"pk": {"S": qkey}, "sk": _n(s)} for s in dict.fromkeys(seqs)]
        for i in range(0, len(keys), 100):
            pending: dict[str, Any] = {
                self._table: {"Keys": keys[i : i + 100], "ConsistentRead": True}
            }
            while pending:
                try:
                    resp = self._ddb.batch_get_item(RequestItems=pending)
                except ClientError as exc:
                    raise StorageUnavailable(f"storage error: {error_code(exc)}") from exc
                except BotoCoreError as exc:
                    raise StorageUnavailable(f"storage unreachable: {type(exc).__name__}") from exc
                for item in resp.get("Responses", {}).get(self._table, []):
                    lease = _lease_from_item(item)
                    out[lease.seq] = lease
                pending = resp.get("UnprocessedKeys") or {}
        return out

    # --- writes -------------------------------------------------------------------------
    def _transact(self, items: list[dict[str, Any]], cid: str) -> set[int]:
        """Run one retry-safe transaction whose puts and updates carry `cid` (mark_cid): the
        empty set when it committed (now, or in an earlier attempt whose response was lost),
        else the positions of the items whose condition failed."""
        return _failed(transact(self._ddb, items, cid), cid)

    def claim(
        self,
        qkey: str,
        cursor: tuple[int, int] | None,
        fresh: Sequence[Lease],
        reclaimed: Sequence[tuple[Lease, Guard]],
    ) -> set[int]:
        """Hand out jobs in one transaction: move the cursor (old, new) and create a lease
        item per fresh job, and re-lease each reclaimed job on the exact lease seen. Returns
        the failed positions: 0 = the cursor, 1.. = fresh, then reclaimed (empty: done)."""
        items: list[dict[str, Any]] = []
        if cursor is not None:
            old, new = cursor
            cond = "cur = :old" if old else "attribute_not_exists(cur) OR cur = :old"
            items.append(
                {
                    "Update": {
                        "TableName": self._table,
                        "Key": {"pk": {"S": qkey}, "sk": _n(0)},
                        "UpdateExpression": "SET cur = :new",
                        "ConditionExpression": cond,
                        "ExpressionAttributeValues": {":old": _n(old), ":new": _n(new)},
                    }
                }
            )
        for lease in fresh:
            items.append(
                {
                    "Put": {
                        "TableName": self._table,
                        "Item": _lease_item(qkey, lease),
                        "ConditionExpression": "attribute_not_exists(sk)",
                    }
                }
            )
        for i, (lease, guard) in enumerate(reclaimed):
            values: dict[str, Any] = {
                ":nd": {"S": lease.node or ""},
                ":lid": {"S": lease.lease_id},
                ":due": _n(lease.due),
                ":dv": _n(lease.deliveries),
            }
            cond = _guard(guard, values, str(i))
            items.append(
                {
                    "Update": {
                        "TableName": self._table,
                        "Key": {"pk": {"S": qkey}, "sk": _n(lease.seq)},
                        "UpdateExpression": "SET nd = :nd, lid = :lid, due = :due, dv = :dv",
                        "ConditionExpression": cond,
                        "ExpressionAttributeValues": values,
                    }
                }
            )
        if not items:
            return set()
        cid = new_cid()
        failed = self._transact(mark_cid(items, cid), cid)
        if cursor is None and CONFLICT not in failed:
            return {i + 1 for i in failed}
        return failed

    def update(self, qkey: str, changes: Sequence[tuple[int, Guard, int, str | None]]) -> set[int]:
        """Re-time held leases in one transaction, each on its guard: (seq, guard, new due,
        holder). A holder of None releases the lease (a nack); otherwise the holder stays
        (an extend). Returns the failed positions."""
        items: list[dict[str, Any]] = []
        for i, (seq, guard, due, holder) in enumerate(changes):
            values: dict[str, Any] = {":due": _n(due)}
            cond = _guard(guard, values, str(i))
            expr = "SET due = :due" + (" REMOVE nd" if holder is None else "")
            items.append(
                {
                    "Update": {
                        "TableName": self._table,
                        "Key": {"pk": {"S": qkey}, "sk": _n(seq)},
                        "UpdateExpression": expr,
                        "ConditionExpression": cond,
                        "ExpressionAttributeValues": values,
                    }
                }
            )
        if not items:
            return set()
        cid = new_cid()
        return self._transact(mark_cid(items, cid), cid)

    def complete(self, c: LeaseCommit) -> set[int]:
        """Finish jobs in one transaction: delete each lease item on its guard and, for the
        jobs whose record is still live, the record itself (the §5 permanent delete: the
        frame's deleted set and the head's counters). Returns the failed positions:
        0 = the head (topic gone, or a prefix delete passed a record), then one per frame
        (a record already deleted), then one per lease (not held as seen)."""
        items: list[dict[str, Any]] = []
        removed = list(c.records)
        if removed:
            head: Head = c.head
            values: dict[str, Any] = {
                ":one": _n(1),
                ":dc": _n(len(removed)),
                ":db": _n(sum(size for _, _, size in removed)),
                ":ep": _n(head.epoch),
                ":lo": _n(min(seq for _, seq, _ in removed)),
            }
            items.append(
                {
                    "Update": {
                        "TableName": self._heads_table,
                        "Key": {"pk": {"S": head.topic}},
                        "UpdateExpression": "SET dv = dv + :one, cnt = cnt - :dc, byt = byt - :db",
                        "ConditionExpression": "ep = :ep AND attribute_not_exists(dl) "
                        "AND es <= :lo",
                        "ExpressionAttributeValues": values,
                        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                    }
                }
            )
        else:
            items.append(
                {
                    "ConditionCheck": {
                        "TableName": self._heads_table,
                        "Key": {"pk": {"S": c.head.topic}},
                        "ConditionExpression": "ep = :ep AND attribute_not_exists(dl)",
                        "ExpressionAttributeValues": {":ep": _n(c.head.epoch)},
                    }
                }
            )
        frames: dict[int, list[tuple[int, int]]] = {}
        for frame, seq, size in removed:
            frames.setdefault(frame, []).append((seq, size))
        for frame, entries in sorted(frames.items()):
            log_pk = {"S": c.head.frame_pk(frame)}
            fvalues: dict[str, Any] = {
                ":seqs": {"NS": [str(s) for s, _ in entries]},
                ":k": _n(len(entries)),
                ":b": _n(sum(z for _, z in entries)),
            }
            conds = ["attribute_exists(sk)"]
            for j, (s, _) in enumerate(entries):
                fvalues[f":s{j}"] = _n(s)
                conds.append(f"NOT contains(dx, :s{j})")
            items.append(
                {
                    "Update": {
                        "TableName": self._log_table,
                        "Key": {"pk": log_pk, "sk": _n(frame)},
                        "UpdateExpression": "ADD dx :seqs SET dn = dn + :k, dz = dz + :b",
                        "ConditionExpression": " AND ".join(conds),
                        "ExpressionAttributeValues": fvalues,
                        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                    }
                }
            )
        lease_start = len(items)
        for i, (seq, guard) in enumerate(c.leases):
            lvalues: dict[str, Any] = {}
            items.append(
                {
                    "Delete": {
                        "TableName": self._table,
                        "Key": {"pk": {"S": c.qkey}, "sk": _n(seq)},
                        "ConditionExpression": _guard(guard, lvalues, str(i)),
                        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                        **({"ExpressionAttributeValues": lvalues} if lvalues else {}),
                    }
                }
            )
        if c.dead_lettered:
            items.append(
                {
                    "Update": {
                        "TableName": self._table,
                        "Key": {"pk": {"S": c.qkey}, "sk": _n(0)},
                        "UpdateExpression": "ADD dl :k",
                        "ExpressionAttributeValues": {":k": _n(c.dead_lettered)},
                    }
                }
            )
        cid = new_cid()
        sent = time.monotonic()
        outcome = transact(self._ddb, mark_cid(items, cid), cid)
        failed = _failed(outcome, cid)
        if failed and outcome.retried and CONFLICT not in failed:
            answered_ms = c.now_ms + int((time.monotonic() - sent) * 1000)
            if _ours_before(c, outcome.reasons, lease_start, answered_ms):
                return set()
        return failed

    def clear(self, qkey: str) -> int:
        """Delete a queue instance's items (its topic was deleted). Best effort: leftovers of
        an old epoch are never read again."""
        state = self.load(qkey)
        keys = [s.seq for s in state.leases] + [0]
        return self._delete_keys(qkey, keys)

    def _delete_keys(self, qkey: str, seqs: Iterable[int]) -> int:
        requests = [{"DeleteRequest": {"Key": {"pk": {"S": qkey}, "sk": _n(s)}}} for s in seqs]
        for i in range(0, len(requests), 25):
            pending: dict[str, Any] = {self._table: requests[i : i + 25]}
            while pending:
                try:
                    resp = self._ddb.batch_write_item(RequestItems=pending)
                except ClientError as exc:
                    raise StorageUnavailable(f"storage error: {error_code(exc)}") from exc
                except BotoCoreError as exc:
                    raise StorageUnavailable(f"storage unreachable: {type(exc).__name__}") from exc
                pending = resp.get("UnprocessedItems") or {}
        return len(requests)
