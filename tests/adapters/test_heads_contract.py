"""HeadStore contract (DynamoHeadStore), run against every backend in conftest.BACKENDS."""

from __future__ import annotations

import dataclasses

import pytest
from adapter_helpers import T0, Backend, new_head

pytestmark = pytest.mark.adapters


def _live(b: Backend, topic: str) -> None:
    assert b.heads.create(new_head(topic), replacing=None)


def test_get_missing_is_none(backend: Backend) -> None:
    assert backend.heads.get("nope") is None
    assert backend.heads.get("nope", consistent=False) is None


def test_create_round_trips_every_field(backend: Backend) -> None:
    # GIVEN a head with every optional field unset, and one with every field set
    bare = new_head("t/bare")
    full = dataclasses.replace(
        new_head("t/ünï 😀", epoch=7),
        head_seq=42,
        earliest_seq=5,
        evict_floor=3,
        count=38,
        bytes=1234,
        config={"retention": {"max_age_s": 60}, "list": [1, "é", None], "flag": True},
        last_write_ts=T0 + 5,
        last_read_ts=T0 + 9,
        del_ver=4,
        tag_pending={10: 7, 42: 11},
    )
    # WHEN both are created
    assert backend.heads.create(bare, replacing=None)
    assert backend.heads.create(full, replacing=None)
    # THEN they read back identically (None stays None, maps keep int keys)
    got_bare = backend.heads.get("t/bare")
    assert got_bare == bare
    assert got_bare is not None and got_bare.last_write_ts is None
    assert got_bare.last_read_ts is None and got_bare.tag_pending == {}
    assert backend.heads.get("t/ünï 😀") == full
    assert backend.heads.get("t/ünï 😀", consistent=False) == full


def test_create_twice_second_is_refused(backend: Backend) -> None:
    assert backend.heads.create(new_head("t", config={"v": 1}), replacing=None)
    assert not backend.heads.create(new_head("t", config={"v": 2}), replacing=None)
    got = backend.heads.get("t")
    assert got is not None and got.config == {"v": 1}


def test_create_replacing_needs_a_deleted_marker_with_matching_epoch(backend: Backend) -> None:
    h = new_head("t")
    assert backend.heads.create(h, replacing=None)
    # a live head is not a marker: cannot be replaced
    assert not backend.heads.create(new_head("t", epoch=2), replacing=h)
    assert backend.heads.mark_deleted(h, if_empty=True)
    marker = backend.heads.get("t")
    assert marker is not None and marker.deleted and marker.epoch == 1
    # wrong epoch on the marker we claim to replace
    stale = dataclasses.replace(marker, epoch=0)
    assert not backend.heads.create(new_head("t", epoch=2), replacing=stale)
    assert backend.heads.get("t") == marker
    # matching epoch: replaced
    assert backend.heads.create(new_head("t", epoch=2), replacing=marker)
    got = backend.heads.get("t")
    assert got is not None and not got.deleted and got.epoch == 2
    # the marker is gone: replacing it again fails
    assert not backend.heads.create(new_head("t", epoch=3), replacing=marker)
    # replacing a marker that never existed fails (and creates nothing)
    assert not backend.heads.create(new_head("u", epoch=2), replacing=marker)
    assert backend.heads.get("u") is None


def test_put_config_is_conditional_on_epoch_and_liveness(backend: Backend) -> None:
    h = new_head("t", config={"a": 1})
    assert backend.heads.create(h, replacing=None)
    assert backend.heads.put_config(h, {"a": 2, "ü": ["x"]})
    got = backend.heads.get("t")
    assert got is not None and got.config == {"a": 2, "ü": ["x"]}
    assert not backend.heads.put_config(dataclasses.replace(h, epoch=2), {"a": 3})
    # a missing topic: refused, and no ghost item is created by the update
    assert not backend.heads.put_config(new_head("ghost"), {"a": 1})
    assert backend.heads.get("ghost") is None
    assert backend.heads.mark_deleted(h, if_empty=False)
    assert not backend.heads.put_config(h, {"a": 4})
    marker = backend.heads.get("t")
    assert marker is not None and marker.deleted


