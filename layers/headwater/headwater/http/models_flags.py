"""/api/v1 feature-flag bodies (spec flag-closure-events; docs/flags.md), for /openapi.json
(documentation only: `headwater.flags` parses the publish bodies and the queries)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from headwater.http.models_common import absent


class ManifestFiles(BaseModel):
    """A publish body as JSON: exactly `{"files": {"<path>": "<text>", ...}}` (the other form
    is a tar.gz of the tree, Content-Type application/gzip)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "files": {
                        "namespace.toml": 'name = "billing"\n',
                        "flags/new-checkout.toml": "enabled = true\n",
                    }
                }
            ]
        },
    )

    files: dict[str, str] = Field(description="path -> file text (UTF-8)")


class Published(BaseModel):
    """201: a new version; 200: the tree is identical to the current version's."""

    version: int
    prev_version: int | None
    closure_hash: str


class Manifest(BaseModel):
    version: int
    files: dict[str, str]


class ManifestVersion(BaseModel):
    version: int
    created_at: str = Field(description="RFC 3339 UTC with milliseconds")
    closure_hash: str


class ManifestVersions(BaseModel):
    versions: list[ManifestVersion]


class FlagErrorBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    code: str = Field(description="e.g. invalid_request, forbidden, lint_failed")
    message: str
    details: dict[str, Any] | list[dict[str, Any]] = absent(
        "An object (`reason`, ...) or, for lint_failed, every finding"
    )


class FlagError(BaseModel):
    """Every flag-surface error: `{"error": {code, message, details?}}` (414 has no body)."""

    model_config = ConfigDict(extra="forbid")

    error: FlagErrorBody


MODELS: tuple[type[BaseModel], ...] = (
    ManifestFiles,
    Published,
    Manifest,
    ManifestVersions,
    FlagError,
)
