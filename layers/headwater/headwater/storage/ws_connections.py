"""Adapters for /v0/ws on an API Gateway WebSocket API: the stored connections and
subscriptions (DynamoDB), and posting frames to a connection (the API Gateway management
API). The only code of that feature that sees boto3 and ClientError.

- Connection: SESSIONS table, pk "wsc#<connectionId>", sk "conn": the principal (`kid`,
  `sc` scopes, `px` prefixes), `ep` the management endpoint, `ca` connected-at ms, `tp` the
  subscribed topics (a string set, absent when empty), `ttl`.
- Subscription: INDEX table, pk "wss#<topic>", sk "<connectionId>": `cur` cursor, `epo`
  epoch, `op` options (WatchSpec JSON), `gen` the subscription's identity (a resubscribe
  replaces it), `lv` caught-up sent, `fr` never read, `ep` the connection's endpoint (so a
  delivery needs no connection read), `ttl` = the connection's.

Both expire with the connection (API Gateway closes every connection after 2 hours), so
whatever a missed $disconnect leaves behind is removed by DynamoDB's TTL; readers ignore
items past their TTL before that."""

from __future__ import annotations

import json
import os
import threading
from typing import Any
from urllib.parse import urlsplit

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from headwater.engine.ports.ws import ConnectionGone, WsConnection, WsSubscription
from headwater.errors import StorageUnavailable
from headwater.settings import Settings
from headwater.storage.ddb import conditional, delete_once, error_code
from headwater.storage.schema import INDEX, SESSIONS

CONNECTION_PK = "wsc#"
CONNECTION_SK = "conn"
SUBSCRIPTION_PK = "wss#"


def _storage_error(exc: ClientError | BotoCoreError) -> StorageUnavailable:
    if isinstance(exc, ClientError):
        return StorageUnavailable(f"storage error: {error_code(exc)}")
    return StorageUnavailable(f"storage unreachable: {type(exc).__name__}")


