"""In-memory DashboardConfigStore: saved dashboard configurations of a MemoryAccount, per
user, with the per-user count a create is checked against, answering as
storage/dashboard_configs.py does (ConfigLimitReached at the cap, None / False for a
configuration that does not exist, `version` bumped by every update)."""

from __future__ import annotations

import dataclasses

from headwater.engine.ports.dashboard import ConfigLimitReached, DashboardConfig
from headwater.errors import StorageUnavailable
from tests.fakes.storage import MemoryAccount


class MemoryConfigStore:
    def __init__(self, account: MemoryAccount) -> None:
        self._a = account

    def _of(self, user_id: str) -> dict[str, DashboardConfig]:
        return self._a.dashboards.setdefault(user_id, {})

    def create(self, cfg: DashboardConfig, max_per_user: int) -> None:
        with self._a.lock:
            mine = self._of(cfg.user_id)
            if len(mine) >= max_per_user:
                raise ConfigLimitReached
            if cfg.config_id in mine:
                raise StorageUnavailable("configuration id collided; retry")
            mine[cfg.config_id] = cfg

    def get(self, user_id: str, config_id: str) -> DashboardConfig | None:
        with self._a.lock:
            return self._a.dashboards.get(user_id, {}).get(config_id)

    def get_many(self, keys: list[tuple[str, str]]) -> dict[tuple[str, str], DashboardConfig]:
        with self._a.lock:
            out = {}
            for user_id, config_id in keys:
                cfg = self._a.dashboards.get(user_id, {}).get(config_id)
                if cfg is not None:
                    out[(user_id, config_id)] = cfg
            return out

    def list(self, user_id: str) -> list[DashboardConfig]:
        with self._a.lock:
            mine = list(self._a.dashboards.get(user_id, {}).values())
        return sorted(mine, key=lambda c: (c.created_ms, c.config_id))

    def update(
        self,
        user_id: str,
        config_id: str,
        name: str | None,
        tickers: tuple[str, ...] | None,
        now_ms: int,
    ) -> DashboardConfig | None:
        with self._a.lock:
            old = self._a.dashboards.get(user_id, {}).get(config_id)
            if old is None:
                return None
            new = dataclasses.replace(
                old,
                name=old.name if name is None else name,
                tickers=old.tickers if tickers is None else tickers,
                updated_ms=now_ms,
                version=old.version + 1,
            )
            self._a.dashboards[user_id][config_id] = new
            return new

    def delete(self, user_id: str, config_id: str) -> bool:
        with self._a.lock:
            return self._a.dashboards.get(user_id, {}).pop(config_id, None) is not None
