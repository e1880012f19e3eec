"""Small helpers shared by the /v0 API tests: requests that must succeed, and the error
envelope check (spec §0.5) that every non-2xx response must pass."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import httpx
from starlette.testclient import TestClient

from headwater.engine.log import LogEngine
from headwater.settings import Settings
from headwater.storage.blobs import S3BlobStore
from headwater.storage.bootstrap import ensure_resources
from headwater.storage.clients import AwsClients
from headwater.storage.heads import DynamoHeadStore
from headwater.storage.log_tail import DynamoLogTailStore

MakeClient = Callable[..., TestClient]


def path(topic: str, suffix: str = "") -> str:
    return f"/v0/topics/{quote(topic, safe='')}{suffix}"


def assert_performance(body: dict[str, Any]) -> None:
    perf = body.get("performance")
    assert isinstance(perf, dict), body
    total = perf.get("server_total_ms")
    assert isinstance(total, int | float) and not isinstance(total, bool), perf
    assert total >= 0


def assert_error(resp: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """The §0.5 envelope: {"error": {"code", "message", "detail"?}} plus performance."""
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json"), resp.headers
    body = resp.json()
    err = body["error"]
    assert err["code"] == code, body
    assert isinstance(err["message"], str) and err["message"], body
    assert set(err) <= {"code", "message", "detail"}, body
    if "detail" in err:
        assert isinstance(err["detail"], dict), body
    assert_performance(body)
    return err


def ok(resp: httpx.Response, *statuses: int) -> dict[str, Any]:
    assert resp.status_code in (statuses or (200,)), resp.text
    body = resp.json()
    assert "error" not in body, body
    assert_performance(body)
    return body


def put_topic(
    client: TestClient, topic: str, config: dict[str, Any] | None = None
) -> dict[str, Any]:
    return ok(client.put(path(topic), json=config or {}), 200, 201)


def append(
    client: TestClient, topic: str, records: list[dict[str, Any]], **body: Any
) -> dict[str, Any]:
    return ok(client.post(path(topic), json={"records": records, **body}), 200, 201)


def append_data(client: TestClient, topic: str, *values: Any, **body: Any) -> dict[str, Any]:
    return append(client, topic, [{"data": v} for v in values], **body)


def diff(client: TestClient, topic: str, **body: Any) -> dict[str, Any]:
    return ok(client.post(path(topic, "/diff"), json=body))


def seqs_of(diff_body: dict[str, Any]) -> list[int]:
    return [r["$seq"] for r in diff_body["records"]]


def read_all(client: TestClient, topic: str, **body: Any) -> list[dict[str, Any]]:
    """Every live record, following next_from_seq until caught_up."""
    out: list[dict[str, Any]] = []
    cursor = 0
    while True:
        d = diff(client, topic, from_seq=cursor, limit=1000, **body)
        out.extend(d["records"])
        assert d["next_from_seq"] >= cursor
        cursor = d["next_from_seq"]
        if d["caught_up"]:
            return out


def state(client: TestClient, topic: str) -> dict[str, Any]:
    return ok(client.get(path(topic), params={"touch": "false"}))


def counting_engine(settings: Settings, calls: Counter[str]) -> LogEngine:
    """A LogEngine over fresh tables whose DynamoDB calls are counted by operation name (a
    second one over the same settings stands in for another process)."""
    clients = AwsClients.create(settings)
    ensure_resources(settings, clients)

    def count(event_name: str, **_: Any) -> None:
        calls[event_name.split(".")[-1]] += 1

    def count_tables(event_name: str, params: dict[str, Any], **_: Any) -> None:
        # also by table: "BatchGetItem@<table name>" (a batch counts once per table it reads)
        op = event_name.split(".")[-1]
        for table in params.get("RequestItems") or [params.get("TableName")]:
            if table:
                calls[f"{op}@{table}"] += 1

    clients.dynamodb.meta.events.register("before-call.dynamodb.*", count)
    clients.dynamodb.meta.events.register("before-parameter-build.dynamodb.*", count_tables)
    blobs = S3BlobStore(clients.s3, settings.bucket_name)
    return LogEngine(
        DynamoHeadStore(clients.dynamodb, settings),
        DynamoLogTailStore(clients.dynamodb, settings, blobs),
        blobs,
        settings,
    )
