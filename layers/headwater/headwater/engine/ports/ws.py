"""WebSocket gateway ports (http/ws_gateway.py; storage/ws_connections.py)."""

from __future__ import annotations

from dataclasses import dataclass


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
