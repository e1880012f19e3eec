"""In-memory WsStore: API Gateway WebSocket connections and their topic subscriptions of a
MemoryAccount, answering as storage/ws_connections.py does (an expired item reads as absent;
an update never recreates a removed item; a delete or an advance applies once)."""

from __future__ import annotations

import dataclasses

from headwater.engine.ports.ws import WsConnection, WsSubscription
from tests.fakes.storage import MemoryAccount


class MemoryWsStore:
    def __init__(self, account: MemoryAccount) -> None:
        self._a = account

    def put_connection(self, conn: WsConnection) -> None:
        with self._a.lock:
            self._a.ws_connections[conn.connection_id] = conn

    def get_connection(self, connection_id: str, now_s: int) -> WsConnection | None:
        with self._a.lock:
            conn = self._a.ws_connections.get(connection_id)
            return None if conn is None or conn.expires_s < now_s else conn

    def delete_connection(self, connection_id: str) -> WsConnection | None:
        with self._a.lock:
            return self._a.ws_connections.pop(connection_id, None)

    def _topics(self, connection_id: str, change: str, topic: str) -> bool:
        with self._a.lock:
            conn = self._a.ws_connections.get(connection_id)
            if conn is None:
                return False
            topics = conn.topics | {topic} if change == "add" else conn.topics - {topic}
            self._a.ws_connections[connection_id] = dataclasses.replace(conn, topics=topics)
            return True

    def add_topic(self, connection_id: str, topic: str) -> bool:
        return self._topics(connection_id, "add", topic)

    def remove_topic(self, connection_id: str, topic: str) -> None:
        self._topics(connection_id, "remove", topic)

    def count_connections(self, now_s: int) -> int:
        with self._a.lock:
            return sum(1 for c in self._a.ws_connections.values() if c.expires_s >= now_s)

    def put_subscription(self, sub: WsSubscription) -> None:
        with self._a.lock:
            self._a.ws_subscriptions.setdefault(sub.topic, {})[sub.connection_id] = sub

    def delete_subscription(self, topic: str, connection_id: str, gen: str | None = None) -> bool:
        with self._a.lock:
            subs = self._a.ws_subscriptions.get(topic, {})
            old = subs.get(connection_id)
            if old is None or (gen is not None and old.gen != gen):
                return False
            del subs[connection_id]
            return True

    def subscriptions(self, topic: str, now_s: int) -> list[WsSubscription]:
        with self._a.lock:
            subs = self._a.ws_subscriptions.get(topic, {})
            return [subs[c] for c in sorted(subs) if subs[c].expires_s >= now_s]

    def advance(self, sub: WsSubscription, cursor: int, live: bool, fresh: bool) -> bool:
        with self._a.lock:
            subs = self._a.ws_subscriptions.get(sub.topic, {})
            old = subs.get(sub.connection_id)
            if old is None or old.cursor != sub.cursor or old.gen != sub.gen:
                return False
            subs[sub.connection_id] = dataclasses.replace(
                old, cursor=cursor, live=live, fresh=fresh
            )
            return True
