"""/v0/ws on an API Gateway WebSocket API: what `$connect` and `$disconnect` need, and no
more. A connection is registered with its principal and management endpoint, holds a slot
of the deployment-wide stream cap, and is removed with its subscriptions. Nothing here loads
the log engine, the watch code or the command parser (ws/gateway.py): functions/ws
imports them on its first `$default` message, so an environment that only connects and
disconnects clients never pays for them (bench/bench_coldstart.py)."""

from __future__ import annotations

import time

from headwater.access.keys import Principal
from headwater.engine import WS_CONNECTIONS, Quotas
from headwater.engine.ports.ws import WsConnection, WsStore

# API Gateway closes every WebSocket connection after 2 hours; its items live as long.
CONNECTION_TTL_S = 2 * 3600 + 60


def now_s() -> int:
    return int(time.time())


def new_connection(
    principal: Principal, connection_id: str, endpoint: str, now_ms: int
) -> WsConnection:
    return WsConnection(
        connection_id=connection_id,
        key_id=principal.key_id,
        scopes=principal.scopes,
        prefixes=principal.prefixes,
        endpoint=endpoint,
        connected_ms=now_ms,
        expires_s=now_ms // 1000 + CONNECTION_TTL_S,
    )


def principal_of(conn: WsConnection) -> Principal:
    return Principal(conn.key_id, conn.scopes, conn.prefixes)


def drop_connection(
    store: WsStore, quotas: Quotas | None, connection_id: str
) -> WsConnection | None:
    """Remove a connection and its subscriptions (on $disconnect, or when a post finds the
    client gone). Only the caller that removed the item releases its cap slot."""
    conn = store.delete_connection(connection_id)
    if conn is None:
        return None
    for topic in conn.topics:
        store.delete_subscription(topic, connection_id)
    if quotas is not None:
        quotas.release(WS_CONNECTIONS)
    return conn
