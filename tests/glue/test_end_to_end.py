"""Acceptance (issue 5): append through the API of a real server process, let it seal the
tail into S3 segments, run the Glue job against the same emulator, and read the rollups
back through GET /v0/topics/{topic}/rollups."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pyspark.sql import SparkSession
from rollup.job import main

from headwater.dev.emulator import MotoServer
from headwater.settings import Settings
from headwater.storage.bootstrap import ensure_resources
from headwater.storage.clients import AwsClients
from tests.e2e.conftest import Cluster, ServerProcess, _session

pytestmark = pytest.mark.glue


@pytest.fixture(scope="module")
def emulator() -> Iterator[MotoServer]:
    with MotoServer() as server:
        yield server


def job_args(settings: Settings, emulator: MotoServer) -> list[str]:
    return [
        "--bucket",
        settings.bucket_name,
        "--resource-prefix",
        settings.resource_prefix,
        "--endpoint-url",
        emulator.url,
    ]


def totals(windows: list[dict[str, Any]]) -> tuple[int, dict[str, int]]:
    tags: dict[str, int] = {}
    for w in windows:
        for k, v in w["by_tag_prefix"].items():
            tags[k] = tags.get(k, 0) + v
    return sum(w["records"] for w in windows), tags


def wait_sealed(http: httpx.Client, url: str, through: int) -> None:
    deadline = time.monotonic() + 20
    while http.get(url).json()["sealed_through"] < through and time.monotonic() < deadline:
        time.sleep(0.1)
    assert http.get(url).json()["sealed_through"] == through


@pytest.fixture
def server(emulator: MotoServer, tmp_path: object) -> Iterator[tuple[ServerProcess, Settings]]:
    prefix = f"glue-{uuid.uuid4().hex[:8]}"
    settings = Settings(resource_prefix=prefix)
    ensure_resources(settings, AwsClients.create(settings, session=_session(emulator)))
    cluster = Cluster(emulator, prefix)
    srv = cluster.start_server(
        str(tmp_path),
        HEADWATER_SEAL_RECORDS="10",
        HEADWATER_SEAL_AGE_MS="0",
        HEADWATER_TIERING_INTERVAL_MS="100",
    )
    yield srv, settings
    srv.stop()


def test_append_seal_job_and_rollups_served_by_the_api(
    spark: SparkSession, emulator: MotoServer, server: tuple[ServerProcess, Settings]
) -> None:
    srv, settings = server
    url = f"{srv.url}/v0/topics/clicks"
    with httpx.Client(timeout=30) as http:
        # GIVEN 30 records (tags with prefixes, two nodes) appended through the API
        for batch in range(3):
            records = [
                {
                    "data": {"n": batch * 10 + i},
                    "tag": f"tenant{i % 2}:item-{i}",
                    "node": "web-1" if i < 7 else "web-2",
                }
                for i in range(10)
            ]
            assert http.post(url, json={"records": records}).status_code in (200, 201)
        # and sealed by the server's own upkeep
        deadline = time.monotonic() + 20
        while http.get(url).json()["sealed_through"] < 30 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert http.get(url).json()["sealed_through"] == 30
        before = http.get(f"{url}/rollups").json()
        assert before["rollups"] == [] and before["through_seq"] == 0

        # WHEN the Glue job runs against the same emulator, with the deployment's tables
        args = job_args(settings, emulator)
        assert main(args, spark=spark) == 0

        # THEN the API serves the rollups of what was sealed
        hour = http.get(f"{url}/rollups", params={"granularity": "hour"}).json()
        assert hour["through_seq"] == 30 and hour["epoch"] == 1
        assert sum(w["records"] for w in hour["rollups"]) == 30
        merged_tags: dict[str, int] = {}
        merged_nodes: dict[str, int] = {}
        for w in hour["rollups"]:
            for k, v in w["by_tag_prefix"].items():
                merged_tags[k] = merged_tags.get(k, 0) + v
            for k, v in w["by_node"].items():
                merged_nodes[k] = merged_nodes.get(k, 0) + v
        assert merged_tags == {"tenant0": 15, "tenant1": 15}
        assert merged_nodes == {"web-1": 21, "web-2": 9}
        assert sum(w["bytes"] for w in hour["rollups"]) == http.get(url).json()["bytes"]
        minute = http.get(f"{url}/rollups", params={"granularity": "minute"}).json()
        assert sum(w["records"] for w in minute["rollups"]) == 30


def test_rollups_skip_deleted_records_and_later_runs_read_only_new_segments(
    spark: SparkSession, emulator: MotoServer, server: tuple[ServerProcess, Settings]
) -> None:
    srv, settings = server
    url = f"{srv.url}/v0/topics/orders"
    manifest_url = f"{url}/rollups"
    with httpx.Client(timeout=30) as http:

        def add(first: int, n: int) -> None:
            records = [{"data": {"n": i}, "tag": f"t{i % 2}:x"} for i in range(first, first + n)]
            assert http.post(url, json={"records": records}).status_code in (200, 201)

        add(0, 10)
        add(10, 10)
        wait_sealed(http, url, 20)
        assert main(job_args(settings, emulator), spark=spark) == 0
        assert totals(http.get(manifest_url).json()["rollups"]) == (20, {"t0": 10, "t1": 10})

        # GIVEN records deleted after sealing (the segments still hold them)
        out = http.post(f"{url}/delete", json={"match": ["tag", "Glob", "t1*"]}).json()
        assert out["deleted"] == 10
        # WHEN the job runs again THEN the topic is recomputed without them
        assert main(job_args(settings, emulator), spark=spark) == 0
        body = http.get(manifest_url).json()
        assert totals(body["rollups"]) == (10, {"t0": 10})

        # GIVEN new records sealed into a new segment
        add(20, 10)
        wait_sealed(http, url, 30)
        # WHEN the job runs THEN only the new segment is read and added to the old windows
        manifest = main_manifest(settings, emulator, spark)
        assert manifest["mode"] == "catalogue" and manifest["segments"] == 1
        assert totals(http.get(manifest_url).json()["rollups"]) == (20, {"t0": 15, "t1": 5})
        assert http.get(manifest_url).json()["through_seq"] == 30

        # AND a run with nothing new reads no segment and changes nothing
        before = http.get(manifest_url, params={"granularity": "minute"}).json()["rollups"]
        manifest = main_manifest(settings, emulator, spark)
        assert manifest["segments"] == 0
        after = http.get(manifest_url, params={"granularity": "minute"}).json()["rollups"]
        assert after == before


def main_manifest(settings: Settings, emulator: MotoServer, spark: SparkSession) -> Any:
    from rollup.job import parse_args, run

    return run(spark, parse_args(job_args(settings, emulator)))
