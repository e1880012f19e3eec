"""The dashboard surface's state in one process: the feed, the configuration store, the
per-instance stream cap, local configuration-change wake-ups and shutdown."""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from headwater.dashboard.feed import DashboardFeed
from headwater.dashboard.items import canonical_ticker, iso_ms
from headwater.engine import LogEngine
from headwater.engine.ports.dashboard import (
    ConfigLimitReached,
    DashboardConfig,
    DashboardConfigStore,
)
from headwater.errors import HeadwaterError
from headwater.jsoncodec import is_scalar_text
from headwater.settings import DashboardSettings

log = logging.getLogger(__name__)

MAX_TICKERS = 5
MAX_NAME_CHARS = 100
MAX_USER_ID_CHARS = 128


class DashboardError(HeadwaterError):
    """An /api/v2 error: answered `{"detail": message, **extra}`."""

    def __init__(
        self,
        status: int,
        message: str,
        extra: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(
            message, status=status, code="dashboard", detail=extra or {}, headers=headers
        )


def missing_user() -> DashboardError:
    return DashboardError(401, "Missing user identification")


def config_not_found() -> DashboardError:
    return DashboardError(404, "Configuration not found")


def check_user_id(raw: str | None) -> str:
    user = (raw or "").strip()
    if not user:
        raise missing_user()
    if len(user) > MAX_USER_ID_CHARS or not user.isprintable():
        raise DashboardError(401, "Invalid user identification")
    return user


def _invalid(field: str, message: str) -> DashboardError:
    return DashboardError(400, message, {"errors": [{"field": field, "message": message}]})


def parse_config_body(body: object, *, partial: bool) -> tuple[str | None, tuple[str, ...] | None]:
    """`{name, tickers}` (both required on create; PUT may give either). Tickers are
    canonical upper case, duplicates dropped, at most five."""
    if not isinstance(body, dict):
        raise _invalid("", "the body must be a JSON object {name, tickers}")
    unknown = sorted(set(body) - {"name", "tickers"})
    if unknown:
        raise _invalid(unknown[0], f"unknown field {unknown[0]!r} (allowed: name, tickers)")
    name: str | None = None
    tickers: tuple[str, ...] | None = None
    if "name" in body or not partial:
        raw = body.get("name")
        if not isinstance(raw, str) or not raw.strip():
            raise _invalid("name", "name must be a non-empty string")
        if not is_scalar_text(raw):  # a JSON "\ud800" escape: no store can hold it
            raise _invalid("name", "name must be valid Unicode text (no lone surrogates)")
        name = raw.strip()
        if len(name) > MAX_NAME_CHARS:
            raise _invalid("name", f"name must be at most {MAX_NAME_CHARS} characters")
    if "tickers" in body or not partial:
        raw_list = body.get("tickers")
        if not isinstance(raw_list, list):
            raise _invalid("tickers", "tickers must be a list of ticker symbols")
        seen: list[str] = []
        for i, t in enumerate(raw_list):
            ticker = canonical_ticker(t)
            if ticker is None:
                raise _invalid(
                    f"tickers[{i}]",
                    "a ticker must be 1-16 letters, digits, '.', '-' or '_' (e.g. AAPL)",
                )
            if ticker not in seen:
                seen.append(ticker)
        if len(seen) > MAX_TICKERS:
            raise _invalid("tickers", f"a configuration holds at most {MAX_TICKERS} tickers")
        tickers = tuple(seen)
    if partial and name is None and tickers is None:
        raise _invalid("", "give name and/or tickers")
    return name, tickers


def config_json(cfg: DashboardConfig) -> dict[str, Any]:
    return {
        "config_id": cfg.config_id,
        "name": cfg.name,
        "tickers": list(cfg.tickers),
        "created_at": iso_ms(cfg.created_ms),
        "updated_at": iso_ms(cfg.updated_ms),
    }


class ConnectionCount:
    """The per-instance cap on open /api/v2 streams."""

    def __init__(self, maximum: int) -> None:
        self.maximum = maximum
        self.count = 0
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            if self.count >= self.maximum:
                return False
            self.count += 1
            return True

    def give_back(self) -> None:
        with self._lock:
            self.count = max(0, self.count - 1)


@dataclass(slots=True, eq=False)
class ConfigWatch:
    """A stream's interest in one configuration. `dirty`: this process changed it (the
    stream re-reads it at once); `polled`: what the shared poller last read (None: nothing
    new), `gone`: the poller found it deleted."""

    wake: asyncio.Event
    version: int
    dirty: bool = False
    polled: DashboardConfig | None = None
    gone: bool = False


class DashboardService:
    def __init__(
        self,
        engine: LogEngine,
        settings: DashboardSettings,
        configs: DashboardConfigStore,
        clock: Callable[[], int],
        uptime_ms: Callable[[], int],
    ) -> None:
        self.engine = engine
        self.settings = settings
        self.configs = configs
        self.clock = clock
        self.uptime_ms = uptime_ms
        self.feed = DashboardFeed(engine, settings, clock)
        self.connections = ConnectionCount(settings.max_connections)
        self.shutdown = asyncio.Event()
        self._config_watches: dict[tuple[str, str], set[ConfigWatch]] = {}
        self._poller: asyncio.Task[None] | None = None

    def begin_shutdown(self) -> None:
        self.shutdown.set()
        self.feed.wake_all()
        for watches in self._config_watches.values():
            for w in watches:
                w.wake.set()

    def uptime_seconds(self) -> int:
        return self.uptime_ms() // 1000

    def status(self) -> dict[str, int]:
        n, cap = self.connections.count, self.connections.maximum
        return {
            "connections": n,
            "max_connections": cap,
            "available": max(0, cap - n),
            "uptime_seconds": self.uptime_seconds(),
        }

    # --- configuration change wake-ups (this process) -------------------------------------
    def watch_config(self, user_id: str, config_id: str, watch: ConfigWatch) -> None:
        self._config_watches.setdefault((user_id, config_id), set()).add(watch)
        if self._poller is None or self._poller.done():
            self._poller = asyncio.get_running_loop().create_task(self._poll_configs())

    def unwatch_config(self, user_id: str, config_id: str, watch: ConfigWatch) -> None:
        watches = self._config_watches.get((user_id, config_id))
        if watches is not None:
            watches.discard(watch)
            if not watches:
                del self._config_watches[(user_id, config_id)]
        if not self._config_watches and self._poller is not None:
            self._poller.cancel()
            self._poller = None

    async def _poll_configs(self) -> None:
        """One loop per process: every `config_poll_ms`, the configurations open streams
        follow are read together (BatchGetItem, 100 per call) and the streams whose
        configuration changed or was deleted are woken; edits made through other processes
        reach streams this way."""
        while self._config_watches:
            await asyncio.sleep(self.settings.config_poll_ms / 1000)
            keys = list(self._config_watches)
            try:
                found = await self.engine.run_io(self.configs.get_many, keys)
            except Exception:  # storage trouble: streams keep their tickers; try again
                log.warning("configuration poll failed", exc_info=True)
                continue
            for key in keys:
                cfg = found.get(key)
                for w in self._config_watches.get(key, ()):
                    if cfg is None:
                        w.gone = True
                    elif cfg.version != w.version:
                        w.polled = cfg
                    else:
                        continue
                    w.wake.set()

    def _changed(self, user_id: str, config_id: str) -> None:
        for w in self._config_watches.get((user_id, config_id), ()):
            w.dirty = True
            w.wake.set()

    # --- configurations ------------------------------------------------------------------
    async def create_config(
        self, user_id: str, name: str, tickers: tuple[str, ...]
    ) -> DashboardConfig:
        now = self.clock()
        cfg = DashboardConfig(user_id, str(uuid.uuid4()), name, tickers, now, now)
        try:
            await self.engine.run_io(self.configs.create, cfg, self.settings.max_configs_per_user)
        except ConfigLimitReached:
            limit = self.settings.max_configs_per_user
            raise DashboardError(
                409,
                f"Configuration limit reached ({limit} per user)",
                {"max_configurations": limit},
            ) from None
        return cfg

    async def list_configs(self, user_id: str) -> list[DashboardConfig]:
        return await self.engine.run_io(self.configs.list, user_id)

    async def get_config(self, user_id: str, config_id: str) -> DashboardConfig:
        cfg = await self.engine.run_io(self.configs.get, user_id, config_id)
        if cfg is None:
            raise config_not_found()
        return cfg

    async def update_config(
        self, user_id: str, config_id: str, name: str | None, tickers: tuple[str, ...] | None
    ) -> DashboardConfig:
        new = await self.engine.run_io(
            self.configs.update, user_id, config_id, name, tickers, self.clock()
        )
        if new is None:
            raise config_not_found()
        self._changed(user_id, config_id)
        return new

    async def delete_config(self, user_id: str, config_id: str) -> None:
        if not await self.engine.run_io(self.configs.delete, user_id, config_id):
            raise config_not_found()
        self._changed(user_id, config_id)
