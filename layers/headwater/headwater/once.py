"""Parts of a container built on first use: once, whichever thread asks first."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar, cast

T = TypeVar("T")


class BuiltOnce:
    """Named values, each built by the first `get` that asks for it. Reentrant: a build may
    get another part (the router engine gets the router store)."""

    __slots__ = ("_built", "_lock")

    def __init__(self) -> None:
        self._built: dict[str, object] = {}
        self._lock = threading.RLock()

    def get(self, name: str, build: Callable[[], T]) -> T:
        got = self._built.get(name)
        if got is None:
            with self._lock:
                got = self._built.get(name)
                if got is None:
                    got = self._built[name] = build()
        return cast(T, got)

    def __contains__(self, name: str) -> bool:
        return name in self._built
