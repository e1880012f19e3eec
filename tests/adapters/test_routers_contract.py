"""RouterStore contract (DynamoRouterStore, the in-memory fake), run against every backend in
conftest.BACKENDS: definitions that keep their cursor, the conditional cursor advance, and
the forwarding lease (one owner at a time, taken over only once expired)."""

from __future__ import annotations

import dataclasses

import pytest
from adapter_helpers import Backend

from headwater.engine.ports.routers import RouterItem

pytestmark = pytest.mark.adapters

T0 = 1_700_000_000_000


def router(name: str, **kw: object) -> RouterItem:
    fields: dict[str, object] = {"name": name, "source": "src", "dest": "dst", **kw}
    return RouterItem(**fields)  # type: ignore[arg-type]


def test_definitions_list_in_name_order_and_keep_their_cursor(backend: Backend) -> None:
    store = backend.routers
    assert store.list_all() == [] and store.get("r1") is None
    store.put(router("r2", cursor=7))
    store.put(router("r1", filter=("a", "b"), guarantee="exactly_once", preserve_tag=False))
    assert [r.name for r in store.list_all()] == ["r1", "r2"]
    r1 = store.get("r1")
    assert r1 is not None
    assert (r1.filter, r1.guarantee, r1.preserve_tag, r1.cursor) == (
        ("a", "b"),
        "exactly_once",
        False,
        0,
    )
    assert store.get("r2") == router("r2", cursor=7)
    # a new definition (and a repeat of a put whose answer was lost) keeps cursor and count
    assert store.advance("r2", 7, 12, 5)
    store.put(router("r2", dest="other", cursor=0))
    again = store.get("r2")
    assert again is not None
    assert (again.dest, again.cursor, again.forwarded_total) == ("other", 12, 5)


def test_the_cursor_moves_only_from_the_cursor_read(backend: Backend) -> None:
    store = backend.routers
    store.put(router("r"))
    assert store.advance("r", 0, 3, 3)
    assert not store.advance("r", 0, 4, 1)  # a second forwarder read cursor 0 too: it loses
    assert store.advance("r", 3, 5, 1)
    got = store.get("r")
    assert got is not None and (got.cursor, got.forwarded_total) == (5, 4)
    assert not store.advance("gone", 0, 1, 1)  # no item is created by an advance
    assert store.get("gone") is None


def test_one_owner_holds_the_lease_until_it_expires_or_is_released(backend: Backend) -> None:
    store = backend.routers
    store.put(router("r", cursor=2))
    held = store.acquire("r", "a", T0, 1000)
    assert held is not None
    assert (held.lease_owner, held.lease_expires_ms, held.cursor) == ("a", T0 + 1000, 2)
    assert store.acquire("r", "b", T0 + 500, 1000) is None  # a's lease is live
    renewed = store.acquire("r", "a", T0 + 500, 1000)  # the owner renews
    assert renewed is not None and renewed.lease_expires_ms == T0 + 1500
    assert not store.release("r", "b")  # not b's to give up
    taken = store.acquire("r", "b", T0 + 1501, 1000)  # expired: b takes it over
    assert taken is not None and taken.lease_owner == "b"
    assert not store.release("r", "a")  # a lost it
    assert store.release("r", "b")
    got = store.get("r")
    assert got is not None and got.lease_owner is None
    assert store.acquire("r", "c", T0 + 1502, 1000) is not None  # free again
    # a new definition leaves the lease with its owner
    store.put(dataclasses.replace(router("r"), dest="d2"))
    got = store.get("r")
    assert got is not None and got.lease_owner == "c"


def test_a_deleted_router_is_gone_for_every_call(backend: Backend) -> None:
    store = backend.routers
    store.put(router("r"))
    assert store.delete("r")
    assert not store.delete("r")
    assert store.get("r") is None and store.list_all() == []
    assert store.acquire("r", "a", T0, 1000) is None
    assert not store.release("r", "a")
