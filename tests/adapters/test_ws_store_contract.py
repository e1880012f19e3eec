"""WsStore contract (DynamoWsStore, the in-memory fake), run against every backend in
conftest.BACKENDS: API Gateway connections (expired ones read as gone, deleted once) and
their subscriptions (a delivery's cursor moves only from the cursor and generation it read;
nothing recreates a removed item)."""

from __future__ import annotations

import dataclasses

import pytest
from adapter_helpers import Backend

from headwater.engine.ports.ws import WsConnection, WsSubscription

pytestmark = pytest.mark.adapters

NOW = 1_700_000_000  # epoch seconds
EP = "https://abc.execute-api.us-east-1.amazonaws.com/prod"


def conn(cid: str, expires_s: int = NOW + 7200, **kw: object) -> WsConnection:
    fields: dict[str, object] = {
        "connection_id": cid,
        "key_id": "k1",
        "scopes": frozenset({"read", "write"}),
        "prefixes": ("t/",),
        "endpoint": EP,
        "connected_ms": NOW * 1000,
        "expires_s": expires_s,
        **kw,
    }
    return WsConnection(**fields)  # type: ignore[arg-type]


def sub(
    topic: str, cid: str, gen: str = "g1", cursor: int = 0, expires_s: int = NOW + 7200
) -> WsSubscription:
    return WsSubscription(topic, cid, EP, cursor, 1, '{"limit":10}', gen, False, True, expires_s)


def test_connections_read_back_until_they_expire_and_delete_once(backend: Backend) -> None:
    store = backend.ws
    store.put_connection(conn("c1"))
    store.put_connection(conn("c2", topics=frozenset({"t/a"})))
    store.put_connection(conn("old", expires_s=NOW - 1))
    assert store.get_connection("c1", NOW) == conn("c1")
    assert store.get_connection("c2", NOW) == conn("c2", topics=frozenset({"t/a"}))
    assert store.get_connection("old", NOW) is None  # past its TTL: gone to readers
    assert store.get_connection("nope", NOW) is None
    assert store.count_connections(NOW) == 2
    assert store.delete_connection("c1") == conn("c1")
    assert store.delete_connection("c1") is None  # exactly one caller cleans up
    assert store.count_connections(NOW) == 1


def test_topics_are_added_and_removed_but_never_recreate_a_connection(backend: Backend) -> None:
    store = backend.ws
    store.put_connection(conn("c"))
    assert store.add_topic("c", "t/a") and store.add_topic("c", "t/b")
    store.remove_topic("c", "t/a")
    got = store.get_connection("c", NOW)
    assert got is not None and got.topics == frozenset({"t/b"})
    store.delete_connection("c")
    assert not store.add_topic("c", "t/c")
    store.remove_topic("c", "t/b")
    assert store.get_connection("c", NOW) is None


def test_subscriptions_of_a_topic_and_their_generation(backend: Backend) -> None:
    store = backend.ws
    store.put_subscription(sub("t/a", "c2"))
    store.put_subscription(sub("t/a", "c1"))
    store.put_subscription(sub("t/a", "c3", expires_s=NOW - 1))
    store.put_subscription(sub("t/b", "c1"))
    assert sorted(s.connection_id for s in store.subscriptions("t/a", NOW)) == ["c1", "c2"]
    assert [s for s in store.subscriptions("t/a", NOW) if s.connection_id == "c1"] == [
        sub("t/a", "c1")
    ]
    # a resubscribe replaces the generation: removing the old one leaves the new in place
    store.put_subscription(sub("t/a", "c1", gen="g2"))
    assert not store.delete_subscription("t/a", "c1", gen="g1")
    assert store.delete_subscription("t/a", "c1", gen="g2")
    assert not store.delete_subscription("t/a", "c1")
    assert store.delete_subscription("t/b", "c1")  # without a generation: whichever it is
    assert [s.connection_id for s in store.subscriptions("t/a", NOW)] == ["c2"]


def test_a_delivery_advances_only_from_what_it_read(backend: Backend) -> None:
    store = backend.ws
    first = sub("t/a", "c", cursor=3)
    store.put_subscription(first)
    assert store.advance(first, 7, True, False)
    (now,) = store.subscriptions("t/a", NOW)
    assert (now.cursor, now.live, now.fresh) == (7, True, False)
    assert not store.advance(first, 9, True, False)  # another delivery moved it first
    assert store.advance(now, 9, True, False)
    store.put_subscription(dataclasses.replace(first, gen="g2", cursor=9))
    assert not store.advance(now, 12, True, False)  # subscribed again meanwhile: stale
    store.delete_subscription("t/a", "c")
    later = dataclasses.replace(first, gen="g2", cursor=9)
    assert not store.advance(later, 12, True, False)  # never recreates a removed one
    assert store.subscriptions("t/a", NOW) == []
