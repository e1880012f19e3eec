"""Connection slots of `/api/v1/events` (spec: 16 concurrent connections per token), shared
by every process through the LEASES table, so the cap holds across Lambda instances.

A token has `cap` slots: items pk = "flagconn#<principal id>", sk = 0 .. cap-1. A connection
takes a slot with one conditional PutItem (the slot is absent, or its lease expired) and
holds it by renewing the lease (conditional on still owning it) well inside its lifetime;
closing deletes it (conditional likewise). A process that dies leaves its slots to expire,
so a crash costs the token a slot for at most one lease. Slots are tried from a random start
so concurrent connects rarely collide; a connect reads nothing and writes until one
condition succeeds, at most `cap` writes."""

from __future__ import annotations

import random
from typing import Any

from headwater.settings import Settings
from headwater.storage.ddb import conditional, delete_once
from headwater.storage.schema import LEASES

PK_PREFIX = "flagconn#"


class DynamoFlagSlots:
    def __init__(self, client: Any, settings: Settings) -> None:
        self._ddb = client
        self._table = settings.table_name(LEASES.logical)

    @staticmethod
    def _key(principal_id: str, slot: int) -> dict[str, Any]:
        return {"pk": {"S": PK_PREFIX + principal_id}, "sk": {"N": str(slot)}}

    def acquire(
        self, principal_id: str, cap: int, owner: str, now_ms: int, lease_ms: int
    ) -> int | None:
        """A free slot now held by `owner` until now + lease_ms, or None when all are held."""
        start = random.randrange(cap) if cap > 0 else 0
        for i in range(cap):
            slot = (start + i) % cap
            item = {
                **self._key(principal_id, slot),
                "own": {"S": owner},
                "exp": {"N": str(now_ms + lease_ms)},
                "ttl": {"N": str((now_ms + lease_ms) // 1000 + 3600)},
            }
            # retry-safe: a slot our own lost attempt took is recognised, not left held
            if conditional(
                self._ddb.put_item,
                TableName=self._table,
                Item=item,
                ConditionExpression="attribute_not_exists(pk) OR #e < :now",
                ExpressionAttributeNames={"#e": "exp"},
                ExpressionAttributeValues={":now": {"N": str(now_ms)}},
            ):
                return slot
        return None

    def renew(self, principal_id: str, slot: int, owner: str, now_ms: int, lease_ms: int) -> bool:
        """Extend the lease; False when the slot is no longer this owner's (it expired and
        another connection took it)."""
        return conditional(
            self._ddb.update_item,
            TableName=self._table,
            Key=self._key(principal_id, slot),
            UpdateExpression="SET #e = :exp, #t = :ttl",
            ConditionExpression="#o = :own",
            ExpressionAttributeNames={"#e": "exp", "#t": "ttl", "#o": "own"},
            ExpressionAttributeValues={
                ":exp": {"N": str(now_ms + lease_ms)},
                ":ttl": {"N": str((now_ms + lease_ms) // 1000 + 3600)},
                ":own": {"S": owner},
            },
        )

    def release(self, principal_id: str, slot: int, owner: str) -> None:
        delete_once(
            self._ddb.delete_item,
            TableName=self._table,
            Key=self._key(principal_id, slot),
            ConditionExpression="#o = :own",
            ExpressionAttributeNames={"#o": "own"},
            ExpressionAttributeValues={":own": {"S": owner}},
        )
