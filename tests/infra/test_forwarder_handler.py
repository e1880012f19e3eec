"""ForwarderFunction's stream handler, invoked with a recorded DynamoDB stream event (as the
event source mapping delivers it: log-table INSERTs for new frames, and a MODIFY made by a
record delete) against in-process moto. The recorded frames are orders#1 seqs 1-3 and 4-5
and audit#1 seq 1; each test rebuilds that log with the same appends."""

from __future__ import annotations

import asyncio
import copy
import importlib.util
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import botocore.session
import pytest
from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError
from moto import mock_aws

from headwater.engine import router_stream as router_stream_module
from headwater.engine.ports.routers import RouterItem
from headwater.engine.records import NewRecord
from headwater.engine.routers import RouterEngine
from headwater.engine.values import AppendRequest, DiffRequest
from headwater.settings import Settings
from headwater.storage.bootstrap import ensure_resources
from headwater.storage.clients import AwsClients

pytestmark = pytest.mark.infra

REPO = Path(__file__).resolve().parents[2]
HANDLER = REPO / "functions" / "forwarder" / "handler.py"
EVENT = REPO / "tests" / "events" / "10_forwarder_stream_insert.json"
AUDIT_FRAME = "1100000000017454423011"  # SequenceNumber of the audit#1 frame's record


@dataclass
class FakeLambdaContext:
    function_name: str = "headwater-test-ForwarderFunction-XyZ789"
    function_version: str = "$LATEST"
    invoked_function_arn: str = (
        "arn:aws:lambda:us-east-1:123456789012:function:headwater-test-ForwarderFunction-XyZ789"
    )
    memory_limit_in_mb: int = 1024
    aws_request_id: str = "7e0d1c2b-3a4f-4b5c-8d6e-9f0a1b2c3d4e"
    log_group_name: str = "/aws/lambda/headwater-test-ForwarderFunction-XyZ789"
    log_stream_name: str = "2026/11/21/[$LATEST]fedcba9876543210fedcba9876543210"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


def _event() -> dict[str, Any]:
    return dict(json.loads(EVENT.read_text()))


def _import_handler() -> ModuleType:
    spec = importlib.util.spec_from_file_location("headwater_forwarder_under_test", HANDLER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as a real import would (its dataclasses look it up)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def lambda_env(fake_aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    # What template.yaml's Globals give the function (names from headwater.settings).
    monkeypatch.setenv("HEADWATER_RESOURCE_PREFIX", "hw-infra")
    monkeypatch.setenv("HEADWATER_BUCKET", "hw-infra-data")
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "headwater-test")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "HeadwaterTest")


@pytest.fixture
def module(lambda_env: None) -> Iterator[ModuleType]:
    with mock_aws():
        settings = Settings.from_env()
        ensure_resources(settings, AwsClients.create(settings))
        mod = _import_handler()
        yield mod
        mod._engine().log.close()


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


async def _values(r: RouterEngine, topic: str) -> list[dict[str, Any]]:
    res = await r.log.diff(topic, DiffRequest(limit=1000, include_tags=True, include_meta=True))
    return [json.loads(b) for b in res.records]


def _given_the_recorded_log(r: RouterEngine) -> None:
    """Routers first (they start at the source head), then the appends the event recorded."""

    async def setup() -> None:
        await r.log.put_topic("orders", {})
        await r.log.put_topic("audit", {})
        await r.log.put_topic("audit-full", {"cap_records": 1, "discard": "reject"})
        await r.log.append("audit-full", AppendRequest([NewRecord({"filler": True}, size=32)]))
        await r.put(RouterItem("orders->copy", "orders", "orders-copy"))
        await r.put(RouterItem("orders->eo", "orders", "orders-eo", guarantee="exactly_once"))
        await r.put(RouterItem("audit->full", "audit", "audit-full"))
        for node, tag, orders in (
            ("shop-1", "order:new", (1, 2, 3)),
            ("shop-2", "order:paid", (4, 5)),
        ):
            recs = [NewRecord({"order": i}, node=node, tag=tag, size=40) for i in orders]
            await r.log.append("orders", AppendRequest(recs))
        await r.log.append("audit", AppendRequest([NewRecord({"event": "login"}, size=40)]))

    _run(setup())


