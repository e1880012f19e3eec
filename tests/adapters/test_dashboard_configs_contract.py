"""DashboardConfigStore contract (DynamoConfigStore, the in-memory fake), run against every
backend in conftest.BACKENDS: per-user configurations under a cap that deletes give back,
partial updates that bump the version, and reads of many at once."""

from __future__ import annotations

import pytest
from adapter_helpers import Backend

from headwater.engine.ports.dashboard import ConfigLimitReached, DashboardConfig

pytestmark = pytest.mark.adapters

T0 = 1_700_000_000_000


def cfg(user: str, cid: str, at: int = T0, tickers: tuple[str, ...] = ("AAPL",)) -> DashboardConfig:
    return DashboardConfig(user, cid, f"name {cid}", tickers, at, at)


def test_create_list_and_get_per_user(backend: Backend) -> None:
    store = backend.dashboards
    store.create(cfg("u1", "b", T0 + 1), 10)
    store.create(cfg("u1", "a", T0 + 2, ("MSFT", "GOOG")), 10)
    store.create(cfg("u2", "c"), 10)
    assert [c.config_id for c in store.list("u1")] == ["b", "a"]  # oldest first
    assert store.get("u1", "a") == cfg("u1", "a", T0 + 2, ("MSFT", "GOOG"))
    assert store.get("u2", "a") is None  # another user's id is not yours
    assert store.list("nobody") == []
    got = store.get_many([("u1", "a"), ("u2", "c"), ("u2", "a"), ("u3", "x")])
    assert set(got) == {("u1", "a"), ("u2", "c")}
    assert got[("u2", "c")] == cfg("u2", "c")


def test_the_cap_holds_and_a_delete_gives_a_place_back(backend: Backend) -> None:
    store = backend.dashboards
    store.create(cfg("u", "1"), 2)
    store.create(cfg("u", "2"), 2)
    with pytest.raises(ConfigLimitReached):
        store.create(cfg("u", "3"), 2)
    assert [c.config_id for c in store.list("u")] == ["1", "2"]  # the refused one left nothing
    store.create(cfg("other", "1"), 2)  # the cap is per user
    assert store.delete("u", "1")
    assert not store.delete("u", "1")
    assert not store.delete("u", "never")
    store.create(cfg("u", "3"), 2)
    assert {c.config_id for c in store.list("u")} == {"2", "3"}


def test_updates_set_the_given_fields_and_bump_the_version(backend: Backend) -> None:
    store = backend.dashboards
    store.create(cfg("u", "a", tickers=("A", "B")), 10)
    named = store.update("u", "a", "renamed", None, T0 + 5)
    assert named is not None
    assert (named.name, named.tickers, named.updated_ms, named.version) == (
        "renamed",
        ("A", "B"),
        T0 + 5,
        2,
    )
    ticked = store.update("u", "a", None, ("C",), T0 + 9)
    assert ticked is not None
    assert (ticked.name, ticked.tickers, ticked.created_ms, ticked.version) == (
        "renamed",
        ("C",),
        T0,
        3,
    )
    assert store.get("u", "a") == ticked
    assert store.update("u", "missing", "x", None, T0) is None
    assert store.get("u", "missing") is None  # an update creates nothing
