"""SessionStore contract (DynamoSessionStore), run against every backend in conftest.BACKENDS."""

from __future__ import annotations

import dataclasses

import pytest
from adapter_helpers import T0, Backend

from headwater.engine.ports import WatchSessionItem
from headwater.storage.schema import SESSIONS
from headwater.storage.sessions import WATCH_SK, DynamoSessionStore

pytestmark = pytest.mark.adapters

ITEM = WatchSessionItem(
    wid="wid_abc",
    key_id="k1",
    scopes=frozenset({"read", "write"}),
    auth=True,
    spec='{"topics":[["ü",1,1]]}',
    cursors=None,
    last_access_ms=T0,
    ttl_ms=300_000,
)


def test_put_get_round_trip_and_ttl_attribute(backend: Backend) -> None:
    store = DynamoSessionStore(backend.clients.dynamodb, backend.settings)
    assert store.get("wid_abc") is None
    store.put(ITEM)
    assert store.get("wid_abc") == ITEM
    raw = backend.raw_item(SESSIONS.logical, {"pk": {"S": "wid_abc"}, "sk": {"S": WATCH_SK}})
    assert raw is not None and int(raw["ttl"]["N"]) > (T0 + 300_000) // 1000
    anon = dataclasses.replace(ITEM, wid="wid_anon", auth=False, scopes=frozenset())
    store.put(anon)
    assert store.get("wid_anon") == anon


def test_save_cursors_updates_and_never_recreates(backend: Backend) -> None:
    store = DynamoSessionStore(backend.clients.dynamodb, backend.settings)
    store.put(ITEM)
    assert store.save_cursors("wid_abc", '{"c":{"ü":7},"d":[]}', T0 + 50, 300_000)
    got = store.get("wid_abc")
    assert got == dataclasses.replace(ITEM, cursors='{"c":{"ü":7},"d":[]}', last_access_ms=T0 + 50)
    # a touch without cursors keeps them
    assert store.save_cursors("wid_abc", None, T0 + 60, 300_000)
    got = store.get("wid_abc")
    assert got is not None and got.cursors == '{"c":{"ü":7},"d":[]}'
    assert got.last_access_ms == T0 + 60
    store.delete("wid_abc")
    assert store.get("wid_abc") is None
    assert not store.save_cursors("wid_abc", "{}", T0 + 70, 300_000)
    assert store.get("wid_abc") is None
    store.delete("wid_abc")  # idempotent
