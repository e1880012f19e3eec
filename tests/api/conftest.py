"""API-tier fixtures. One in-process moto mock per test module and one set of boto3 clients
(building clients is the slow part); every test still gets its own tables and bucket under a
fresh resource prefix, so tests never see each other's topics."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest
from api_helpers import MakeClient
from starlette.testclient import TestClient

from headwater.dev.emulator import ENDPOINT_VARS
from headwater.http.app import create_app
from headwater.settings import ENV_API_KEYS_PARAMETER, Settings, Tiering
from headwater.storage.bootstrap import ensure_resources
from headwater.storage.clients import AwsClients


@pytest.fixture(scope="module")
def aws() -> Iterator[AwsClients]:
    from moto import mock_aws

    # In-process moto intercepts AWS's own endpoints only: an emulator endpoint left in the
    # environment by another module on this worker would send these clients elsewhere.
    for var in ENDPOINT_VARS:
        os.environ.pop(var, None)
    with mock_aws():
        yield AwsClients.create(Settings())


@pytest.fixture
def settings(aws: AwsClients, resource_prefix: str, monkeypatch: pytest.MonkeyPatch) -> Settings:
    # Keys come from the Settings under test only, never from an SSM/Secrets parameter.
    monkeypatch.delenv(ENV_API_KEYS_PARAMETER, raising=False)
    # In-process moto serves one thread at a time: upkeep runs only when a test calls it
    # (the e2e tier runs it in the background against the serialized emulator).
    s = Settings(resource_prefix=resource_prefix, tiering=Tiering(inline=False, interval_ms=0))
    ensure_resources(s, aws)
    return s


@pytest.fixture
def client(settings: Settings, aws: AwsClients) -> Iterator[TestClient]:
    with TestClient(create_app(settings, aws)) as c:
        yield c


@pytest.fixture
def make_client(settings: Settings, aws: AwsClients) -> Iterator[MakeClient]:
    """More apps over the same tables with some settings overridden (limits, api keys, probe
    auth), e.g. make_client(limits=Limits(max_body_bytes=1000))."""
    with ExitStack() as stack:

        def make(**overrides: Any) -> TestClient:
            app = create_app(dataclasses.replace(settings, **overrides), aws)
            return stack.enter_context(TestClient(app))

        yield make
