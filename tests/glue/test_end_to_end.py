"""Acceptance (issue 5): append through the API of a real server process, let it seal the
tail into S3 segments, run the Glue job against the same emulator, and read the rollups
back through GET /v0/topics/{topic}/rollups."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
from pyspark.sql import SparkSession
from rollup.job import main

from headwater.dev.emulator import MotoServer
from headwater.settings import Settings
from headwater.storage.bootstrap import ensure_resources
from headwater.storage.clients import AwsClients
from tests.e2e.conftest import Cluster, ServerProcess, _session

pytestmark = [pytest.mark.glue, pytest.mark.e2e]


@pytest.fixture(scope="module")
def emulator() -> Iterator[MotoServer]:
    with MotoServer() as server:
        yield server


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

        # WHEN the Glue job runs against the same emulator
        args = ["--bucket", settings.bucket_name, "--endpoint-url", emulator.url]
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
