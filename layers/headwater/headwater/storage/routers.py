"""DynamoDB adapter for routers (spec §6). Routers live in the INDEX table under their own
partition (pk "routers", sk = router name), never in the heads table, so a router name can
never collide with a topic name. One item holds the definition, the durable cursor and
forwarded_total; every read is strongly consistent (cycle and fan-in checks need the whole
graph as it is now).

The same item carries the forwarding lease: `lo` owner and `lx` expiry (epoch ms). It is
taken with a conditional write (free, expired or already ours), so at most one forwarder
owns a router at a time; the cursor advance stays conditional on the cursor it started from,
so even two forwarders that both believe they own the lease cannot move it twice."""

from __future__ import annotations

import json
from typing import Any

from headwater.engine.ports.routers import RouterItem
from headwater.settings import Settings
from headwater.storage.ddb import call, conditional, delete_once, write_once
from headwater.storage.schema import INDEX

ROUTERS_PK = "routers"


def _definition(item: RouterItem) -> str:
    return json.dumps(
        {
            "source": item.source,
            "dest": item.dest,
            "preserve_node": item.preserve_node,
            "preserve_tag": item.preserve_tag,
            "create_dest": item.create_dest,
            "filter": list(item.filter) if item.filter is not None else None,
            "allow_cycle": item.allow_cycle,
            "guarantee": item.guarantee,
        },
        separators=(",", ":"),
    )


def _item(it: dict[str, Any]) -> RouterItem:
    d = json.loads(it["def"]["S"])
    flt = d.get("filter")
    return RouterItem(
        name=it["sk"]["S"],
        source=d["source"],
        dest=d["dest"],
        preserve_node=bool(d["preserve_node"]),
        preserve_tag=bool(d["preserve_tag"]),
        create_dest=bool(d["create_dest"]),
        filter=tuple(flt) if flt is not None else None,
        allow_cycle=bool(d["allow_cycle"]),
        guarantee=str(d["guarantee"]),
        cursor=int(it.get("cur", {}).get("N", "0")),
        forwarded_total=int(it.get("fwd", {}).get("N", "0")),
        lease_owner=it["lo"]["S"] if "lo" in it else None,
        lease_expires_ms=int(it.get("lx", {}).get("N", "0")),
    )


class DynamoRouterStore:
    def __init__(self, client: Any, settings: Settings) -> None:
        self._ddb = client
        self._table = settings.table_name(INDEX.logical)

    def _key(self, name: str) -> dict[str, Any]:
        return {"pk": {"S": ROUTERS_PK}, "sk": {"S": name}}

    def list_all(self) -> list[RouterItem]:
        out: list[RouterItem] = []
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": ROUTERS_PK}},
            "ConsistentRead": True,
        }
        while True:
            resp = call(self._ddb.query, **kwargs)
            out.extend(_item(it) for it in resp.get("Items", []))
            last = resp.get("LastEvaluatedKey")
            if not last:
                return out
            kwargs["ExclusiveStartKey"] = last

    def get(self, name: str) -> RouterItem | None:
        resp = call(
            self._ddb.get_item, TableName=self._table, Key=self._key(name), ConsistentRead=True
        )
        it = resp.get("Item")
        return _item(it) if it else None

    def put(self, item: RouterItem) -> None:
        call(  # idempotent: a repeat after a lost response writes the same
            self._ddb.update_item,
            TableName=self._table,
            Key=self._key(item.name),
            UpdateExpression=(
                "SET def = :d, cur = if_not_exists(cur, :c), fwd = if_not_exists(fwd, :z)"
            ),
            ExpressionAttributeValues={
                ":d": {"S": _definition(item)},
                ":c": {"N": str(item.cursor)},
                ":z": {"N": "0"},
            },
        )

    def delete(self, name: str) -> bool:
        return (
            delete_once(self._ddb.delete_item, TableName=self._table, Key=self._key(name))
            is not None
        )

    def advance(self, name: str, expected_cursor: int, cursor: int, forwarded: int) -> bool:
        """Move the cursor forward and add to forwarded_total, only if nobody else moved it
        (and the router still exists). False: lost the race or the router is gone."""
        return conditional(
            self._ddb.update_item,
            TableName=self._table,
            Key=self._key(name),
            UpdateExpression="SET cur = :c ADD fwd :f",
            ConditionExpression="attribute_exists(pk) AND cur = :e",
            ExpressionAttributeValues={
                ":c": {"N": str(cursor)},
                ":f": {"N": str(forwarded)},
                ":e": {"N": str(expected_cursor)},
            },
        )

    def acquire(self, name: str, owner: str, now_ms: int, ttl_ms: int) -> RouterItem | None:
        """Take or renew the forwarding lease until now + ttl. Returns the router as stored
        after the write (a strongly consistent cursor), or None: another owner holds an
        unexpired lease, or the router is gone."""
        resp = write_once(
            self._ddb.update_item,
            TableName=self._table,
            Key=self._key(name),
            UpdateExpression="SET lo = :o, lx = :x",
            ConditionExpression=(
                "attribute_exists(pk) AND (attribute_not_exists(lo) OR lo = :o OR lx < :now)"
            ),
            ExpressionAttributeValues={
                ":o": {"S": owner},
                ":x": {"N": str(now_ms + ttl_ms)},
                ":now": {"N": str(now_ms)},
            },
            ReturnValues="ALL_NEW",
        )
        return _item(resp["Attributes"]) if resp is not None else None

    def release(self, name: str, owner: str) -> bool:
        """Give the lease up if it is still ours (False: it was not, or the router is gone)."""
        return conditional(
            self._ddb.update_item,
            TableName=self._table,
            Key=self._key(name),
            UpdateExpression="REMOVE lo, lx",
            ConditionExpression="lo = :o",
            ExpressionAttributeValues={":o": {"S": owner}},
        )
