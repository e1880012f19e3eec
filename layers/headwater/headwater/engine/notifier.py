"""In-process wake-ups: an append resolves every waiter on its topic at once."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio


class Notifier:
    def __init__(self) -> None:
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}

    def notify(self, topic: str) -> None:
        waiters = self._waiters.pop(topic, None)
        if not waiters:
            return
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def wait(self, topic: str, timeout_s: float) -> bool:
        """True if woken by an append, False on timeout."""
        import asyncio  # not at the top: see engine/__init__.py

        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(topic, set()).add(fut)
        try:
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation
            # that lands as the timeout fires, leaving a cancelled stream running.
            async with asyncio.timeout(timeout_s):
                await fut
            return True
        except TimeoutError:
            return False
        finally:
            ws = self._waiters.get(topic)
            if ws is not None:
                ws.discard(fut)
                if not ws:
                    self._waiters.pop(topic, None)
