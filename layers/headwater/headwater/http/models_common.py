"""What the documentation models of every surface share (models_v0, models_v1,
models_notify, models_flags, models_dashboard, models_probes): documentation only, imported by
api_docs when /openapi.json is first built."""

from __future__ import annotations

from typing import Any

from pydantic import Field


def no_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


def absent(description: str, alias: str | None = None) -> Any:
    """A response field that is left out (never null) when it does not apply: not required,
    and no `default: null` in its schema."""
    return Field(default=None, alias=alias, description=description, json_schema_extra=no_default)
