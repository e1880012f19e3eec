"""`make run`'s three ways to reach AWS (headwater/dev/server.py main): the embedded emulator
(default), configured endpoints (LocalStack, DynamoDB Local), and HEADWATER_EMULATOR=off for
AWS itself, where the tables and bucket are a deployed stack's and nothing is created. The
server, the emulator and the bootstrap are replaced by recorders: what is checked is which of
them main() reaches, and with which settings."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from headwater.dev import server


class Recorder:
    def __init__(self) -> None:
        self.emulators = 0
        self.bootstraps: list[Any] = []
        self.served: list[Any] = []


@pytest.fixture
def rec(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    """main() writes the emulator's variables into os.environ: all of it is put back."""
    saved = dict(os.environ)
    try:
        yield from _recording(monkeypatch)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _recording(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    r = Recorder()

    class FakeMoto:
        def __init__(self, port: int | None = None) -> None:
            r.emulators += 1

        def start(self) -> FakeMoto:
            return self

        def env(self) -> dict[str, str]:
            return {"AWS_ENDPOINT_URL": "http://127.0.0.1:1", "AWS_ACCESS_KEY_ID": "fake"}

        url = "http://127.0.0.1:1"

        def stop(self) -> None:
            pass

    monkeypatch.setattr(server, "MotoServer", FakeMoto)
    monkeypatch.setattr(server, "ensure_resources", lambda s, c: r.bootstraps.append(s))
    monkeypatch.setattr(server, "serve", lambda app, s: r.served.append(s))
    for var in (
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_DYNAMODB",
        "AWS_ENDPOINT_URL_S3",
        "HEADWATER_EMULATOR",
        "HEADWATER_EMULATOR_PORT",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAREALUSERKEY")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "real-secret")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    monkeypatch.setenv("HEADWATER_NOTIFICATION_SCHEMA", "")
    monkeypatch.setenv("HEADWATER_FLAG_TOKENS", "")
    yield r


def test_by_default_an_emulator_starts_and_the_resources_are_created(
    rec: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert server.main() == 0
    assert rec.emulators == 1 and len(rec.bootstraps) == 1 and len(rec.served) == 1


def test_emulator_off_serves_against_aws_with_the_stacks_resources_and_creates_nothing(
    rec: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HEADWATER_EMULATOR", "off")
    monkeypatch.setenv("HEADWATER_RESOURCE_PREFIX", "headwater-dev")
    monkeypatch.setenv("HEADWATER_BUCKET", "headwater-dev-databucket-abc")
    assert server.main() == 0
    # THEN no emulator, no CreateTable/CreateBucket, and the deployed stack's names
    assert rec.emulators == 0 and rec.bootstraps == []
    [settings] = rec.served
    assert settings.resource_prefix == "headwater-dev"
    assert settings.bucket == "headwater-dev-databucket-abc"
    # AND the caller's own credentials and region stay (no emulator's fakes, no endpoint)
    assert os.environ["AWS_ACCESS_KEY_ID"] == "AKIAREALUSERKEY"
    assert os.environ["AWS_DEFAULT_REGION"] == "eu-west-1"
    assert not os.environ.get("AWS_ENDPOINT_URL")
