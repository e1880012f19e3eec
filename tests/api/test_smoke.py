from __future__ import annotations

import pytest
from starlette.testclient import TestClient

pytestmark = pytest.mark.api


def test_append_then_diff_round_trip(client: TestClient) -> None:
    # GIVEN a new topic created by a write
    r = client.post(
        "/v0/topics/jobs", json={"records": [{"data": {"a": 1}, "tag": "t1"}, {"data": None}]}
    )
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["seqs"] == [1, 2] and body["created"] is True and body["deduped"] is False
    # WHEN reading from the start
    d = client.post("/v0/topics/jobs/diff", json={"from_seq": 0, "include_tags": True})
    # THEN both records come back in order with $-metadata
    assert d.status_code == 200, d.text
    recs = d.json()["records"]
    assert [x["$seq"] for x in recs] == [1, 2]
    assert recs[0]["data"] == {"a": 1} and recs[0]["$tag"] == "t1"
    assert recs[1]["data"] is None and "$tag" not in recs[1]
    assert d.json()["caught_up"] is True and d.json()["next_from_seq"] == 2
