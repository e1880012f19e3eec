"""Shared fixtures. Fake credentials and a region are set before any client exists; clients
are created after the mock starts; nothing here talks to a real AWS account."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from headwater.dev import moto_patches
from headwater.dev.emulator import ENDPOINT_VARS, FAKE_CREDENTIALS

# Before anything imports boto3-based code: never reach a real account from tests.
for _var in ENDPOINT_VARS:
    os.environ.pop(_var, None)
os.environ.update(FAKE_CREDENTIALS)
# Every tier's in-process moto gets DynamoDB's semantics (atomic requests, transactions,
# ClientRequestToken), whichever test happens to start it first.
moto_patches.apply()


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ENDPOINT_VARS:
        monkeypatch.delenv(var, raising=False)
    for k, v in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(k, v)


@pytest.fixture
def resource_prefix() -> str:
    return f"hw-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def moto(aws_env: None) -> Iterator[None]:
    from moto import mock_aws

    from headwater.dev import moto_patches

    moto_patches.apply()
    with mock_aws():
        yield
