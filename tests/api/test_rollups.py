"""GET /v0/topics/{topic}/rollups: serves what the rollup Glue job wrote (objects put into the
bucket directly here), filtered by window; errors in the §0.5 envelope."""

from __future__ import annotations

import json
from typing import Any

import pytest
from api_helpers import MakeClient, assert_error, ok, path, put_topic
from starlette.testclient import TestClient

from headwater.names import object_key_component
from headwater.settings import Settings
from headwater.storage.clients import AwsClients

pytestmark = pytest.mark.api

H = 3_600_000
M = 60_000
T0 = 1_700_000_000_000 - (1_700_000_000_000 % H)


def window(start: int, records: int, **maps: dict[str, int]) -> dict[str, Any]:
    return {
        "window_start": start,
        "records": records,
        "bytes": records * 20,
        "by_tag_prefix": maps.get("tags", {}),
        "by_node": maps.get("nodes", {}),
    }


MINUTES = [window(T0, 2, tags={"order": 2}), window(T0 + M, 1), window(T0 + H, 3, nodes={"n": 3})]
HOURS = [window(T0, 3, tags={"order": 2}), window(T0 + H, 3, nodes={"n": 3})]


def publish(
    settings: Settings, aws: AwsClients, topics: dict[str, int], generated_at: int = 1234
) -> None:
    """Write rollups as the job does: objects first, then the manifest (topic -> epoch)."""
    entries = {}
    for topic, epoch in topics.items():
        base = f"rollups/v1/{object_key_component(topic)}/"
        for name, body in (("minute", MINUTES), ("hour", HOURS)):
            aws.s3.put_object(
                Bucket=settings.bucket_name, Key=f"{base}{name}.json", Body=json.dumps(body)
            )
        entries[topic] = {
            "epoch": epoch,
            "through_seq": 6,
            "records": 6,
            "minute": f"{base}minute.json",
            "hour": f"{base}hour.json",
        }
    manifest = {"version": 1, "generated_at": generated_at, "segments": 2, "topics": entries}
    aws.s3.put_object(
        Bucket=settings.bucket_name, Key="rollups/v1/manifest.json", Body=json.dumps(manifest)
    )


def rollups(client: TestClient, topic: str, **params: Any) -> dict[str, Any]:
    return ok(client.get(path(topic, "/rollups"), params=params))


def test_no_rollup_yet_is_an_empty_200(client: TestClient) -> None:
    put_topic(client, "jobs")
    body = rollups(client, "jobs")
    assert body["topic"] == "jobs" and body["granularity"] == "minute"
    assert body["rollups"] == [] and body["through_seq"] == 0 and body["generated_at"] is None
    assert body["epoch"] == 1


def test_topic_missing_from_the_manifest_is_empty(
    client: TestClient, settings: Settings, aws: AwsClients
) -> None:
    publish(settings, aws, {"other": 1})
    put_topic(client, "jobs")
    body = rollups(client, "jobs", granularity="hour")
    assert body["rollups"] == [] and body["through_seq"] == 0 and body["generated_at"] is None


def test_minute_and_hour_rollups_are_served(
    client: TestClient, settings: Settings, aws: AwsClients
) -> None:
    put_topic(client, "orders:eu")
    publish(settings, aws, {"orders:eu": 1}, generated_at=T0 + 2 * H)
    body = rollups(client, "orders:eu")
    assert body["rollups"] == MINUTES
    assert (body["epoch"], body["through_seq"], body["generated_at"]) == (1, 6, T0 + 2 * H)
    hour = rollups(client, "orders:eu", granularity="hour")
    assert hour["granularity"] == "hour" and hour["rollups"] == HOURS


def test_from_and_to_keep_the_windows_that_overlap(
    client: TestClient, settings: Settings, aws: AwsClients
) -> None:
    put_topic(client, "orders")
    publish(settings, aws, {"orders": 1})
    starts = lambda b: [w["window_start"] for w in b["rollups"]]  # noqa: E731
    assert starts(rollups(client, "orders", from_ms=T0 + 1)) == [T0, T0 + M, T0 + H]
    assert starts(rollups(client, "orders", from_ms=T0 + M)) == [T0 + M, T0 + H]
    assert starts(rollups(client, "orders", to_ms=T0 + M)) == [T0]
    assert starts(rollups(client, "orders", from_ms=T0 + M, to_ms=T0 + M + 1)) == [T0 + M]
    hours = rollups(client, "orders", granularity="hour", from_ms=T0 + H - 1, to_ms=T0 + H)
    assert starts(hours) == [T0]
    assert rollups(client, "orders", from_ms=T0 + 5 * H)["rollups"] == []


def test_rollups_of_a_deleted_incarnation_are_not_served(
    client: TestClient, settings: Settings, aws: AwsClients
) -> None:
    # GIVEN rollups of epoch 1, then the topic deleted and recreated (epoch 2)
    put_topic(client, "jobs")
    publish(settings, aws, {"jobs": 1})
    assert client.delete(path("jobs")).status_code in (200, 204)
    put_topic(client, "jobs")
    # THEN the old windows are not reported as the new topic's
    body = rollups(client, "jobs")
    assert body["epoch"] == 2 and body["rollups"] == [] and body["through_seq"] == 0


def test_absent_topic_is_404(client: TestClient, settings: Settings, aws: AwsClients) -> None:
    publish(settings, aws, {"ghost": 1})
    assert_error(client.get(path("ghost", "/rollups")), 404, "topic_not_found")


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"granularity": "day"}, "granularity"),
        ({"from_ms": "soon"}, "from_ms"),
        ({"to_ms": "-5"}, "to_ms"),
        ({"from_ms": "10", "to_ms": "5"}, "to_ms"),
    ],
)
def test_invalid_query_is_400(client: TestClient, params: dict[str, str], field: str) -> None:
    put_topic(client, "jobs")
    err = assert_error(client.get(path("jobs", "/rollups"), params=params), 400, "invalid_request")
    assert err["detail"] == {"field": field}


def test_invalid_topic_name_is_400(client: TestClient) -> None:
    assert_error(client.get(path("-bad", "/rollups")), 400, "invalid_request")


def test_needs_read_scope_on_the_topic(make_client: MakeClient) -> None:
    c = make_client(api_keys_raw="full-key,writer:w,tenant-reader:read:tenant42:")
    full = {"authorization": "Bearer full-key"}
    ok(c.put(path("jobs"), json={}, headers=full), 201)
    assert_error(c.get(path("jobs", "/rollups")), 401, "unauthorized")
    assert_error(
        c.get(path("jobs", "/rollups"), headers={"authorization": "Bearer writer"}),
        403,
        "forbidden",
    )
    outside = {"authorization": "Bearer tenant-reader"}
    assert_error(c.get(path("jobs", "/rollups"), headers=outside), 403, "forbidden")
    assert ok(c.get(path("jobs", "/rollups"), headers=full))["rollups"] == []
