from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from headwater.http.app import create_app
from headwater.settings import Settings
from headwater.storage.bootstrap import ensure_resources
from headwater.storage.clients import AwsClients


@pytest.fixture
def settings(moto: None, resource_prefix: str) -> Settings:
    s = Settings(resource_prefix=resource_prefix)
    ensure_resources(s, AwsClients.create(s))
    return s


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as c:
        yield c
