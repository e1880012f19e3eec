"""Dashboard configurations (/api/v2/configurations) in the DASHBOARD table.

Items: pk = "u#<user id>", sk = "c#<config id>" with name, tickers (a list), created and
updated times (epoch ms) and a version that every update bumps (streams compare it to pick
up edits). Per user one counter item, sk = "#count", caps how many configurations the user
holds: a create is one transaction (counter below the cap and incremented + the new item),
a delete likewise (the item existed + the counter decremented), so the cap holds however
many processes create at once, and a failed half never lands."""

from __future__ import annotations

from typing import Any

from headwater.engine.ports.dashboard import ConfigLimitReached, DashboardConfig
from headwater.errors import StorageUnavailable
from headwater.settings import Settings
from headwater.storage.ddb import (
    any_mine,
    call,
    failed_positions,
    mark_cid,
    new_cid,
    transact,
    write_once,
)
from headwater.storage.schema import DASHBOARD

USER_PREFIX = "u#"
CONFIG_PREFIX = "c#"
COUNTER_SK = "#count"


def _key(user_id: str, config_id: str) -> dict[str, Any]:
    return {"pk": {"S": USER_PREFIX + user_id}, "sk": {"S": CONFIG_PREFIX + config_id}}


def _counter_key(user_id: str) -> dict[str, Any]:
    return {"pk": {"S": USER_PREFIX + user_id}, "sk": {"S": COUNTER_SK}}


def _of(item: dict[str, Any]) -> DashboardConfig:
    return DashboardConfig(
        user_id=item["pk"]["S"].removeprefix(USER_PREFIX),
        config_id=item["sk"]["S"].removeprefix(CONFIG_PREFIX),
        name=item["name"]["S"],
        tickers=tuple(v["S"] for v in item.get("tickers", {}).get("L", [])),
        created_ms=int(item["created"]["N"]),
        updated_ms=int(item["updated"]["N"]),
        version=int(item["ver"]["N"]),
    )


