"""SessionStore contract (DynamoSessionStore, the in-memory fake), run against every backend in
conftest.BACKENDS."""

from __future__ import annotations

import dataclasses

import pytest
from adapter_helpers import T0, Backend

from headwater.engine.ports import WatchSessionItem
from headwater.storage.schema import SESSIONS, TABLES
from headwater.storage.sessions import WATCH_SK

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


def test_put_get_round_trip(backend: Backend) -> None:
    store = backend.sessions
    assert store.get("wid_abc") is None
    store.put(ITEM)
    assert store.get("wid_abc") == ITEM
    anon = dataclasses.replace(ITEM, wid="wid_anon", auth=False, scopes=frozenset())
    store.put(anon)
    assert store.get("wid_anon") == anon


def test_save_cursors_updates_and_never_recreates(backend: Backend) -> None:
    store = backend.sessions
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


def test_sweep_deletes_sessions_idle_past_their_ttl(backend: Backend) -> None:
    # GIVEN three sessions: one idle past its TTL at the sweep's "now", one exactly at it,
    # and one touched since
    store = backend.sessions
    store.put(dataclasses.replace(ITEM, wid="wid_old", last_access_ms=T0, ttl_ms=1000))
    store.put(dataclasses.replace(ITEM, wid="wid_edge", last_access_ms=T0 + 1000, ttl_ms=1000))
    store.put(dataclasses.replace(ITEM, wid="wid_new", last_access_ms=T0, ttl_ms=1000))
    assert store.save_cursors("wid_new", None, T0 + 1500, 1000)
    # WHEN the sweep runs at T0 + 2000 (idle means now - last access > ttl)
    live = store.sweep(T0 + 2000)
    # THEN only the idle one is gone, and the live ones are counted
    assert live == 2
    assert store.get("wid_old") is None
    assert store.get("wid_edge") is not None and store.get("wid_new") is not None


def test_a_session_item_carries_dynamodbs_ttl(aws_backend: Backend) -> None:
    # The DynamoDB item layout only: DynamoDB's own sweeper removes an abandoned session by
    # its `ttl` attribute (epoch seconds past last access + TTL). The fake has no such
    # attribute: readers and `sweep` judge by last_access_ms and ttl_ms, as they do here.
    aws_backend.sessions.put(ITEM)
    raw = aws_backend.raw_item(SESSIONS.logical, {"pk": {"S": "wid_abc"}, "sk": {"S": WATCH_SK}})
    assert raw is not None and int(raw["ttl"]["N"]) > (T0 + 300_000) // 1000


def test_the_fixed_clock_backends_expire_nothing_on_their_own(aws_backend: Backend) -> None:
    """T0 is in 2023, so every `ttl` these tests write is long past, and DynamoDB Local's TTL
    sweeper deletes such an item within seconds of its write: a test reading it back would be
    a coin toss. The adapter tests' tables are made without TTL (a store then expires only
    what the adapters' own readers and sweeps judge expired, as the fakes do)."""
    assert aws_backend.clients is not None
    ddb = aws_backend.clients.dynamodb
    with_ttl = [t for t in TABLES if t.ttl_attribute]
    assert with_ttl
    for table in with_ttl:
        got = ddb.describe_time_to_live(TableName=aws_backend.settings.table_name(table.logical))
        assert got["TimeToLiveDescription"]["TimeToLiveStatus"] == "DISABLED", table.logical