def test_mark_deleted_honours_if_empty_and_epoch(backend: Backend) -> None:
    full = dataclasses.replace(new_head("full", config={"k": "v"}), head_seq=3, count=3, bytes=30)
    empty = dataclasses.replace(new_head("empty"), head_seq=3, count=0, earliest_seq=4)
    assert backend.heads.create(full, replacing=None)
    assert backend.heads.create(empty, replacing=None)
    # if_empty is judged on the stored count
    assert not backend.heads.mark_deleted(full, if_empty=True)
    assert backend.heads.get("full") == full
    assert backend.heads.mark_deleted(empty, if_empty=True)
    # wrong epoch
    assert not backend.heads.mark_deleted(dataclasses.replace(full, epoch=9), if_empty=False)
    # unconditional delete of a non-empty topic
    assert backend.heads.mark_deleted(full, if_empty=False)
    marker = backend.heads.get("full")
    # The marker remembers how far the deleted incarnation got (the recreated tombstone).
    assert marker == dataclasses.replace(
        new_head("full", config={"k": "v"}), created_ms=0, deleted=True, prev_head_seq=3
    )
    # already deleted, or missing: refused
    assert not backend.heads.mark_deleted(full, if_empty=False)
    assert not backend.heads.mark_deleted(new_head("missing"), if_empty=False)
    assert backend.heads.get("missing") is None


def test_list_live_prefix_cursor_limit_and_order(backend: Backend) -> None:
    for name in ["a/3", "b/1", "a/1", "a/2", "a/ü", "ab"]:
        _live(backend, name)
    gone = new_head("a/0")
    assert backend.heads.create(gone, replacing=None)
    assert backend.heads.mark_deleted(gone, if_empty=True)

    def names(prefix: str, after: str | None, limit: int) -> list[str]:
        return [h.topic for h in backend.heads.list_live(prefix, after, limit)]

    assert names("", None, 100) == ["a/1", "a/2", "a/3", "a/ü", "ab", "b/1"]
    assert names("a/", None, 100) == ["a/1", "a/2", "a/3", "a/ü"]
    assert names("a/", None, 2) == ["a/1", "a/2"]
    assert names("a/", "a/1", 100) == ["a/2", "a/3", "a/ü"]
    assert names("a/", "a/2", 1) == ["a/3"]
    assert names("a/", "a/ü", 100) == []
    assert names("", "ab", 100) == ["b/1"]
    # cursors that are not live topics: a deleted marker, a name that never existed
    assert names("a/", "a/0", 100) == ["a/1", "a/2", "a/3", "a/ü"]
    assert names("a/", "a/15", 100) == ["a/2", "a/3", "a/ü"]
    assert names("zzz", None, 10) == []
    assert all(not h.deleted for h in backend.heads.list_live("", None, 100))


def test_count_live_with_and_without_the_internal_logs(backend: Backend) -> None:
    # the surfaces' own logs are named "~ds/…", "~flags/…", "~aviso/…"; /v0 names never "~"
    for name in ["orders", "zz/top", "~ds/orders", "~flags/acme/billing", "~aviso/mars"]:
        _live(backend, name)
    gone = new_head("old")
    assert backend.heads.create(gone, replacing=None)
    assert backend.heads.mark_deleted(gone, if_empty=True)
    assert backend.heads.count_live() == 5
    assert backend.heads.count_live(internal=False) == 2


