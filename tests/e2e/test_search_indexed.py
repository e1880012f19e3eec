"""Acceptance (issue 24): a `make run`-style server indexes what it seals with no extra step.
Entries appended to an evlog stream are sealed into S3 segments by the server's upkeep and
indexed by its in-process indexer; `_index_status` reports the coverage within 60 s, and
`_search` then reads those segments through their companions, with the same answer a forced
scan gives."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from headwater.engine.ports import COMPANION_SUFFIX, SEGMENT_PREFIX
from headwater.settings import Settings
from headwater.storage.clients import AwsClients
from tests.e2e.conftest import Cluster, ServerProcess

pytestmark = pytest.mark.e2e

JSON = {"Content-Type": "application/json"}
ENV = {
    "HEADWATER_SEAL_RECORDS": "40",
    "HEADWATER_SEAL_AGE_MS": "0",
    "HEADWATER_TIERING_INTERVAL_MS": "500",
}


def _wait_covered(http: httpx.Client, base: str, what: str) -> dict[str, Any]:
    """_index_status once everything is sealed and every segment indexed (60 s at most)."""
    end = http.head(base).headers["stream-next-offset"]
    started = time.monotonic()
    status: dict[str, Any] = {}
    while time.monotonic() - started < 60:
        status = http.get(f"{base}/_index_status").json()
        segments, companions = status["segments"], status["bundled_companions"]
        if (
            segments["sealed_through"] == end
            and companions["lag_segments"] == 0
            and companions["covered_segment_count"] == segments["total_count"]
        ):
            print(f"\n{what}: {time.monotonic() - started:.1f} s")
            return status
        time.sleep(0.25)
    raise AssertionError(f"{what}: not sealed and indexed within 60 s: {status}")


def test_a_running_server_indexes_sealed_segments_and_searches_through_them(
    cluster: Cluster, start_servers: Callable[..., list[ServerProcess]]
) -> None:
    (server,) = start_servers(1, **ENV)
    base = f"{server.url}/v1/stream/app-logs"
    with httpx.Client(timeout=30) as http:
        assert http.put(base, headers=JSON).status_code == 201
        profile = {"apiVersion": "durable.streams/profile/v1", "profile": {"kind": "evlog"}}
        assert http.post(f"{base}/_profile", json=profile).status_code == 200
        # WHEN 200 entries arrive in batches
        for b in range(10):
            batch = [
                {
                    "service": ["checkout", "search", "billing"][(b * 20 + i) % 3],
                    "level": "error" if i % 7 == 0 else "info",
                    "status": 503 if i % 7 == 0 else 200,
                    "message": f"request {b * 20 + i} {'issuer declined' if i % 7 == 0 else 'ok'}",
                }
                for i in range(20)
            ]
            assert http.post(base, content=json.dumps(batch), headers=JSON).status_code == 204
        # THEN within 60 s everything is sealed and every segment indexed, with no step of ours
        status = _wait_covered(http, base, "indexed after the last append")
        covered = status["bundled_companions"]["covered_segment_count"]
        assert covered >= 1
        # ...and a search reads them through their companions: only matching entries
        q = {"q": "service:checkout status:>=500", "size": 200}
        got = http.post(f"{base}/_search", json=q).json()
        cov = got["coverage"]
        assert cov["indexed_segments"] == covered, cov
        assert cov["scanned_segments"] == 0 and cov["scanned_tail_docs"] == 0, cov
        want = sorted(
            n
            for b in range(10)
            for i in range(20)
            if i % 7 == 0 and ["checkout", "search", "billing"][(b * 20 + i) % 3] == "checkout"
            for n in [b * 20 + i]
        )
        found = sorted(int(h["source"]["message"].split()[1]) for h in got["hits"])
        assert found == want
        assert got["total"] == {"value": len(want), "relation": "eq"}
        # WHEN the search config changes (a new plan): the families are rebuilt by themselves
        search = http.get(f"{base}/_schema").json()["search"]
        search["fields"]["status"]["exact"] = not search["fields"]["status"].get("exact", False)
        assert http.post(f"{base}/_schema", json={"search": search}).status_code == 200
        rebuilt = _wait_covered(http, base, "rebuilt after the config change")
        assert rebuilt["bundled_companions"]["covered_segment_count"] == covered
        again = http.post(f"{base}/_search", json=q).json()
        assert again["coverage"]["indexed_segments"] == covered
        assert sorted(h["offset"] for h in again["hits"]) == sorted(
            h["offset"] for h in got["hits"]
        )
        # WHEN the stream is deleted THEN its segments and their companions go with it
        settings = Settings(resource_prefix=cluster.prefix)
        s3 = AwsClients.create(settings).s3

        def companions() -> list[str]:
            listed = s3.list_objects_v2(Bucket=settings.bucket_name, Prefix=SEGMENT_PREFIX)
            return [
                o["Key"] for o in listed.get("Contents", []) if o["Key"].endswith(COMPANION_SUFFIX)
            ]

        assert len(companions()) >= covered
        assert http.delete(base).status_code == 204
        deadline = time.monotonic() + 60
        while companions() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert companions() == []