class DynamoConfigStore:
    def __init__(self, client: Any, settings: Settings) -> None:
        self._ddb = client
        self._table = settings.table_name(DASHBOARD.logical)

    def create(self, cfg: DashboardConfig, max_per_user: int) -> None:
        """Store a new configuration (ConfigLimitReached when the user holds the maximum)."""
        item = {
            **_key(cfg.user_id, cfg.config_id),
            "name": {"S": cfg.name},
            "tickers": {"L": [{"S": t} for t in cfg.tickers]},
            "created": {"N": str(cfg.created_ms)},
            "updated": {"N": str(cfg.updated_ms)},
            "ver": {"N": str(cfg.version)},
        }
        items: list[dict[str, Any]] = [
            {
                "Update": {
                    "TableName": self._table,
                    "Key": _counter_key(cfg.user_id),
                    "UpdateExpression": "SET n = if_not_exists(n, :zero) + :one",
                    "ConditionExpression": "attribute_not_exists(n) OR n < :max",
                    "ExpressionAttributeValues": {
                        ":zero": {"N": "0"},
                        ":one": {"N": "1"},
                        ":max": {"N": str(max_per_user)},
                    },
                }
            },
            {
                "Put": {
                    "TableName": self._table,
                    "Item": item,
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            },
        ]
        cid = new_cid()
        outcome = transact(self._ddb, mark_cid(items, cid), cid)
        if outcome.committed or (outcome.retried and any_mine(outcome.reasons, cid)):
            return  # (the new item holding our commit id: an earlier attempt applied)
        if 0 in failed_positions(outcome.reasons):
            raise ConfigLimitReached
        raise StorageUnavailable("configuration id collided; retry")

    def get(self, user_id: str, config_id: str) -> DashboardConfig | None:
        resp = call(
            self._ddb.get_item,
            TableName=self._table,
            Key=_key(user_id, config_id),
            ConsistentRead=True,
        )
        item = resp.get("Item")
        return _of(item) if item else None

    def get_many(self, keys: list[tuple[str, str]]) -> dict[tuple[str, str], DashboardConfig]:
        """The configurations that exist among (user id, config id) keys: one strongly
        consistent BatchGetItem per 100 keys (unprocessed keys retried)."""
        out: dict[tuple[str, str], DashboardConfig] = {}
        for i in range(0, len(keys), 100):
            pending: dict[str, Any] = {
                self._table: {
                    "Keys": [_key(u, c) for u, c in keys[i : i + 100]],
                    "ConsistentRead": True,
                }
            }
            while pending:
                resp = call(self._ddb.batch_get_item, RequestItems=pending)
                for item in resp.get("Responses", {}).get(self._table, []):
                    cfg = _of(item)
                    out[(cfg.user_id, cfg.config_id)] = cfg
                pending = resp.get("UnprocessedKeys") or {}
        return out

    def list(self, user_id: str) -> list[DashboardConfig]:
        """The user's configurations, oldest first."""
        out: list[DashboardConfig] = []
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :c)",
            "ExpressionAttributeValues": {
                ":pk": {"S": USER_PREFIX + user_id},
                ":c": {"S": CONFIG_PREFIX},
            },
            "ConsistentRead": True,
        }
        while True:
            resp = call(self._ddb.query, **kwargs)
            out.extend(_of(it) for it in resp.get("Items", []))
            last = resp.get("LastEvaluatedKey")
            if not last:
                break
            kwargs["ExclusiveStartKey"] = last
        out.sort(key=lambda c: (c.created_ms, c.config_id))
        return out

    def update(
        self,
        user_id: str,
        config_id: str,
        name: str | None,
        tickers: tuple[str, ...] | None,
        now_ms: int,
    ) -> DashboardConfig | None:
        """Set the given fields (None: kept) in one conditional write, so concurrent edits
        of different fields both land; None when there is no such configuration."""
        sets = ["updated = :now"]
        names: dict[str, str] = {}
        values: dict[str, Any] = {":now": {"N": str(now_ms)}, ":one": {"N": "1"}}
        if name is not None:
            sets.append("#n = :name")
            names["#n"] = "name"
            values[":name"] = {"S": name}
        if tickers is not None:
            sets.append("tickers = :t")
            values[":t"] = {"L": [{"S": t} for t in tickers]}
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "Key": _key(user_id, config_id),
            "UpdateExpression": "SET " + ", ".join(sets) + " ADD ver :one",
            "ConditionExpression": "attribute_exists(pk)",
            "ExpressionAttributeValues": values,
            "ReturnValues": "ALL_NEW",
        }
        if names:
            kwargs["ExpressionAttributeNames"] = names
        # once: `ADD ver` must not apply twice when botocore re-sends the update
        resp = write_once(self._ddb.update_item, once=True, **kwargs)
        return _of(resp["Attributes"]) if resp is not None else None

    def delete(self, user_id: str, config_id: str) -> bool:
        """Delete a configuration (False when there is no such configuration)."""
        items: list[dict[str, Any]] = [
            {
                "Delete": {
                    "TableName": self._table,
                    "Key": _key(user_id, config_id),
                    "ConditionExpression": "attribute_exists(pk)",
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            },
            {
                "Update": {
                    "TableName": self._table,
                    "Key": _counter_key(user_id),
                    "UpdateExpression": "SET n = n - :one",
                    "ConditionExpression": "n > :zero",
                    "ExpressionAttributeValues": {
                        ":zero": {"N": "0"},
                        ":one": {"N": "1"},
                    },
                }
            },
        ]
        cid = new_cid()
        outcome = transact(self._ddb, mark_cid(items, cid), cid)
        if outcome.committed:
            return True
        if 0 in failed_positions(outcome.reasons):
            # Gone. After a lost response the configuration may be gone by our own earlier
            # attempt: the caller asked for it to be gone, and it is (as delete_once).
            return outcome.retried and not outcome.reasons[0].get("Item")
        raise StorageUnavailable("configuration counter out of step; retry")
