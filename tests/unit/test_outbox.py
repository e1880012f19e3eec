"""The send buffer of an SSE stream or WebSocket (http/sse.py Outbox): what a client that
stops reading can make the server hold (issue 42: a stalled /v0 watch held ~1.5 MB, three
events of up to max_batch_bytes each, against a 64 KiB budget)."""

from __future__ import annotations

import asyncio

import pytest

from headwater.http.sse import Outbox

pytestmark = pytest.mark.unit


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_the_box_never_holds_more_than_its_budget() -> None:
    async def scenario() -> None:
        box: Outbox[bytes] = Outbox(8, 1000)
        held: list[int] = []

        async def produce() -> None:
            for size in [300, 300, 300, 300, 700, 50, 1500, 10]:
                await box.put(b"x" * size, size)
                held.append(box.bytes)

        task = asyncio.create_task(produce())
        await _settle()
        # three fit; the fourth (1,200 in all) waits
        assert box.bytes == 900 and len(held) == 3
        seen = []
        while len(seen) < 8:
            seen.append(len(await box.get()))
            await _settle()
            assert box.bytes <= 1000 or len(box.items) == 1, box.bytes
        await task
        assert seen == [300, 300, 300, 300, 700, 50, 1500, 10]
        # the 1,500-byte item went into an empty box alone
        assert 1500 in held and max(h for h in held if h != 1500) <= 1000

    asyncio.run(scenario())


def test_room_waits_until_the_box_is_half_empty() -> None:
    async def scenario() -> None:
        box: Outbox[bytes] = Outbox(8, 1000)
        await box.put(b"a" * 400, 400)
        await box.room()  # 400 <= 500: room at once
        await box.put(b"b" * 400, 400)
        waiter = asyncio.create_task(box.room())
        await _settle()
        assert not waiter.done()  # 800 > 500
        box.get_nowait()
        await _settle()
        assert waiter.done()  # 400 again

    asyncio.run(scenario())


def test_the_process_total_follows_every_box() -> None:
    async def scenario() -> None:
        base = Outbox.total_bytes()
        a: Outbox[bytes] = Outbox(8, 1000)
        b: Outbox[bytes] = Outbox(8, 1000)
        await a.put(b"x" * 100, 100)
        await b.put(b"y" * 250, 250)
        assert Outbox.total_bytes() - base == 350
        a.get_nowait()
        assert Outbox.total_bytes() - base == 250
        del b  # a stream that ends with frames queued gives them back
        assert Outbox.total_bytes() - base == 0

    asyncio.run(scenario())
