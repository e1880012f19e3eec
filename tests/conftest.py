"""Shared fixtures. Fake credentials and a region are set before any client exists; clients
are created after the mock starts; nothing here talks to a real AWS account."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from headwater.dev import moto_patches
from headwater.dev.emulator import ENDPOINT_VARS, FAKE_CREDENTIALS
from tests import tiers

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


_TESTS_DIR = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test's tier marker from its folder (tests/tiers.py); a test outside the tier
    folders, or marked with another folder's tier, fails collection."""
    problems = []
    for item in items:
        path = Path(str(item.path)).resolve()
        why = tiers.problem(item.nodeid, path, _TESTS_DIR, (m.name for m in item.iter_markers()))
        if why is not None:
            problems.append(why)
            continue
        tier = tiers.tier_of(path, _TESTS_DIR)
        assert tier is not None
        item.add_marker(getattr(pytest.mark, tier))
    if problems:
        raise pytest.UsageError("tests outside their tier:\n  " + "\n  ".join(problems))
