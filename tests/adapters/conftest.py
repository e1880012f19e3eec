"""Adapter contract fixtures: every test runs against each backend in BACKENDS.

- memory: the in-memory fakes of the ports (tests/fakes), which the engine's fast unit tests
  run on: they must keep the same contract.
- moto: in-process `mock_aws` (what the unit and api tiers use).
- ddblocal: the official DynamoDB Local jar (real item-size, expression and transaction
  rules) for DynamoDB, with S3 from a moto server subprocess (DynamoDB Local has no S3).
- motoserver: a moto server subprocess for both (the `make run` / e2e setup).

The servers start once per session and only if a selected test needs them; each test gets
its own resource prefix, so its tables and bucket are fresh."""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest
from adapter_helpers import Backend
from botocore.config import Config
from moto import mock_aws  # imported before any Session exists: it hooks botocore's handlers

from headwater.dev.ddblocal import DynamoDBLocal
from headwater.dev.emulator import FAKE_CREDENTIALS, MotoServer
from headwater.settings import Settings
from headwater.storage.bootstrap import ensure_resources
from headwater.storage.clients import AwsClients

AWS_BACKENDS = [
    pytest.param("moto", id="moto"),
    pytest.param("ddblocal", id="ddblocal", marks=pytest.mark.ddblocal),
    pytest.param("motoserver", id="motoserver"),
]
BACKENDS = [pytest.param("memory", id="memory"), *AWS_BACKENDS]

_CLIENT_CONFIG = Config(
    retries={"max_attempts": 3, "mode": "standard"},
    s3={"addressing_style": "path"},
    connect_timeout=5,
    read_timeout=60,
)


@pytest.fixture(scope="session")
def boto_session() -> boto3.Session:
    # One session for all tests: it caches the service models (a new one per client costs
    # ~0.2 s). Clients are still created per test, after the mock starts.
    return boto3.Session(
        region_name=FAKE_CREDENTIALS["AWS_REGION"],
        aws_access_key_id=FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    )


@pytest.fixture(scope="session")
def ddblocal_server() -> Iterator[DynamoDBLocal]:
    with DynamoDBLocal() as server:
        yield server


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    with MotoServer() as server:
        yield server


def _client(session: boto3.Session, service: str, url: str) -> object:
    return session.client(service, endpoint_url=url, config=_CLIENT_CONFIG)


def _backend(
    request: pytest.FixtureRequest, resource_prefix: str, boto_session: boto3.Session
) -> Iterator[Backend]:
    name: str = request.param
    settings = Settings(resource_prefix=resource_prefix)
    if name == "memory":
        yield Backend.memory(settings)
        return
    if name == "moto":
        with mock_aws():
            clients = AwsClients.create(settings, session=boto_session)
            ensure_resources(settings, clients, ttl=False)  # T0 is in 2023: see its docstring
            yield Backend.build(name, settings, clients)
        return
    moto_srv: MotoServer = request.getfixturevalue("moto_server")
    if name == "ddblocal":
        ddb: DynamoDBLocal = request.getfixturevalue("ddblocal_server")
        ddb_url = ddb.url
    else:
        ddb_url = moto_srv.url
    clients = AwsClients(
        dynamodb=_client(boto_session, "dynamodb", ddb_url),
        s3=_client(boto_session, "s3", moto_srv.url),
    )
    ensure_resources(settings, clients, ttl=False)  # T0 is in 2023: see its docstring
    yield Backend.build(name, settings, clients)


@pytest.fixture(params=BACKENDS)
def backend(
    request: pytest.FixtureRequest,
    aws_env: None,
    resource_prefix: str,
    boto_session: boto3.Session,
) -> Iterator[Backend]:
    yield from _backend(request, resource_prefix, boto_session)


@pytest.fixture(params=AWS_BACKENDS)
def aws_backend(
    request: pytest.FixtureRequest,
    aws_env: None,
    resource_prefix: str,
    boto_session: boto3.Session,
) -> Iterator[Backend]:
    """The DynamoDB/S3 backends only: for tests of how the adapters lay items out in
    DynamoDB (TTL attributes, item encodings) or of S3's own errors, which the fakes do not
    have (they keep values, not wire items)."""
    yield from _backend(request, resource_prefix, boto_session)
