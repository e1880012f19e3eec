"""Watch cursors (spec §7.3): the composite-cursor codec and the resume order — session
cursors, rewound (never advanced) by Last-Event-ID, else the initial positions."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headwater.engine.ports import WatchSessionItem
from headwater.engine.watch import WatchEngine
from headwater.engine.watch_values import (
    TopicWatch,
    WatchSpec,
    decode_cursor_map,
    encode_cursor_map,
)
from headwater.errors import InvalidRequest

pytestmark = pytest.mark.unit

SPEC = WatchSpec(
    topics=(TopicWatch("a", 10, 1), TopicWatch("b", 0, 1), TopicWatch("c", 5, 2)),
    node="n",
    limit=7,
    include_data=False,
)


def _item(cursors: dict[str, object] | None) -> WatchSessionItem:
    return WatchSessionItem(
        wid="wid_x",
        key_id="k",
        scopes=frozenset({"read"}),
        auth=False,
        spec=SPEC.to_json(),
        cursors=None if cursors is None else json.dumps(cursors),
        last_access_ms=0,
        ttl_ms=1000,
    )


@given(st.dictionaries(st.text(min_size=1, max_size=20), st.integers(0, 2**64 - 1)))
def test_cursor_map_round_trips_without_padding(m: dict[str, int]) -> None:
    token = encode_cursor_map(m)
    assert "=" not in token and "+" not in token and "/" not in token
    assert decode_cursor_map(token) == m


def test_spec_example_id_decodes() -> None:
    assert decode_cursor_map("eyJqb2JzIjo1MjEwLCJldmVudHMiOjg4MTMwfQ") == {
        "jobs": 5210,
        "events": 88130,
    }
    assert json.loads(base64.urlsafe_b64decode(encode_cursor_map({"jobs": 1}) + "==")) == {
        "jobs": 1
    }


@pytest.mark.parametrize("bad", ["%%%", "bm90IGpzb24", "WzFd", "eyJhIjotMX0", "eyJhIjp0cnVlfQ"])
def test_malformed_cursor_is_400(bad: str) -> None:
    # not base64, not JSON, a list, a negative seq, a boolean seq
    with pytest.raises(InvalidRequest):
        decode_cursor_map(bad)


def test_spec_round_trips() -> None:
    assert WatchSpec.from_json(SPEC.to_json()) == SPEC


def test_initial_positions_when_nothing_else() -> None:
    opened = WatchEngine.resolve(_item(None), None)
    assert opened.start == {"a": 10, "b": 0, "c": 5}
    assert opened.spec == SPEC and opened.deleted == frozenset()


def test_session_cursors_are_authoritative() -> None:
    opened = WatchEngine.resolve(_item({"c": {"a": 40, "b": 3, "zzz": 9}, "d": []}), None)
    assert opened.start == {"a": 40, "b": 3, "c": 5}  # unknown names ignored


def test_last_event_id_only_rewinds() -> None:
    item = _item({"c": {"a": 40, "b": 3, "c": 5}, "d": []})
    lei = encode_cursor_map({"a": 35, "b": 9, "zzz": 1})
    opened = WatchEngine.resolve(item, lei)
    assert opened.start == {"a": 35, "b": 3, "c": 5}
    # with no session cursors yet it rewinds the initial positions the same way
    assert WatchEngine.resolve(_item(None), lei).start == {"a": 10, "b": 0, "c": 5}
    assert WatchEngine.resolve(_item(None), encode_cursor_map({"a": 2})).start["a"] == 2


def test_deleted_topics_stay_out() -> None:
    opened = WatchEngine.resolve(
        _item({"c": {"a": 40, "b": 3, "c": 5}, "d": ["b"]}), encode_cursor_map({"b": 1})
    )
    assert opened.start == {"a": 40, "c": 5}
    assert opened.deleted == frozenset({"b"})


@pytest.mark.timeout(30)  # the spin starved the event loop: the test never woke to assert
def test_a_slow_cursor_save_does_not_spin_the_stream() -> None:
    """A watch stream saves its cursors on the engine's pool and learns the outcome at a
    later checkpoint. While a save is slow (the storage pool backed up), the stream must
    wait for it, not loop: it used to compute a checkpoint deadline already past and spin
    on the event loop until the save ended, and 500 such streams starved the server
    (issue 42's soak: a core busy, appends from ~2,000 a minute to 20)."""
    import asyncio
    import contextlib
    import threading

    from headwater.engine import watch as watch_mod
    from tests.fakes.processes import ManualClock, processes, rec, req

    released = threading.Event()

    async def scenario() -> int:
        async with processes(1, ManualClock()) as (p,):
            await p.engine.append("a", req(rec(x=1)))
            sessions = p.stores.sessions
            real_save = sessions.save_cursors

            def slow_save(*args: object, **kwargs: object) -> bool:
                released.wait(5)  # the pool is slow: this save takes a while
                return real_save(*args, **kwargs)  # type: ignore[arg-type]

            sessions.save_cursors = slow_save  # type: ignore[method-assign]
            spec = WatchSpec(topics=(TopicWatch("a", 0, 1),))
            item = WatchSessionItem(
                wid="wid_slow", key_id="k", scopes=frozenset({"read"}), auth=False,
                spec=spec.to_json(), cursors=None, last_access_ms=0, ttl_ms=300,
            )  # fmt: skip
            sessions.put(item)
            engine = WatchEngine(p.engine, sessions, 300)  # cursors touched every 0.1 s
            calls = 0
            real_checkpoint = watch_mod._StreamRun._checkpoint

            async def counted(self: object) -> object:
                nonlocal calls
                calls += 1
                return await real_checkpoint(self)  # type: ignore[arg-type]

            watch_mod._StreamRun._checkpoint = counted  # type: ignore[method-assign]
            try:
                events = engine.stream(WatchEngine.resolve(item, None))

                async def consume() -> None:
                    async for _ in events:
                        pass

                task = asyncio.create_task(consume())
                await asyncio.sleep(0.6)  # a save starts at 0.1 s and hangs
                seen = calls
                released.set()
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                return seen
            finally:
                watch_mod._StreamRun._checkpoint = real_checkpoint  # type: ignore[method-assign]
                released.set()

    checkpoints = asyncio.run(scenario())
    # a handful of wake-ups (the read, the poll backstop), not a busy loop
    assert checkpoints < 50, checkpoints