class DynamoWsStore:
    def __init__(self, client: Any, settings: Settings) -> None:
        self._ddb = client
        self._sessions = settings.table_name(SESSIONS.logical)
        self._index = settings.table_name(INDEX.logical)

    # --- connections (SESSIONS) -------------------------------------------------------
    @staticmethod
    def _conn_key(connection_id: str) -> dict[str, Any]:
        return {"pk": {"S": CONNECTION_PK + connection_id}, "sk": {"S": CONNECTION_SK}}

    def put_connection(self, conn: WsConnection) -> None:
        item: dict[str, Any] = {
            **self._conn_key(conn.connection_id),
            "kid": {"S": conn.key_id},
            "sc": {"S": "+".join(sorted(conn.scopes))},
            "px": {"S": json.dumps(list(conn.prefixes))},
            "ep": {"S": conn.endpoint},
            "ca": {"N": str(conn.connected_ms)},
            "ttl": {"N": str(conn.expires_s)},
        }
        if conn.topics:
            item["tp"] = {"SS": sorted(conn.topics)}
        try:
            self._ddb.put_item(TableName=self._sessions, Item=item)
        except (ClientError, BotoCoreError) as exc:
            raise _storage_error(exc) from exc

    @staticmethod
    def _connection(it: dict[str, Any]) -> WsConnection:
        return WsConnection(
            connection_id=it["pk"]["S"].removeprefix(CONNECTION_PK),
            key_id=it["kid"]["S"],
            scopes=frozenset(s for s in it["sc"]["S"].split("+") if s),
            prefixes=tuple(json.loads(it["px"]["S"])),
            endpoint=it["ep"]["S"],
            connected_ms=int(it["ca"]["N"]),
            expires_s=int(it["ttl"]["N"]),
            topics=frozenset(it.get("tp", {}).get("SS", [])),
        )

    def get_connection(self, connection_id: str, now_s: int) -> WsConnection | None:
        try:
            resp = self._ddb.get_item(
                TableName=self._sessions, Key=self._conn_key(connection_id), ConsistentRead=True
            )
        except (ClientError, BotoCoreError) as exc:
            raise _storage_error(exc) from exc
        it = resp.get("Item")
        if not it or int(it["ttl"]["N"]) < now_s:
            return None
        return self._connection(it)

    def delete_connection(self, connection_id: str) -> WsConnection | None:
        """The removed connection, or None if it was already gone (so exactly one caller
        cleans up its subscriptions and releases its slot)."""
        old = delete_once(
            self._ddb.delete_item, TableName=self._sessions, Key=self._conn_key(connection_id)
        )
        # (a delete repeated after a lost response finds nothing: the connection's item is
        # then unknown, and its cleanup falls to the subscriptions' TTL)
        return self._connection(old) if old else None

    def add_topic(self, connection_id: str, topic: str) -> bool:
        """False if the connection no longer exists (an update never recreates it)."""
        return self._update_topics(connection_id, "ADD", topic)

    def remove_topic(self, connection_id: str, topic: str) -> None:
        self._update_topics(connection_id, "DELETE", topic)

    def _update_topics(self, connection_id: str, action: str, topic: str) -> bool:
        return conditional(
            self._ddb.update_item,
            TableName=self._sessions,
            Key=self._conn_key(connection_id),
            UpdateExpression=f"{action} tp :t",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues={":t": {"SS": [topic]}},
        )

    def count_connections(self, now_s: int) -> int:
        """Live connections, by a paged Scan of the sessions table (the cap's recount: run
        only when the cap refuses a connection, at most every 2 s per process)."""
        live = 0
        kwargs: dict[str, Any] = {
            "TableName": self._sessions,
            "ProjectionExpression": "pk, sk, #t",
            "ExpressionAttributeNames": {"#t": "ttl"},
        }
        try:
            while True:
                resp = self._ddb.scan(**kwargs)
                for it in resp.get("Items", []):
                    if (
                        it["pk"]["S"].startswith(CONNECTION_PK)
                        and it["sk"]["S"] == CONNECTION_SK
                        and int(it.get("ttl", {}).get("N", "0")) >= now_s
                    ):
                        live += 1
                last = resp.get("LastEvaluatedKey")
                if not last:
                    return live
                kwargs["ExclusiveStartKey"] = last
        except (ClientError, BotoCoreError) as exc:
            raise _storage_error(exc) from exc

    # --- subscriptions (INDEX) --------------------------------------------------------
    @staticmethod
    def _sub_key(topic: str, connection_id: str) -> dict[str, Any]:
        return {"pk": {"S": SUBSCRIPTION_PK + topic}, "sk": {"S": connection_id}}

    def put_subscription(self, sub: WsSubscription) -> None:
        item = {
            **self._sub_key(sub.topic, sub.connection_id),
            "ep": {"S": sub.endpoint},
            "cur": {"N": str(sub.cursor)},
            "epo": {"N": str(sub.epoch)},
            "op": {"S": sub.opts},
            "gen": {"S": sub.gen},
            "lv": {"BOOL": sub.live},
            "fr": {"BOOL": sub.fresh},
            "ttl": {"N": str(sub.expires_s)},
        }
        try:
            self._ddb.put_item(TableName=self._index, Item=item)
        except (ClientError, BotoCoreError) as exc:
            raise _storage_error(exc) from exc

    def delete_subscription(self, topic: str, connection_id: str, gen: str | None = None) -> bool:
        """True if this call removed it. With `gen`, only that subscription (not a newer
        one of the same topic on the same connection)."""
        kwargs: dict[str, Any] = {
            "TableName": self._index,
            "Key": self._sub_key(topic, connection_id),
        }
        if gen is not None:
            kwargs["ConditionExpression"] = "gen = :g"
            kwargs["ExpressionAttributeValues"] = {":g": {"S": gen}}
        return delete_once(self._ddb.delete_item, **kwargs) is not None

    def subscriptions(self, topic: str, now_s: int) -> list[WsSubscription]:
        """Every live subscription of `topic` (one strongly consistent, paged Query)."""
        out: list[WsSubscription] = []
        kwargs: dict[str, Any] = {
            "TableName": self._index,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": SUBSCRIPTION_PK + topic}},
            "ConsistentRead": True,
        }
        try:
            while True:
                resp = self._ddb.query(**kwargs)
                for it in resp.get("Items", []):
                    if int(it["ttl"]["N"]) < now_s:
                        continue  # its connection is over; DynamoDB's TTL removes it
                    out.append(
                        WsSubscription(
                            topic=topic,
                            connection_id=it["sk"]["S"],
                            endpoint=it["ep"]["S"],
                            cursor=int(it["cur"]["N"]),
                            epoch=int(it["epo"]["N"]),
                            opts=it["op"]["S"],
                            gen=it["gen"]["S"],
                            live=bool(it["lv"]["BOOL"]),
                            fresh=bool(it["fr"]["BOOL"]),
                            expires_s=int(it["ttl"]["N"]),
                        )
                    )
                last = resp.get("LastEvaluatedKey")
                if not last:
                    return out
                kwargs["ExclusiveStartKey"] = last
        except (ClientError, BotoCoreError) as exc:
            raise _storage_error(exc) from exc

    def advance(self, sub: WsSubscription, cursor: int, live: bool, fresh: bool) -> bool:
        """Move the cursor on if it still reads `sub.cursor` and the subscription is still
        `sub.gen`. False: another delivery moved it first (or the client unsubscribed or
        subscribed again); never recreates a removed subscription."""
        return conditional(
            self._ddb.update_item,
            TableName=self._index,
            Key=self._sub_key(sub.topic, sub.connection_id),
            UpdateExpression="SET cur = :n, lv = :lv, fr = :fr",
            ConditionExpression="cur = :c AND gen = :g",
            ExpressionAttributeValues={
                ":n": {"N": str(cursor)},
                ":c": {"N": str(sub.cursor)},
                ":g": {"S": sub.gen},
                ":lv": {"BOOL": live},
                ":fr": {"BOOL": fresh},
            },
        )


