"""SealerFunction: the scheduled sweep, invoked with a recorded EventBridge schedule event
against in-process moto, and its declaration in template.yaml."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from moto import mock_aws
from test_forwarder_handler import FakeLambdaContext

from headwater.engine.ports import SEGMENT_PREFIX
from headwater.engine.records import NewRecord
from headwater.engine.values import AppendRequest, DiffRequest
from headwater.settings import Settings
from headwater.storage.bootstrap import ensure_resources
from headwater.storage.clients import AwsClients

pytestmark = pytest.mark.infra

REPO = Path(__file__).resolve().parents[2]
HANDLER = REPO / "functions" / "sealer" / "handler.py"
EVENT = REPO / "tests" / "events" / "40_sealer_schedule.json"


def _import_handler() -> ModuleType:
    spec = importlib.util.spec_from_file_location("headwater_sealer_under_test", HANDLER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def module(fake_aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    monkeypatch.setenv("HEADWATER_RESOURCE_PREFIX", "hw-sealer")
    monkeypatch.setenv("HEADWATER_BUCKET", "hw-sealer-data")
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "headwater-test")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "HeadwaterTest")
    monkeypatch.setenv("HEADWATER_TIERING_INTERVAL_MS", "0")
    # In-process moto serves one thread at a time: no upkeep started by the appends.
    monkeypatch.setenv("HEADWATER_TIERING_INLINE", "0")
    monkeypatch.setenv("HEADWATER_SEAL_RECORDS", "10")
    monkeypatch.setenv("HEADWATER_SEAL_GRACE_MS", "0")
    with mock_aws():
        settings = Settings.from_env()
        ensure_resources(settings, AwsClients.create(settings))
        mod = _import_handler()
        yield mod
        mod._built().engine.close()


def test_the_schedule_seals_and_evicts_every_topic(module: ModuleType) -> None:
    core = module._built()
    engine = core.engine

    async def given() -> None:
        await engine.put_topic("capped", {"cap_records": 3})
        for i in range(6):
            await engine.append("capped", AppendRequest([NewRecord({"i": i}, size=24)]))
        await engine.append("big", AppendRequest([NewRecord({"i": i}, size=24) for i in range(25)]))
        await engine.append("small", AppendRequest([NewRecord({"i": 0}, size=24)]))

    asyncio.run(given())
    event: dict[str, Any] = json.loads(EVENT.read_text())
    out = module.handler(event, FakeLambdaContext())
    assert out["topics"] == 3
    assert out["segments_sealed"] >= 1 and out["records_evicted"] == 3
    heads = {t: engine.heads.get(t) for t in ("capped", "big", "small")}
    assert heads["big"].sealed_through == 25  # type: ignore[union-attr]
    assert heads["small"].sealed_through == 0  # below every threshold (age: 10 min)
    assert (heads["capped"].count, heads["capped"].earliest_seq) == (3, 4)  # type: ignore[union-attr]
    keys = core.clients.s3.list_objects_v2(Bucket="hw-sealer-data", Prefix=SEGMENT_PREFIX)
    assert keys["KeyCount"] == 1
    res = asyncio.run(engine.diff("big", DiffRequest(limit=100)))
    assert [json.loads(r)["data"]["i"] for r in res.records] == list(range(25))


def test_template_schedules_the_sealer_with_data_access() -> None:
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    template = yaml.load((REPO / "template.yaml").read_text(), Loader=Loader)
    fn = template["Resources"]["SealerFunction"]["Properties"]
    assert fn["CodeUri"] == "functions/sealer" and fn["Handler"] == "handler.handler"
    (event,) = fn["Events"].values()
    assert event["Type"] == "Schedule" and event["Properties"]["Schedule"].startswith("rate(")
    assert (
        template["Globals"]["Function"]["Environment"]["Variables"]["HEADWATER_TIERING_INTERVAL_MS"]
        == "0"
    )
