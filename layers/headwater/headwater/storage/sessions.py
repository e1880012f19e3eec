"""DynamoDB adapter for watch sessions (the SESSIONS table: pk = wid, sk = "watch"). The
DynamoDB TTL attribute is set to last access + session TTL, so an abandoned session is also
removed by DynamoDB itself; readers treat a session past its TTL as gone (spec §7.1)."""

from __future__ import annotations

from typing import Any

from headwater.engine.ports import WatchSessionItem
from headwater.settings import Settings
from headwater.storage.ddb import call, conditional, delete_once
from headwater.storage.schema import SESSIONS

WATCH_SK = "watch"


def _ttl_s(now_ms: int, ttl_ms: int) -> str:
    return str((now_ms + ttl_ms) // 1000 + 1)


class DynamoSessionStore:
    def __init__(self, client: Any, settings: Settings) -> None:
        self._ddb = client
        self._table = settings.table_name(SESSIONS.logical)

    def _key(self, wid: str) -> dict[str, Any]:
        return {"pk": {"S": wid}, "sk": {"S": WATCH_SK}}

    def put(self, item: WatchSessionItem) -> None:
        attrs: dict[str, Any] = {
            **self._key(item.wid),
            "kid": {"S": item.key_id},
            "sc": {"S": "+".join(sorted(item.scopes))},
            "au": {"BOOL": item.auth},
            "spec": {"S": item.spec},
            "la": {"N": str(item.last_access_ms)},
            "tm": {"N": str(item.ttl_ms)},
            "ttl": {"N": _ttl_s(item.last_access_ms, item.ttl_ms)},
        }
        if item.cursors is not None:
            attrs["cur"] = {"S": item.cursors}
        call(self._ddb.put_item, TableName=self._table, Item=attrs)

    def get(self, wid: str) -> WatchSessionItem | None:
        resp = call(
            self._ddb.get_item, TableName=self._table, Key=self._key(wid), ConsistentRead=True
        )
        it = resp.get("Item")
        if not it:
            return None
        return WatchSessionItem(
            wid=wid,
            key_id=it["kid"]["S"],
            scopes=frozenset(s for s in it["sc"]["S"].split("+") if s),
            auth=bool(it["au"]["BOOL"]),
            spec=it["spec"]["S"],
            cursors=it["cur"]["S"] if "cur" in it else None,
            last_access_ms=int(it["la"]["N"]),
            ttl_ms=int(it["tm"]["N"]),
        )

    def save_cursors(self, wid: str, cursors: str | None, now_ms: int, ttl_ms: int) -> bool:
        """Record the delivered cursors and refresh the last access. False if the session no
        longer exists (it was reclaimed): an update never recreates it."""
        sets = ["la = :la", "#t = :ttl"]
        values: dict[str, Any] = {
            ":la": {"N": str(now_ms)},
            ":ttl": {"N": _ttl_s(now_ms, ttl_ms)},
        }
        if cursors is not None:
            sets.append("cur = :cur")
            values[":cur"] = {"S": cursors}
        return conditional(
            self._ddb.update_item,
            TableName=self._table,
            Key=self._key(wid),
            UpdateExpression="SET " + ", ".join(sets),
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeNames={"#t": "ttl"},
            ExpressionAttributeValues=values,
        )

    def delete(self, wid: str) -> bool:
        """True if this call removed the session (so exactly one caller releases its slot)."""
        # (a delete repeated after a lost response finds nothing: it still counts as ours)
        return (
            delete_once(self._ddb.delete_item, TableName=self._table, Key=self._key(wid))
            is not None
        )

    def sweep(self, now_ms: int) -> int:
        """The GC sweep (spec §7.1/§11): delete every session idle past its TTL and return
        how many live ones remain. One paged Scan of the sessions table; run only when the
        session cap refuses a POST."""
        live = 0
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "ProjectionExpression": "pk, sk, la, tm",
        }
        while True:
            resp = call(self._ddb.scan, **kwargs)
            for it in resp.get("Items", []):
                if it.get("sk", {}).get("S") != WATCH_SK:
                    continue
                if now_ms - int(it["la"]["N"]) > int(it["tm"]["N"]):
                    self._delete_if_idle(it)
                else:
                    live += 1
            last = resp.get("LastEvaluatedKey")
            if not last:
                return live
            kwargs["ExclusiveStartKey"] = last

    def _delete_if_idle(self, it: dict[str, Any]) -> None:
        # Conditional on the last access we saw: a stream that touched it meanwhile wins.
        delete_once(
            self._ddb.delete_item,
            TableName=self._table,
            Key=self._key(it["pk"]["S"]),
            ConditionExpression="la = :la",
            ExpressionAttributeValues={":la": it["la"]},
        )