# --- posting frames ------------------------------------------------------------------
_POST_CONFIG = Config(
    retries={"max_attempts": 4, "mode": "standard"},
    connect_timeout=3,
    read_timeout=10,
    max_pool_connections=32,
)
ENDPOINT_VARS = ("AWS_ENDPOINT_URL_APIGATEWAYMANAGEMENTAPI", "AWS_ENDPOINT_URL")


def management_endpoint(endpoint: str) -> str:
    """The URL to call for a stored endpoint: itself on AWS; with AWS_ENDPOINT_URL_* set
    (an emulator), that scheme and host with the stored path (the stage) kept."""
    override = next((os.environ[v] for v in ENDPOINT_VARS if os.environ.get(v)), None)
    if override is None:
        return endpoint
    base = urlsplit(override)
    return f"{base.scheme}://{base.netloc}{urlsplit(endpoint).path}"


class ApiGatewayPoster:
    """post_to_connection / delete_connection through one management-API client per
    endpoint (API stage), created on first use and kept."""

    def __init__(self, region: str, session: boto3.Session | None = None) -> None:
        self._session = session or boto3.Session(region_name=region)
        self._region = region
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _client(self, endpoint: str) -> Any:
        url = management_endpoint(endpoint)
        with self._lock:
            client = self._clients.get(url)
            if client is None:
                client = self._session.client(
                    "apigatewaymanagementapi",
                    endpoint_url=url,
                    region_name=self._region,
                    config=_POST_CONFIG,
                )
                self._clients[url] = client
            return client

    def post(self, endpoint: str, connection_id: str, data: bytes) -> None:
        try:
            self._client(endpoint).post_to_connection(ConnectionId=connection_id, Data=data)
        except ClientError as exc:
            if error_code(exc) == "GoneException":
                raise ConnectionGone(connection_id) from exc
            raise StorageUnavailable(f"websocket post failed: {error_code(exc)}") from exc

    def close(self, endpoint: str, connection_id: str) -> None:
        try:
            self._client(endpoint).delete_connection(ConnectionId=connection_id)
        except ClientError as exc:
            if error_code(exc) != "GoneException":
                raise StorageUnavailable(f"websocket close failed: {error_code(exc)}") from exc