def test_import_creates_no_aws_client(lambda_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("an AWS client was created at import")

    monkeypatch.setattr(botocore.session.Session, "create_client", refuse)
    assert _import_handler().handler is not None


def test_stream_event_forwards_replays_as_no_op_and_reports_the_full_dest(
    module: ModuleType,
) -> None:
    r = module._engine()
    _given_the_recorded_log(r)
    # WHEN the recorded stream batch is delivered
    response = module.handler(_event(), FakeLambdaContext())
    # THEN the orders frames reached both dests, in order, $node/$tag kept
    copies = _run(_values(r, "orders-copy"))
    assert [(c["data"]["order"], c["$node"], c["$tag"]) for c in copies] == [
        (1, "shop-1", "order:new"),
        (2, "shop-1", "order:new"),
        (3, "shop-1", "order:new"),
        (4, "shop-2", "order:paid"),
        (5, "shop-2", "order:paid"),
    ]
    exact = _run(_values(r, "orders-eo"))
    assert [c["meta"]["_topics_router"]["src_seq"] for c in exact] == [1, 2, 3, 4, 5]
    # AND the audit frame, whose dest is full (discard:"reject"), is the one failed item
    assert response == {"batchItemFailures": [{"itemIdentifier": AUDIT_FRAME}]}
    assert _run(r.get("audit->full")).cursor == 0

    # WHEN Lambda delivers the same batch again
    again = module.handler(_event(), FakeLambdaContext())
    # THEN nothing is copied twice (the durable cursors have passed those frames)
    assert len(_run(_values(r, "orders-copy"))) == 5
    assert len(_run(_values(r, "orders-eo"))) == 5
    assert _run(r.get("orders->copy")).forwarded_total == 5
    assert again == {"batchItemFailures": [{"itemIdentifier": AUDIT_FRAME}]}

    # WHEN the full dest makes room and the failed record is retried
    _run(r.log.delete_records("audit-full", 2, None))  # seqs before 2
    retried = module.handler(_event(), FakeLambdaContext())
    # THEN it forwards, and every lease was given back
    assert retried == {"batchItemFailures": []}
    assert [c["data"] for c in _run(_values(r, "audit-full"))] == [{"event": "login"}]
    for name in ("orders->copy", "orders->eo", "audit->full"):
        item = _run(r.get(name))
        assert item.lease_owner is None, item


def test_router_leased_elsewhere_is_skipped_not_failed(
    module: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (how long the handler watches a foreign owner before leaving the frame to it)
    monkeypatch.setattr(router_stream_module, "STREAM_LEASE_WAIT_S", 0.3)
    r = module._engine()
    _given_the_recorded_log(r)
    # GIVEN another forwarder (a uvicorn loop) holds the orders->copy lease
    now = r.log.clock()
    assert r.store.acquire("orders->copy", "uvicorn-elsewhere", now, 60_000) is not None
    orders_only = _event()
    orders_only["Records"] = orders_only["Records"][:2]
    # WHEN the orders frames arrive on the stream
    response = module.handler(orders_only, FakeLambdaContext())
    # THEN they are not failures; the leased router is left to its owner, the other forwards
    assert response == {"batchItemFailures": []}
    assert _run(_values(r, "orders-copy")) == []
    assert len(_run(_values(r, "orders-eo"))) == 5
    item = _run(r.get("orders->copy"))
    assert (item.cursor, item.lease_owner) == (0, "uvicorn-elsewhere")
    # AND once the owner lets go, a redelivery forwards from the durable cursor
    assert r.store.release("orders->copy", "uvicorn-elsewhere")
    assert module.handler(orders_only, FakeLambdaContext()) == {"batchItemFailures": []}
    assert [c["data"]["order"] for c in _run(_values(r, "orders-copy"))] == [1, 2, 3, 4, 5]


def test_a_batch_that_fails_entirely_is_a_function_error(module: ModuleType) -> None:
    # GIVEN only the audit frame, whose dest is full
    r = module._engine()
    _given_the_recorded_log(r)
    event = _event()
    event["Records"] = [copy.deepcopy(event["Records"][2])]
    # WHEN it is delivered THEN the invocation fails (Lambda retries, bisecting the batch)
    with pytest.raises(BatchProcessingError):
        module.handler(event, FakeLambdaContext())
    assert _run(r.get("audit->full")).lease_owner is None


def test_frame_key_ignores_other_changes(module: ModuleType) -> None:
    from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import (
        DynamoDBRecord,
    )

    insert, _, _, modify = (DynamoDBRecord(x) for x in _event()["Records"])
    assert module.frame_key(insert) == ("orders", 1, 3)
    assert module.frame_key(modify) is None
