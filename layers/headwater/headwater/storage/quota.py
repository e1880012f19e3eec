"""DynamoDB adapter for the deployment-wide resource counters behind the §11 caps.

One item per counted resource in the INDEX table (pk "quota", sk = resource name, number
attribute n). A creation reserves first (a conditional ADD that fails when the counter would
pass the cap), then creates; a creation that does not happen gives its reservation back, and
a deletion releases it. A process that dies between the two steps leaves the counter high by
one: the engine recounts the real resources whenever a reservation is refused and corrects
the counter with a compare-and-set, so a cap never stays wrongly hit."""

from __future__ import annotations

from typing import Any

from headwater.settings import Settings
from headwater.storage.ddb import call, conditional
from headwater.storage.schema import INDEX

QUOTA_PK = "quota"


class DynamoQuotaStore:
    def __init__(self, client: Any, settings: Settings) -> None:
        self._ddb = client
        self._table = settings.table_name(INDEX.logical)

    def _key(self, name: str) -> dict[str, Any]:
        return {"pk": {"S": QUOTA_PK}, "sk": {"S": name}}

    def reserve(self, name: str, amount: int, cap: int | None) -> bool:
        """Add `amount`; with a cap, only if the result stays <= cap. False: refused."""
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "Key": self._key(name),
            "UpdateExpression": "SET n = if_not_exists(n, :z) + :a",
            "ExpressionAttributeValues": {":a": {"N": str(amount)}, ":z": {"N": "0"}},
        }
        if cap is not None:
            if amount > cap:
                return False
            kwargs["ConditionExpression"] = "attribute_not_exists(n) OR n <= :lim"
            kwargs["ExpressionAttributeValues"][":lim"] = {"N": str(cap - amount)}
        # once: the counter step must not apply twice when botocore re-sends it
        return conditional(self._ddb.update_item, once=True, **kwargs)

    def release(self, name: str, amount: int) -> None:
        if amount <= 0:
            return
        conditional(
            self._ddb.update_item,
            once=True,
            TableName=self._table,
            Key=self._key(name),
            UpdateExpression="SET n = if_not_exists(n, :z) - :a",
            ExpressionAttributeValues={":a": {"N": str(amount)}, ":z": {"N": "0"}},
        )

    def get(self, name: str) -> int | None:
        resp = call(
            self._ddb.get_item, TableName=self._table, Key=self._key(name), ConsistentRead=True
        )
        item = resp.get("Item")
        return int(item["n"]["N"]) if item and "n" in item else None

    def set_if(self, name: str, observed: int | None, value: int) -> bool:
        """Compare-and-set: write `value` only if the counter still reads `observed`."""
        if observed is None:
            cond = "attribute_not_exists(n)"
            values: dict[str, Any] = {":v": {"N": str(value)}}
        else:
            cond = "n = :o"
            values = {":v": {"N": str(value)}, ":o": {"N": str(observed)}}
        return conditional(
            self._ddb.update_item,
            TableName=self._table,
            Key=self._key(name),
            UpdateExpression="SET n = :v",
            ConditionExpression=cond,
            ExpressionAttributeValues=values,
        )