def test_list_live_cursor_outside_the_prefix(backend: Backend) -> None:
    # Real DynamoDB refuses an ExclusiveStartKey outside the key condition's range.
    for name in ["a/1", "b/1", "b/2", "c/1"]:
        _live(backend, name)

    def names(prefix: str, after: str) -> list[str]:
        return [h.topic for h in backend.heads.list_live(prefix, after, 100)]

    assert names("b/", "a/1") == ["b/1", "b/2"]  # cursor sorts before the prefix
    assert names("b/", "b") == ["b/1", "b/2"]  # cursor is a strict prefix of the prefix
    assert names("b/", "c/1") == []  # cursor sorts after every prefixed name
    assert names("b/", "b/") == ["b/1", "b/2"]


def test_list_live_pages_past_the_query_limit(backend: Backend) -> None:
    for i in range(30):
        _live(backend, f"p/{i:02d}")
    got = backend.heads.list_live("p/", "p/04", 20)
    assert [h.topic for h in got] == [f"p/{i:02d}" for i in range(5, 25)]


def test_touch_read(backend: Backend) -> None:
    h = new_head("t")
    assert backend.heads.create(h, replacing=None)
    backend.heads.touch_read(h, T0 + 100)
    got = backend.heads.get("t")
    assert got is not None and got.last_read_ts == T0 + 100
    assert got == dataclasses.replace(h, last_read_ts=T0 + 100)
    # wrong epoch, deleted or missing topic: a silent no-op that creates nothing
    backend.heads.touch_read(dataclasses.replace(h, epoch=2), T0 + 200)
    backend.heads.touch_read(new_head("ghost"), T0 + 200)
    assert backend.heads.get("ghost") is None
    got = backend.heads.get("t")
    assert got is not None and got.last_read_ts == T0 + 100
    assert backend.heads.mark_deleted(h, if_empty=True)
    backend.heads.touch_read(h, T0 + 300)
    marker = backend.heads.get("t")
    assert marker is not None and marker.deleted and marker.last_read_ts is None


def test_clear_tag_pending(backend: Backend) -> None:
    h = dataclasses.replace(new_head("t"), tag_pending={5: 1, 9: 6})
    assert backend.heads.create(h, replacing=None)
    backend.heads.clear_tag_pending(h, 5)
    got = backend.heads.get("t")
    assert got is not None and got.tag_pending == {9: 6}
    backend.heads.clear_tag_pending(h, 77)  # absent key: no error
    backend.heads.clear_tag_pending(dataclasses.replace(h, epoch=3), 9)  # wrong epoch: no-op
    got = backend.heads.get("t")
    assert got is not None and got.tag_pending == {9: 6}
    backend.heads.clear_tag_pending(h, 9)
    got = backend.heads.get("t")
    assert got is not None and got.tag_pending == {}
    backend.heads.clear_tag_pending(new_head("ghost"), 1)
    assert backend.heads.get("ghost") is None


def test_get_many_returns_present_heads_in_one_call_per_hundred(backend: Backend) -> None:
    # GIVEN live topics, a deleted marker, and names that never existed
    for i in range(105):
        _live(backend, f"m/{i:03d}")
    full = dataclasses.replace(new_head("m/full", config={"k": [1]}), head_seq=9, count=9)
    assert backend.heads.create(full, replacing=None)
    gone = new_head("m/gone")
    assert backend.heads.create(gone, replacing=None)
    assert backend.heads.mark_deleted(gone, if_empty=True)
    names = [f"m/{i:03d}" for i in range(105)] + ["m/full", "m/gone", "nope", "m/full"]
    for consistent in (True, False):
        # WHEN they are read together (duplicates allowed; over 100 names: paged)
        got = backend.heads.get_many(names, consistent=consistent)
        # THEN present topics (deleted markers included) come back keyed by name, each equal
        # to its single read; absent names are left out
        assert set(got) == set(names) - {"nope"}
        assert got["m/full"] == full
        assert got["m/gone"].deleted and got["m/gone"] == backend.heads.get("m/gone")
        assert got["m/042"] == backend.heads.get("m/042")
    assert backend.heads.get_many([]) == {}
