"""Reading a topic's frames as a chain over its partition keys (docs/storage.md "The
sequencer").

Frames are keyed by their first seq and spread over `Head.partitions` partition keys by a
hash of that seq (ports.frame_pk), so a writer's frame bytes never queue behind one key. A
reader walks the chain: the frame holding the cursor's next seq, then the one keyed by its
last seq + 1, and so on, stopping before the first key nothing stands at yet (a slot
reserved and not written: the engine waits for it, or fills it). Each partition is read by
its own Query, ascending, a page at a time and only as far as the walk needs; with one
partition this is the single Query of a log kept under one key."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from headwater.engine.ports import Head, frame_partition
from headwater.settings import Settings
from headwater.storage.ddb import call as _call
from headwater.storage.ddb import int_of as _i
from headwater.storage.ddb import num as _n
from headwater.storage.ddb import text as _s
from headwater.storage.schema import LOG

Item = dict[str, Any]
MAX_PAGE = 64
# A span of at most this many seqs is read by key (one BatchGetItem), not by a Query per
# partition: a tail read of the few newest frames costs one call, not four.
SHORT_SPAN = 8


class _Partition:
    """One partition's items with sk in [lo, hi], fetched a page at a time on demand."""

    __slots__ = ("_kwargs", "done", "items", "reach", "reach_hi")

    def __init__(self, table: str, pk: str, lo: int, hi: int, page: int, projection: str | None):
        self.items: dict[int, Item] = {}
        self.reach = lo - 1  # every key <= reach that exists is in `items`
        self.done = False
        kwargs: dict[str, Any] = {
            "TableName": table,
            "KeyConditionExpression": "pk = :pk AND sk BETWEEN :lo AND :hi",
            "ExpressionAttributeValues": {":pk": _s(pk), ":lo": _n(lo), ":hi": _n(hi)},
            "ConsistentRead": True,
            "Limit": page,
        }
        if projection:
            kwargs["ProjectionExpression"] = projection
            if "#ttl" in projection:  # a reserved word
                kwargs["ExpressionAttributeNames"] = {"#ttl": "ttl"}
        self._kwargs = kwargs
        self.reach_hi = hi

    def fetch(self, client: Any) -> None:
        resp = _call(client.query, **self._kwargs)
        got = resp.get("Items", [])
        for item in got:
            self.items[_i(item, "sk")] = item
        lek = resp.get("LastEvaluatedKey")
        if not lek:
            self.done = True
            self.reach = self.reach_hi
            return
        self.reach = max(self.reach, int(lek["sk"]["N"]))
        self._kwargs["ExclusiveStartKey"] = lek
        self._kwargs["Limit"] = min(self._kwargs["Limit"] * 2, MAX_PAGE)

    def find(self, client: Any, key: int) -> Item | None:
        while key > self.reach and not self.done:
            self.fetch(client)
        return self.items.get(key)


