"""The index job (glue_jobs/indexer) on local Spark against the emulator: it builds a companion
for every sealed segment of a searchable /v1 stream and publishes coverage; the objects are
byte-identical to what the server's in-process indexer writes; a second run builds nothing;
a run after more segments were sealed builds only those; streams without a search config or
routing key are left alone."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from indexer.job import main
from pyspark.sql import SparkSession
from starlette.testclient import TestClient

from headwater.dev.emulator import MotoServer
from headwater.durable.state import state_of, topic_of
from headwater.engine.segment import companion_key
from headwater.http.app import create_app
from headwater.index import runs
from headwater.index.build import index_stream
from headwater.names import object_key_component
from headwater.settings import Settings, Tiering
from headwater.storage.bootstrap import ensure_resources
from headwater.storage.clients import AwsClients
from headwater.storage.index_catalogue import DynamoIndexCatalogue

pytestmark = pytest.mark.glue

EAGER = Tiering(
    seal_records=10, seal_age_ms=0, grace_ms=0, block_bytes=256, interval_ms=0, inline=False
)
JSON = {"Content-Type": "application/json"}
SEARCH: dict[str, Any] = {
    "primaryTimestampField": "ts",
    "fields": {
        "ts": {"kind": "date", "bindings": [{"version": 1, "jsonPointer": "/ts"}], "column": True},
        "svc": {
            "kind": "keyword",
            "bindings": [{"version": 1, "jsonPointer": "/svc"}],
            "exact": True,
            "prefix": True,
        },
        "msg": {
            "kind": "text",
            "bindings": [{"version": 1, "jsonPointer": "/msg"}],
            "analyzer": "unicode_word_v1",
            "positions": True,
        },
    },
    "defaultFields": [{"field": "msg"}],
    "rollups": {
        "per_svc": {
            "dimensions": ["svc"],
            "intervals": ["1m"],
            "measures": {"n": {"kind": "count"}},
        }
    },
}


@pytest.fixture(scope="module")
def emulator() -> Iterator[MotoServer]:
    with MotoServer() as server:
        yield server


@pytest.fixture
def app(
    emulator: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[TestClient, Settings, AwsClients]]:
    for k, v in emulator.env().items():
        monkeypatch.setenv(k, v)
    settings = Settings(resource_prefix=f"ix-{uuid.uuid4().hex[:8]}", tiering=EAGER)
    aws = AwsClients.create(settings)
    ensure_resources(settings, aws)
    with TestClient(create_app(settings, aws)) as client:
        yield client, settings, aws


def _stream(c: TestClient, name: str, n: int, start: int = 0, search: bool = True) -> None:
    if start == 0:
        assert c.put(f"/v1/stream/{name}", headers=JSON).status_code == 201
        if search:
            body = {
                "schema": {"type": "object"},
                "search": SEARCH,
                "routingKey": {"jsonPointer": "/svc", "required": True},
            }
            r = c.post(f"/v1/stream/{name}/_schema", content=json.dumps(body), headers=JSON)
            assert r.status_code == 200, r.text
    values = [
        {"ts": 1_700_000_000_000 + i * 7_000, "svc": f"s{i % 3}", "msg": f"hello world {i}"}
        for i in range(start, start + n)
    ]
    upkeep = c.app.state.services.get().upkeep  # type: ignore[attr-defined]
    for i in range(0, n, 15):  # one sealed segment per 15 entries
        chunk = json.dumps(values[i : i + 15])
        r = c.post(f"/v1/stream/{name}", content=chunk, headers=JSON)
        assert r.status_code == 204, r.text
        upkeep.run(topic_of(name))


def _args(settings: Settings, emulator: MotoServer) -> list[str]:
    return [
        "--bucket",
        settings.bucket_name,
        "--resource-prefix",
        settings.resource_prefix,
        "--endpoint-url",
        emulator.url,
    ]


def _objects(aws: AwsClients, settings: Settings, name: str) -> dict[str, bytes]:
    resp = aws.s3.list_objects_v2(Bucket=settings.bucket_name, Prefix="segments/")
    keys = sorted(o["Key"] for o in resp.get("Contents", []) if o["Key"].endswith((".cix", ".rkr")))
    part = object_key_component(topic_of(name))
    return {
        k: aws.s3.get_object(Bucket=settings.bucket_name, Key=k)["Body"].read()
        for k in keys
        if f"/{part}/" in k
    }


def test_the_job_indexes_sealed_segments_like_the_server_and_is_incremental(
    spark: SparkSession,
    emulator: MotoServer,
    app: tuple[TestClient, Settings, AwsClients],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(runs, "RUN_SEGMENTS", 2)  # (the driver plans the runs)
    c, settings, aws = app
    # GIVEN a searchable stream with sealed segments, and a plain one
    _stream(c, "logs", 45)
    _stream(c, "plain", 30, search=False)
    svc = c.app.state.services.get()  # type: ignore[attr-defined]
    head = svc.engine.heads.get(topic_of("logs"))
    segs = svc.upkeep.segments.after(head, 0, 100)
    assert len(segs) >= 3
    # WHEN the job runs on local Spark
    assert main(_args(settings, emulator), spark=spark) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    # THEN every sealed segment of the searchable stream got a companion, coverage published,
    # and each two covered segments a lexicon run
    assert summary["built"] == len(segs) == 3
    assert summary["runs"] == 1
    assert list(summary["streams"]) == [topic_of("logs")]
    by_job = _objects(aws, settings, "logs")
    assert sorted(by_job) == sorted(
        [companion_key(s.key) for s in segs] + [runs.run_key(segs[1].key)]
    )
    cat = DynamoIndexCatalogue(aws.dynamodb, settings)
    got = cat.get(head.topic, head.epoch)
    assert got is not None and got.covered_through == segs[-1].last_seq
    assert got.runs == (runs.span_of(segs[:2]),)
    assert got.bytes == sum(len(b) for k, b in by_job.items() if k.endswith(".cix"))
    assert _objects(aws, settings, "plain") == {}
    # ...and the server's in-process indexer writes byte-identical objects
    aws.s3.delete_objects(
        Bucket=settings.bucket_name, Delete={"Objects": [{"Key": k} for k in by_job]}
    )
    cat.delete(head.topic, head.epoch)
    state = state_of(head)
    assert state is not None
    reg = c.portal.call(svc.streams.registry, "logs", state.registry_key)  # type: ignore[union-attr]
    local = index_stream(
        head, reg, segments=svc.upkeep.segments, blobs=svc.engine.blobs, catalogue=cat, now_ms=1
    )
    assert local.built == len(segs) and local.runs == 1
    assert _objects(aws, settings, "logs") == by_job
    # WHEN the job runs again with nothing new THEN it builds nothing
    assert main(_args(settings, emulator), spark=spark) == 0
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again["built"] == 0
    # WHEN more entries are sealed THEN the next run builds only the new segments
    _stream(c, "logs", 25, start=45)
    head2 = svc.engine.heads.get(topic_of("logs"))
    segs2 = svc.upkeep.segments.after(head2, 0, 100)
    assert len(segs2) > len(segs)
    assert main(_args(settings, emulator), spark=spark) == 0
    third = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert third["built"] == len(segs2) - len(segs)
    got = cat.get(head.topic, head.epoch)
    assert got is not None and got.covered_through == segs2[-1].last_seq
    assert third["runs"] == len(segs2) // 2 - 1
    assert got.runs == tuple(runs.span_of(segs2[i : i + 2]) for i in range(0, len(segs2) - 1, 2))
