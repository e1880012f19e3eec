"""/v0/ws on API Gateway: WsFunction (functions/ws) and the forwarder's WebSocket delivery,
invoked with recorded API Gateway WebSocket events (tests/events/2x_ws_*.json) and a
recorded log-table stream event against in-process moto.

Frames are read back from moto's apigatewaymanagementapi backend, which records what
post_to_connection sent (appended to one buffer per connection: the frames are JSON
objects, split here with raw_decode). moto never answers GoneException, so the "client
gone" tests wrap the real poster in a fake that raises it for chosen connections."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import quote

import boto3
import botocore.session
import pytest
from aws_lambda_powertools.utilities import parameters
from moto import mock_aws
from moto.apigatewaymanagementapi.models import apigatewaymanagementapi_backends
from moto.core import DEFAULT_ACCOUNT_ID

from headwater.engine.ports.ws import ConnectionGone
from headwater.engine.records import NewRecord
from headwater.engine.values import AppendRequest
from headwater.errors import StorageUnavailable
from headwater.settings import Settings
from headwater.storage.bootstrap import ensure_resources
from headwater.storage.clients import AwsClients

pytestmark = pytest.mark.infra

REPO = Path(__file__).resolve().parents[2]
EVENTS = REPO / "tests" / "events"
WS_HANDLER = REPO / "functions" / "ws" / "handler.py"
FORWARDER = REPO / "functions" / "forwarder" / "handler.py"
KEYS_PARAMETER = "/headwater/test/api-keys"
FULL_KEY = "hw-test-key-1"  # the token in 20_ws_connect.json
READ_KEY = "hw-read-key"  # read scope, names starting "orders" only
A = "T9rq0cO2IAMCJ8g="  # the connection in 20/21/23
B = "T9rsYd2xIAMCKVA="  # the publisher in 22
C = "T9s0b1hYoAMCLfQ="


@dataclass
class FakeLambdaContext:
    function_name: str = "headwater-test-WsFunction-Qw3rTy"
    function_version: str = "$LATEST"
    invoked_function_arn: str = (
        "arn:aws:lambda:us-east-1:123456789012:function:headwater-test-WsFunction-Qw3rTy"
    )
    memory_limit_in_mb: int = 1024
    aws_request_id: str = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    log_group_name: str = "/aws/lambda/headwater-test-WsFunction-Qw3rTy"
    log_stream_name: str = "2026/11/21/[$LATEST]00112233445566778899aabbccddeeff"

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


def _event(name: str) -> dict[str, Any]:
    return dict(json.loads((EVENTS / name).read_text()))


def _import(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _posted(connection_id: str) -> list[dict[str, Any]]:
    """Every frame moto recorded for the connection, in order."""
    backend = apigatewaymanagementapi_backends[DEFAULT_ACCOUNT_ID]["us-east-1"]
    # (moto keys connections by the id as it appears in the URL path, percent-encoded; and
    # `connections` is a defaultdict: never index it)
    conn = backend.connections.get(quote(connection_id, safe=""))
    raw = conn.data.decode() if conn is not None else ""
    frames, pos, decoder = [], 0, json.JSONDecoder()
    while pos < len(raw):
        frame, pos = decoder.raw_decode(raw, pos)
        frames.append(frame)
    return frames


def _connect_event(connection_id: str, token: str | None, *, header: bool = False) -> Any:
    event = _event("20_ws_connect.json")
    event["requestContext"]["connectionId"] = connection_id
    event.pop("queryStringParameters")
    event.pop("multiValueQueryStringParameters")
    if token is not None and header:
        event["headers"]["Authorization"] = f"Bearer {token}"
    elif token is not None:
        event["queryStringParameters"] = {"token": token}
        event["multiValueQueryStringParameters"] = {"token": [token]}
    return event


def _message(connection_id: str, body: dict[str, Any] | str) -> dict[str, Any]:
    event = _event("21_ws_default_subscribe.json")
    event["requestContext"]["connectionId"] = connection_id
    event["body"] = body if isinstance(body, str) else json.dumps(body)
    return event


@dataclass
class GoneFor:
    """The real poster (moto), except for connections the client has left."""

    inner: Any
    gone: set[str] = field(default_factory=set)

    def post(self, endpoint: str, connection_id: str, data: bytes) -> None:
        if connection_id in self.gone:
            raise ConnectionGone(connection_id)
        self.inner.post(endpoint, connection_id, data)

    def close(self, endpoint: str, connection_id: str) -> None:
        self.inner.close(endpoint, connection_id)


@dataclass
class Recorder:
    """The real poster (moto), keeping what went through it."""

    inner: Any
    posts: list[tuple[str, bytes]] = field(default_factory=list)
    closed: list[str] = field(default_factory=list)

    def post(self, endpoint: str, connection_id: str, data: bytes) -> None:
        self.posts.append((connection_id, data))
        self.inner.post(endpoint, connection_id, data)

    def close(self, endpoint: str, connection_id: str) -> None:
        self.closed.append(connection_id)
        self.inner.close(endpoint, connection_id)


@dataclass
class World:
    ws: ModuleType
    fwd: ModuleType
    ddb: Any
    settings: Settings

    def call(self, event: dict[str, Any]) -> dict[str, Any]:
        return dict(self.ws.handler(event, FakeLambdaContext()))

    def forward(self, event: dict[str, Any]) -> dict[str, Any]:
        return dict(self.fwd.handler(event, FakeLambdaContext()))

    def connection_item(self, cid: str) -> dict[str, Any] | None:
        key = {"pk": {"S": f"wsc#{cid}"}, "sk": {"S": "conn"}}
        table = self.settings.table_name("sessions")
        item: dict[str, Any] | None = self.ddb.get_item(TableName=table, Key=key).get("Item")
        return item

    def subscription_item(self, topic: str, cid: str) -> dict[str, Any] | None:
        key = {"pk": {"S": f"wss#{topic}"}, "sk": {"S": cid}}
        table = self.settings.table_name("index")
        item: dict[str, Any] | None = self.ddb.get_item(TableName=table, Key=key).get("Item")
        return item

    def counter(self) -> int:
        key = {"pk": {"S": "quota"}, "sk": {"S": "ws_connections"}}
        it = self.ddb.get_item(TableName=self.settings.table_name("index"), Key=key).get("Item")
        return int(it["n"]["N"]) if it else 0


@pytest.fixture
def lambda_env(fake_aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEADWATER_RESOURCE_PREFIX", "hw-infra")
    monkeypatch.setenv("HEADWATER_BUCKET", "hw-infra-data")
    monkeypatch.setenv("HEADWATER_API_KEYS_PARAMETER", KEYS_PARAMETER)
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "headwater-test")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "HeadwaterTest")


@pytest.fixture
def world(lambda_env: None) -> Iterator[World]:
    parameters.clear_caches()
    with mock_aws():
        settings = Settings.from_env()
        clients = AwsClients.create(settings)
        ensure_resources(settings, clients)
        boto3.client("ssm").put_parameter(
            Name=KEYS_PARAMETER,
            Value=f"{FULL_KEY},{READ_KEY}:r:orders",
            Type="SecureString",
            Overwrite=True,
        )
        ws = _import(WS_HANDLER, "headwater_ws_handler_under_test")
        fwd = _import(FORWARDER, "headwater_forwarder_ws_under_test")
        w = World(ws, fwd, clients.dynamodb, settings)
        try:
            yield w
        finally:
            if ws._runtime is not None:
                ws._runtime.svc.engine.close()
            if fwd._core is not None:
                fwd._core.engine.close()
    parameters.clear_caches()


def _given_orders_with_one_record(w: World) -> None:
    engine = w.fwd._built().engine  # any process's engine: the storage is shared

    async def setup() -> None:
        await engine.put_topic("orders", {})
        await engine.put_topic("audit", {})
        await engine.append("orders", AppendRequest([NewRecord({"order": 1}, node="shop-1")]))

    import asyncio

    asyncio.run(setup())


def test_import_creates_no_aws_client(lambda_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("an AWS client was created at import")

    monkeypatch.setattr(botocore.session.Session, "create_client", refuse)
    assert _import(WS_HANDLER, "headwater_ws_import_check").handler is not None


def test_connect_refuses_a_missing_or_wrong_key_with_401(world: World) -> None:
    # WHEN a client connects without a token, or with a wrong one
    for event in (_connect_event(A, None), _connect_event(A, "nope", header=True)):
        response = world.call(event)
        # THEN API Gateway is told 401 (it refuses the upgrade), with the /v0 envelope
        assert response["statusCode"] == 401, response
        assert json.loads(response["body"])["error"]["code"] == "unauthorized"
    # AND nothing was stored or counted
    assert world.connection_item(A) is None
    assert world.counter() == 0


def test_connect_subscribe_publish_forward_unsubscribe_disconnect(world: World) -> None:
    _given_orders_with_one_record(world)
    # WHEN A connects with ?token= (the recorded event) and B with the Authorization header
    assert world.call(_event("20_ws_connect.json")) == {"statusCode": 200}
    assert world.call(_connect_event(B, FULL_KEY, header=True)) == {"statusCode": 200}
    # THEN both are stored with their principal and the stage's management endpoint
    item = world.connection_item(A)
    assert item is not None
    assert item["ep"]["S"] == "https://k3x9wz2c1d.execute-api.us-east-1.amazonaws.com/dev"
    assert item["sc"]["S"] == "admin+delete+read+write"
    assert world.counter() == 2

    # WHEN A subscribes from seq 0 (the recorded command)
    assert world.call(_event("21_ws_default_subscribe.json")) == {"statusCode": 200}
    # THEN A gets `subscribed`, then the backlog up to the head and caught_up, at once
    frames = _posted(A)
    assert [f["op"] for f in frames] == ["subscribed", "record", "caught_up"]
    assert frames[0] == {
        "op": "subscribed",
        "request_id": "s1",
        "topics": {"orders": {"from_seq": 0, "head_seq": 1, "earliest_seq": 1}},
    }
    assert [r["data"] for r in frames[1]["records"]] == [{"order": 1}]
    assert (frames[1]["from_seq"], frames[1]["to_seq"]) == (0, 1)
    assert frames[2] == {"op": "caught_up", "topic": "orders", "head_seq": 1}
    sub = world.subscription_item("orders", A)
    assert sub is not None
    assert (sub["cur"]["N"], sub["lv"]["BOOL"]) == ("1", True)

    # WHEN B publishes two records (the recorded command)
    assert world.call(_event("22_ws_default_publish.json")) == {"statusCode": 200}
    # THEN B gets its ack; A gets nothing until the forwarder sees the new frame
    (ack,) = _posted(B)
    assert ack["op"] == "ack" and ack["request_id"] == "p1"
    assert (ack["first_seq"], ack["last_seq"], ack["head_seq"]) == (2, 3, 3)
    assert len(_posted(A)) == 3

    # WHEN the log table's stream delivers that frame to the forwarder
    stream = _event("24_ws_forwarder_stream_insert.json")
    assert world.forward(stream) == {"batchItemFailures": []}
    # THEN A gets one record frame continuing from its cursor (no second caught_up)
    frames = _posted(A)
    assert len(frames) == 4
    live = frames[3]
    assert live["op"] == "record" and (live["from_seq"], live["to_seq"]) == (1, 3)
    assert [(r["$seq"], r["$node"], r["data"]) for r in live["records"]] == [
        (2, "shop-2", {"order": 2}),
        (3, "shop-2", {"order": 3}),
    ]
    sub = world.subscription_item("orders", A)
    assert sub is not None and sub["cur"]["N"] == "3"
    # AND a redelivered stream record posts nothing (the cursor has passed the frame)
    assert world.forward(stream) == {"batchItemFailures": []}
    assert len(_posted(A)) == 4

    # WHEN A unsubscribes
    world.call(_message(A, {"op": "unsubscribe", "request_id": "u1", "topic": "orders"}))
    # THEN it is told so, and its subscription is gone
    assert _posted(A)[-1] == {"op": "unsubscribed", "request_id": "u1", "topics": ["orders"]}
    assert world.subscription_item("orders", A) is None
    item = world.connection_item(A)
    assert item is not None and "tp" not in item

    # WHEN A subscribes again (tail) and then disconnects (the recorded event)
    world.call(
        _message(A, {"op": "subscribe", "request_id": "s2", "topic": "orders", "tail": True})
    )
    assert world.subscription_item("orders", A) is not None
    assert world.call(_event("23_ws_disconnect.json")) == {"statusCode": 200}
    # THEN its connection and subscriptions are removed and its slot is released
    assert world.connection_item(A) is None
    assert world.subscription_item("orders", A) is None
    assert world.counter() == 1
    # AND a second $disconnect (API Gateway may retry) changes nothing
    assert world.call(_event("23_ws_disconnect.json")) == {"statusCode": 200}
    assert world.counter() == 1


def test_scopes_and_prefixes_are_error_frames(world: World) -> None:
    _given_orders_with_one_record(world)
    # GIVEN C connected with a read-only key limited to names starting "orders"
    assert world.call(_connect_event(C, READ_KEY)) == {"statusCode": 200}
    # WHEN it publishes, subscribes outside its prefix, and sends junk
    world.call(_message(C, {"op": "publish", "request_id": "p", "topic": "orders", "records": []}))
    world.call(_message(C, {"op": "subscribe", "request_id": "s", "topic": "audit"}))
    world.call(_message(C, "not json"))
    binary = _message(C, "AAEC")
    binary["isBase64Encoded"] = True
    world.call(binary)
    # THEN each is answered with an error frame and the connection stays
    errors = _posted(C)
    assert [(f["op"], f["request_id"], f["code"]) for f in errors] == [
        ("error", "p", "forbidden"),
        ("error", "s", "forbidden"),
        ("error", None, "invalid_request"),
        ("error", None, "invalid_request"),
    ]
    assert errors[0]["message"] == "api key lacks write scope"
    assert errors[1]["detail"] == {"name": "audit"}
    assert world.connection_item(C) is not None
    # AND what it may do, it can
    world.call(_message(C, {"op": "subscribe", "request_id": "ok", "topic": "orders"}))
    assert _posted(C)[4]["op"] == "subscribed"
    world.call(_message(C, {"op": "ping", "request_id": 7}))
    assert _posted(C)[-1] == {"op": "pong", "request_id": 7}


def test_a_gone_client_is_cleaned_up_by_the_forwarder_not_failed(world: World) -> None:
    _given_orders_with_one_record(world)
    world.call(_event("20_ws_connect.json"))
    world.call(_event("21_ws_default_subscribe.json"))
    world.call(_connect_event(B, FULL_KEY))
    world.call(_event("22_ws_default_publish.json"))
    # GIVEN A has gone without a $disconnect (API Gateway answers GoneException)
    delivery = world.fwd._delivery()
    delivery.poster = GoneFor(delivery.poster, {A})
    # WHEN the forwarder delivers the new frame
    assert world.forward(_event("24_ws_forwarder_stream_insert.json")) == {"batchItemFailures": []}
    # THEN A's connection and subscription are removed and its slot released
    assert world.connection_item(A) is None
    assert world.subscription_item("orders", A) is None
    assert world.counter() == 1


def test_a_client_gone_during_its_own_command_is_cleaned_up(world: World) -> None:
    _given_orders_with_one_record(world)
    world.call(_event("20_ws_connect.json"))
    rt = world.ws.runtime()
    rt.delivery.poster = GoneFor(rt.delivery.poster, {A})
    assert world.call(_event("21_ws_default_subscribe.json")) == {"statusCode": 200}
    assert world.connection_item(A) is None
    assert world.subscription_item("orders", A) is None
    assert world.counter() == 0


def test_a_storage_error_fails_that_stream_record(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    _given_orders_with_one_record(world)
    world.call(_event("20_ws_connect.json"))
    world.call(_event("21_ws_default_subscribe.json"))
    world.call(_connect_event(B, FULL_KEY))
    world.call(_event("22_ws_default_publish.json"))
    store = world.fwd._delivery().store

    def unavailable(topic: str, now_s: int) -> list[Any]:
        raise StorageUnavailable("storage error: ProvisionedThroughputExceededException")

    event = _event("24_ws_forwarder_stream_insert.json")
    seq_no = event["Records"][0]["dynamodb"]["SequenceNumber"]
    with monkeypatch.context() as m:
        m.setattr(store, "subscriptions", unavailable)
        # a batch whose only record fails is a function error; add a MODIFY that succeeds
        modify = copy.deepcopy(event["Records"][0])
        modify["eventName"] = "MODIFY"
        modify["dynamodb"]["SequenceNumber"] = str(int(seq_no) + 1)
        event["Records"].append(modify)
        response = world.forward(event)
    # THEN the frame's record is the failed item, and A got nothing
    assert response == {"batchItemFailures": [{"itemIdentifier": seq_no}]}
    assert len(_posted(A)) == 3
    # AND Lambda's retry delivers it
    assert world.forward(_event("24_ws_forwarder_stream_insert.json")) == {"batchItemFailures": []}
    assert [f["op"] for f in _posted(A)] == ["subscribed", "record", "caught_up", "record"]


def test_connection_cap_refuses_then_recounts(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOPICS_MAX_SSE_CONNECTIONS", "1")
    assert world.call(_event("20_ws_connect.json"))["statusCode"] == 200
    # WHEN a second client connects past the cap
    refused = world.call(_connect_event(B, FULL_KEY))
    # THEN 429 with the envelope and Retry-After
    assert refused["statusCode"] == 429
    assert refused["headers"]["Retry-After"] == "1"
    assert json.loads(refused["body"])["error"]["detail"] == {
        "limit": "max_sse_connections",
        "max": 1,
    }
    # WHEN A's item disappears without a $disconnect (DynamoDB's TTL) and B retries
    world.ddb.delete_item(
        TableName=world.settings.table_name("sessions"),
        Key={"pk": {"S": f"wsc#{A}"}, "sk": {"S": "conn"}},
    )
    world.ws.gate().quotas.recount_interval_s = 0  # (rate-limited per process)
    # THEN the recount corrects the counter and B is admitted
    assert world.call(_connect_event(B, FULL_KEY))["statusCode"] == 200
    assert world.counter() == 1


def test_an_unknown_connection_is_told_and_closed(world: World) -> None:
    # GIVEN a message from a connection that is not (or no longer) registered
    rt = world.ws.runtime()
    recorder = Recorder(rt.delivery.poster)
    rt.delivery.poster = recorder
    world.call(_message(C, {"op": "ping"}))
    # THEN it is told so, and closed through the management API
    ((cid, frame),) = recorder.posts
    assert cid == C
    assert (json.loads(frame)["op"], json.loads(frame)["code"]) == ("error", "unauthorized")
    assert recorder.closed == [C]
    backend = apigatewaymanagementapi_backends[DEFAULT_ACCOUNT_ID]["us-east-1"]
    assert quote(C, safe="") not in backend.connections  # moto's delete_connection ran


def test_backlog_in_several_reads_and_options_apply(world: World) -> None:
    engine = world.fwd._built().engine

    async def setup() -> None:
        await engine.put_topic("orders", {})
        recs = [NewRecord({"order": i}, node="shop-1" if i % 2 else "shop-2") for i in range(6)]
        await engine.append("orders", AppendRequest(recs))

    import asyncio

    asyncio.run(setup())
    world.call(_event("20_ws_connect.json"))
    # WHEN A subscribes with a small limit, filtering out its own node, without data
    cmd = {
        "op": "subscribe",
        "request_id": "s",
        "topic": "orders",
        "from_seq": 0,
        "limit": 2,
        "node": "shop-1",
        "include_data": False,
    }
    world.call(_message(A, cmd))
    # THEN the whole backlog arrives in limit-sized frames with contiguous cursors
    frames = _posted(A)
    records = [f for f in frames if f["op"] == "record"]
    assert [(f["from_seq"], f["to_seq"]) for f in records] == [(0, 3), (3, 6)]
    assert [r["$seq"] for f in records for r in f["records"]] == [1, 3, 5]
    assert all("data" not in r and r["$node"] == "shop-2" for f in records for r in f["records"])
    assert frames[-1] == {"op": "caught_up", "topic": "orders", "head_seq": 6}


def test_a_deleted_topic_ends_the_subscription(world: World) -> None:
    _given_orders_with_one_record(world)
    world.call(_event("20_ws_connect.json"))
    world.call(_event("21_ws_default_subscribe.json"))
    engine = world.fwd._built().engine

    import asyncio

    async def recreate() -> None:
        await engine.delete_topic("orders", if_empty=False)
        await engine.put_topic("orders", {})
        await engine.append("orders", AppendRequest([NewRecord({"order": 1}), NewRecord({})]))
        await engine.append("orders", AppendRequest([NewRecord({"order": 3})]))

    asyncio.run(recreate())
    # WHEN the forwarder sees a frame of the recreated topic
    assert world.forward(_event("24_ws_forwarder_stream_insert.json")) == {"batchItemFailures": []}
    # THEN A is told the topic it subscribed to was deleted, and the subscription ends
    assert _posted(A)[-1] == {
        "op": "topic_deleted",
        "topic": "orders",
        "head_seq": 1,
        "reason": "deleted",
    }
    assert world.subscription_item("orders", A) is None
    item = world.connection_item(A)
    assert item is not None and "tp" not in item


def test_a_lost_cursor_race_is_skipped(world: World) -> None:
    _given_orders_with_one_record(world)
    world.call(_event("20_ws_connect.json"))
    world.call(_message(A, {"op": "subscribe", "request_id": "s", "topic": "orders", "tail": True}))
    engine = world.fwd._built().engine
    import asyncio

    asyncio.run(engine.append("orders", AppendRequest([NewRecord({"order": 2})])))
    delivery = world.fwd._delivery()
    (sub,) = delivery.store.subscriptions("orders", 0)

    async def two_deliveries() -> tuple[Any, Any]:
        first = await delivery.deliver(sub, deadline=float("inf"))
        second = await delivery.deliver(sub, deadline=float("inf"))  # read the same cursor
        return first, second

    first, second = asyncio.run(two_deliveries())
    # THEN the first moved the cursor; the second posted a duplicate and lost the write
    assert (first.frames, first.through, first.raced) == (1, 2, False)
    assert (second.frames, second.through, second.raced) == (1, 1, True)
    assert world.subscription_item("orders", A)["cur"]["N"] == "2"  # type: ignore[index]
    ops = [(f["op"], f.get("to_seq")) for f in _posted(A)]
    assert ops == [
        ("subscribed", None),
        ("caught_up", None),
        ("record", 2),
        ("record", 2),
    ]
