"""WebSocket gateway ports (ws/gate.py, ws/gateway.py; storage/ws_connections.py): the
connections and subscriptions API Gateway holds, and posting frames to a connection."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class WsConnection:
    """A WebSocket connection held by API Gateway: who it is, where to post to it, when
    it expires, and the topics it subscribes."""

    connection_id: str
    key_id: str
    scopes: frozenset[str]
    prefixes: tuple[str, ...]
    endpoint: str  # https://<domain>/<stage>: where post_to_connection goes
    connected_ms: int
    expires_s: int  # DynamoDB TTL (epoch seconds)
    topics: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class WsSubscription:
    """One topic a WebSocket connection subscribes: its delivery cursor and options, and
    the generation that makes an in-flight delivery stale."""

    topic: str
    connection_id: str
    endpoint: str
    cursor: int
    epoch: int
    opts: str  # WatchSpec JSON: node, limit, max_batch_bytes, include_*
    gen: str  # identity: a resubscribe (or unsubscribe) makes an in-flight delivery stale
    live: bool
    fresh: bool
    expires_s: int


class ConnectionGone(Exception):
    """The client has disconnected (API Gateway's GoneException)."""


class WsStore(Protocol):
    def put_connection(self, conn: WsConnection) -> None: ...
    def get_connection(self, connection_id: str, now_s: int) -> WsConnection | None: ...
    def delete_connection(self, connection_id: str) -> WsConnection | None: ...
    def add_topic(self, connection_id: str, topic: str) -> bool: ...
    def remove_topic(self, connection_id: str, topic: str) -> None: ...
    def count_connections(self, now_s: int) -> int: ...
    def put_subscription(self, sub: WsSubscription) -> None: ...
    def delete_subscription(
        self, topic: str, connection_id: str, gen: str | None = None
    ) -> bool: ...
    def subscriptions(self, topic: str, now_s: int) -> list[WsSubscription]: ...
    def advance(self, sub: WsSubscription, cursor: int, live: bool, fresh: bool) -> bool: ...


class Poster(Protocol):
    """Frames to a connection (raises ConnectionGone when the client has left)."""

    def post(self, endpoint: str, connection_id: str, data: bytes) -> None: ...
    def close(self, endpoint: str, connection_id: str) -> None: ...