class DynamoFrameChain:
    """The chain reads of the log table (DynamoLogTailStore's, over its client)."""

    def __init__(self, client: Any, settings: Settings, pool: ThreadPoolExecutor) -> None:
        self._ddb = client
        self._table = settings.table_name(LOG.logical)
        self._pool = pool

    def walk(
        self,
        head: Head,
        after_seq: int,
        upto_seq: int,
        want: int,
        projection: str | None = None,
    ) -> Iterator[Item]:
        """The chain's items from the one holding after_seq + 1, in order, while their first
        seq is <= upto_seq; the caller stops taking when it has enough. `want`: about how
        many items the caller expects to take (the first page's size)."""
        if upto_seq <= after_seq:
            return
        parts = max(1, head.partitions)
        if parts > 1 and upto_seq - after_seq <= SHORT_SPAN:
            # A short span (a reader at the tail, one-record frames from many writers): its
            # keys in one BatchGetItem instead of a Query per partition.
            got = self._keys(head, range(after_seq + 1, upto_seq + 1), projection)
            short = got.get(after_seq + 1) or self.holding(head, after_seq, projection)
            while short is not None:
                yield short
                key = _i(short, "ls") + 1
                if key > upto_seq:
                    return
                short = got.get(key)
            return
        page = min(MAX_PAGE, max(2, -(-want // parts) + 1))
        cursors = [
            _Partition(self._table, _pk(head, p), after_seq + 1, upto_seq, page, projection)
            for p in range(parts)
        ]
        if parts > 1:  # the first pages together: one round trip, not one per partition
            list(self._pool.map(lambda c: c.fetch(self._ddb), cursors))
        else:
            cursors[0].fetch(self._ddb)
        key = after_seq + 1
        first = cursors[frame_partition(key, parts)].find(self._ddb, key)
        if first is None:
            first = self.holding(head, after_seq, projection)
            if first is None:
                return
        item: Item | None = first
        while item is not None:
            yield item
            key = _i(item, "ls") + 1
            if key > upto_seq:
                return
            item = cursors[frame_partition(key, parts)].find(self._ddb, key)

    def _keys(self, head: Head, keys: range, projection: str | None) -> dict[int, Item]:
        """The items at these frame keys, each in its partition: one BatchGetItem."""
        request: dict[str, Any] = {
            self._table: {
                "Keys": [{"pk": _s(head.frame_pk(k)), "sk": _n(k)} for k in keys],
                "ConsistentRead": True,
            }
        }
        if projection:
            request[self._table]["ProjectionExpression"] = projection
            if "#ttl" in projection:
                request[self._table]["ExpressionAttributeNames"] = {"#ttl": "ttl"}
        out: dict[int, Item] = {}
        while request:
            resp = _call(self._ddb.batch_get_item, RequestItems=request)
            for item in resp.get("Responses", {}).get(self._table, []):
                out[_i(item, "sk")] = item
            request = resp.get("UnprocessedKeys") or {}
        return out

    def holding(self, head: Head, after_seq: int, projection: str | None = None) -> Item | None:
        """The frame that starts at or before `after_seq` and ends after it (a cursor inside
        a frame), or None: the newest item at or below the cursor over every partition."""
        if after_seq < 1:
            return None
        parts = max(1, head.partitions)

        def newest(p: int) -> Item | None:
            kwargs: dict[str, Any] = {
                "TableName": self._table,
                "KeyConditionExpression": "pk = :pk AND sk <= :a",
                "ExpressionAttributeValues": {":pk": _s(_pk(head, p)), ":a": _n(after_seq)},
                "ScanIndexForward": False,
                "ConsistentRead": True,
                "Limit": 1,
            }
            if projection:
                kwargs["ProjectionExpression"] = projection
                if "#ttl" in projection:
                    kwargs["ExpressionAttributeNames"] = {"#ttl": "ttl"}
            items = _call(self._ddb.query, **kwargs).get("Items", [])
            return dict(items[0]) if items else None

        found = [newest(0)] if parts == 1 else list(self._pool.map(newest, range(parts)))
        best = max(
            (it for it in found if it is not None), key=lambda it: _i(it, "sk"), default=None
        )
        if best is not None and _i(best, "ls") > after_seq:
            return best
        return None

    def every(
        self, head: Head, after_seq: int, upto_seq: int, projection: str | None = None
    ) -> list[Item]:
        """Every item keyed in (after_seq, upto_seq] over every partition, by key."""
        parts = max(1, head.partitions)

        def one(p: int) -> list[Item]:
            cursor = _Partition(
                self._table, _pk(head, p), after_seq + 1, upto_seq, MAX_PAGE, projection
            )
            while not cursor.done:
                cursor.fetch(self._ddb)
            return list(cursor.items.values())

        out: list[Item] = []
        for items in self._pool.map(one, range(parts)) if parts > 1 else [one(0)]:
            out.extend(items)
        out.sort(key=lambda it: _i(it, "sk"))
        return out


def _pk(head: Head, partition: int) -> str:
    return head.log_key if partition == 0 else f"{head.log_key}~{partition}"
