"""Saved dashboard config ports (dashboard/; storage/dashboard_configs.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class DashboardConfig:
    user_id: str
    config_id: str
    name: str
    tickers: tuple[str, ...]
    created_ms: int
    updated_ms: int
    version: int = 1


class ConfigLimitReached(Exception):
    pass


class DashboardConfigStore(Protocol):
    """Saved dashboard configs per user (storage/dashboard_configs.py)."""

    def create(self, cfg: DashboardConfig, max_per_user: int) -> None: ...
    def get(self, user_id: str, config_id: str) -> DashboardConfig | None: ...
    def get_many(self, keys: list[tuple[str, str]]) -> dict[tuple[str, str], DashboardConfig]: ...
    def list(self, user_id: str) -> list[DashboardConfig]: ...
    def update(
        self,
        user_id: str,
        config_id: str,
        name: str | None,
        tickers: tuple[str, ...] | None,
        now_ms: int,
    ) -> DashboardConfig | None: ...
    def delete(self, user_id: str, config_id: str) -> bool: ...
