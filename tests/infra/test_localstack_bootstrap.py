"""infra/localstack_bootstrap.py wires localstack-client sessions into ensure_resources;
proven against a moto server standing in for LocalStack's edge port."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from urllib.parse import urlparse

import boto3
import pytest

from headwater.settings import Settings
from headwater.storage.schema import TABLES

pytestmark = pytest.mark.infra

SCRIPT = Path(__file__).resolve().parents[2] / "infra" / "localstack_bootstrap.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("localstack_bootstrap_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_clients_follow_localstack_host(
    fake_aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LOCALSTACK_HOST", raising=False)
    clients = _load().build_clients(Settings(), "emulator.test:4599")
    assert clients.dynamodb.meta.endpoint_url == "http://emulator.test:4599"
    assert clients.s3.meta.endpoint_url == "http://emulator.test:4599"


def test_main_creates_tables_and_bucket(moto_server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN an emulator on loopback, reached through --localstack-host (not AWS_ENDPOINT_URL)
    monkeypatch.setenv("HEADWATER_RESOURCE_PREFIX", "hw-ls")
    monkeypatch.setenv("HEADWATER_BUCKET", "hw-ls-data")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    host = urlparse(moto_server).netloc

    # WHEN the script runs twice (idempotent)
    module = _load()
    assert module.main(["--localstack-host", host]) == 0
    assert module.main(["--localstack-host", host]) == 0

    # THEN every schema table and the bucket exist there
    ddb = boto3.client("dynamodb", endpoint_url=moto_server)
    names = set(ddb.list_tables()["TableNames"])
    assert {f"hw-ls-{t.logical}" for t in TABLES} <= names
    s3 = boto3.client("s3", endpoint_url=moto_server)
    assert "hw-ls-data" in {b["Name"] for b in s3.list_buckets()["Buckets"]}
