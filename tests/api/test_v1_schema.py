"""/v1 schema registry (§12) and filtered reads (§8.5) over HTTP: installs and updates, appends
validated and keyed by the schema, reads promoted through the lens chain, filter= with its
scan cap, and a schema change made by another process refusing a stale prepared append."""

from __future__ import annotations

import json
from typing import Any

import pytest
from api_helpers import MakeClient
from starlette.testclient import TestClient

from headwater.durable import reads as ds_reads
from headwater.durable.offsets import encode_offset
from headwater.durable.schema import LENS_API_VERSION, REGISTRY_API_VERSION
from headwater.http import v1_reads

pytestmark = pytest.mark.api

JSON = {"Content-Type": "application/json"}
V1: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "n": {"type": "integer"},
        "ts": {"type": "string"},
        "user": {"type": "string"},
    },
    "required": ["name", "n"],
}
V2: dict[str, Any] = {
    "type": "object",
    "properties": {"title": {"type": "string"}, "n": {"type": "integer"}},
    "required": ["title", "n"],
}
SEARCH: dict[str, Any] = {
    "primaryTimestampField": "ts",
    "fields": {
        "ts": {"kind": "date", "bindings": [{"version": 1, "jsonPointer": "/ts"}], "column": True},
        "n": {"kind": "integer", "bindings": [{"version": 1, "jsonPointer": "/n"}], "column": True},
        "name": {
            "kind": "keyword",
            "bindings": [{"version": 1, "jsonPointer": "/name"}],
            "normalizer": "lowercase_v1",
            "exact": True,
        },
    },
}


def url(name: str, sub: str = "") -> str:
    return f"/v1/stream/{name}" + (f"/{sub}" if sub else "")


def lens(name: str, ops: list[dict[str, Any]], frm: int = 1) -> dict[str, Any]:
    return {"apiVersion": LENS_API_VERSION, "schema": name, "from": frm, "to": frm + 1, "ops": ops}


def post(client: TestClient, name: str, values: list[Any], **h: str) -> Any:
    return client.post(url(name), content=json.dumps(values), headers={**JSON, **h})


def install(client: TestClient, name: str, body: dict[str, Any], status: int = 200) -> Any:
    r = client.post(url(name, "_schema"), content=json.dumps(body), headers=JSON)
    assert r.status_code == status, r.text
    return r.json()


def read(client: TestClient, name: str, **params: str) -> Any:
    r = client.get(url(name), params={"offset": "-1", **params})
    assert r.status_code == 200, r.text
    return r


def test_registry_lifecycle_install_validate_update_promote(client: TestClient) -> None:
    assert client.put(url("s"), headers=JSON).status_code == 201
    # GIVEN a stream without a schema: an empty registry
    empty = client.get(url("s", "_schema")).json()
    assert empty["apiVersion"] == REGISTRY_API_VERSION and empty["currentVersion"] == 0
    # WHEN the first schema is installed on the empty stream
    reg = install(client, "s", {"schema": V1})
    assert reg["currentVersion"] == 1
    assert reg["boundaries"] == [{"offset": encode_offset(1, 0), "version": 1}]
    # THEN appends are validated: a bad one is refused whole, and nothing is written
    r = post(client, "s", [{"name": "a", "n": 1}, {"name": "b"}])
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_schema"
    assert read(client, "s").json() == []
    assert post(client, "s", [{"name": "a", "n": 1}, {"name": "b", "n": 2}]).status_code == 204
    # ...a later schema needs a lens, and is recorded at the current end offset
    install(client, "s", {"schema": V2}, status=400)
    rename = [{"op": "rename", "from": "/name", "to": "/title"}]
    reg = install(client, "s", {"schema": V2, "lens": lens("s", rename)})
    assert reg["currentVersion"] == 2
    assert reg["boundaries"][-1] == {"offset": encode_offset(1, 2), "version": 2}
    # ...new appends must match version 2
    assert post(client, "s", [{"name": "c", "n": 3}]).status_code == 400
    assert post(client, "s", [{"title": "c", "n": 3}]).status_code == 204
    # ...and reads promote version-1 entries through the lens
    want = [{"title": "a", "n": 1}, {"title": "b", "n": 2}, {"title": "c", "n": 3}]
    assert read(client, "s").json() == want
    # ...also from the middle, and through a process that never saw the update
    assert read(client, "s", offset=encode_offset(1, 1)).json() == want[1:]
    # ...the first schema cannot go on a stream with entries, nor on a byte stream
    assert client.put(url("full"), headers=JSON, content="[1]").status_code == 201
    install(client, "full", {"schema": V1}, status=400)
    assert client.put(url("bytes"), headers={"Content-Type": "text/plain"}).status_code == 201
    install(client, "bytes", {"schema": V1}, status=400)
    # ...a lens with the wrong versions is 409, unknown fields 400, a missing stream 404
    bad_lens = lens("s", rename, frm=1)
    assert install(client, "s", {"schema": V2, "lens": bad_lens}, status=409)
    assert install(client, "s", {"schema": V2, "fields": 1}, status=400)["error"]["code"]
    assert client.get(url("nope", "_schema")).status_code == 404
    r = client.post(url("s", "_schema"), content="{", headers=JSON)
    assert r.status_code == 400


def test_routing_keys_come_from_the_schema_pointer(client: TestClient) -> None:
    assert client.put(url("k"), headers=JSON).status_code == 201
    install(client, "k", {"schema": V1, "routingKey": {"jsonPointer": "/user", "required": True}})
    vals = [{"name": "a", "n": 1, "user": "u1"}, {"name": "b", "n": 2, "user": "u2"}]
    assert post(client, "k", vals).status_code == 204
    assert read(client, "k", key="u2").json() == [vals[1]]
    assert client.get(url("k") + "/pk/u1", params={"offset": "-1"}).json() == [vals[0]]
    # a required key that is missing, or a Stream-Key header, is 400
    assert post(client, "k", [{"name": "c", "n": 3}]).status_code == 400
    r = post(client, "k", [{"name": "c", "n": 3, "user": "u3"}], **{"Stream-Key": "x"})
    assert r.status_code == 400
    assert len(read(client, "k").json()) == 2


def test_a_schema_installed_by_another_process_refuses_a_stale_prepared_append(
    client: TestClient, make_client: MakeClient
) -> None:
    other = make_client()
    assert client.put(url("race"), headers=JSON).status_code == 201
    assert post(client, "race", [{"anything": 1}]).status_code == 204  # A knows: no schema
    # B installs a routing key (allowed on a non-empty stream), then A appends a value
    # that has none: A's append, prepared for "no schema", is refused and prepared again
    install(other, "race", {"routingKey": {"jsonPointer": "/user", "required": True}})
    r = post(client, "race", [{"anything": 2}])
    assert r.status_code == 400, r.text
    assert post(client, "race", [{"user": "u"}]).status_code == 204
    assert read(other, "race").json() == [{"anything": 1}, {"user": "u"}]
    assert read(other, "race", key="u").json() == [{"user": "u"}]


def test_filtered_reads(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    assert client.put(url("f"), headers=JSON).status_code == 201
    install(client, "f", {"schema": V1, "search": SEARCH})
    vals = [
        {"name": "Alpha" if i % 3 == 0 else "beta", "n": i, "ts": f"2026-01-01T00:00:{i:02d}Z"}
        for i in range(30)
    ]
    assert post(client, "f", vals).status_code == 204
    # exact (keyword fields normalize to lowercase), comparisons, has:, boolean logic
    r = read(client, "f", filter="name:alpha")
    assert r.json() == [v for v in vals if v["name"] == "Alpha"]
    assert r.headers["Stream-Next-Offset"] == encode_offset(1, 30)  # past the misses too
    assert 'filter=name%3Aalpha"' in r.headers["ETag"] or "filter=name:alpha" in r.headers["ETag"]
    got = read(client, "f", filter="n:>=10 AND n:<13 OR (name:alpha -n:<27)").json()
    assert [v["n"] for v in got] == [10, 11, 12, 27]
    assert len(read(client, "f", filter="has:ts").json()) == 30
    since = read(client, "f", filter="ts:>2026-01-01T00:00:27Z").json()
    assert [v["n"] for v in since] == [28, 29]
    # bad filters, fields outside search.fields, SSE, byte streams: 400
    for bad in ("name:", "user:x", "n:>abc", "(n:1"):
        r = client.get(url("f"), params={"offset": "-1", "filter": bad})
        assert r.status_code == 400, (bad, r.text)
    r = client.get(url("f"), params={"offset": "-1", "filter": "n:1", "live": "sse"})
    assert r.status_code == 400
    assert client.put(url("fb"), headers={"Content-Type": "text/plain"}).status_code == 201
    assert client.get(url("fb"), params={"offset": "-1", "filter": "n:1"}).status_code == 400
    # WHEN the scan cap is reached, the page says so and resumes where it stopped
    monkeypatch.setattr(ds_reads, "FILTER_SCAN_CAP", 200)
    monkeypatch.setattr(v1_reads, "FILTER_SCAN_CAP", 200)
    r = read(client, "f", filter="n:29")
    assert r.json() == [] and r.headers["Stream-Filter-Scan-Limit-Reached"] == "true"
    assert r.headers["Stream-Filter-Scan-Limit-Bytes"] == "200"
    scanned = int(r.headers["Stream-Filter-Scanned-Bytes"])
    assert 200 <= scanned < 300
    offset, found = r.headers["Stream-Next-Offset"], []
    for _ in range(30):
        r = read(client, "f", filter="n:29", offset=offset)
        found += r.json()
        if r.headers.get("Stream-Up-To-Date") == "true":
            break
        offset = r.headers["Stream-Next-Offset"]
    assert found == [vals[29]]


def test_filtered_long_poll_waits_past_entries_that_do_not_match(client: TestClient) -> None:
    assert client.put(url("lp"), headers=JSON).status_code == 201
    install(client, "lp", {"schema": V1, "search": SEARCH})
    assert post(client, "lp", [{"name": "x", "n": 1}, {"name": "x", "n": 2}]).status_code == 204
    r = client.get(
        url("lp"), params={"offset": "-1", "live": "long-poll", "timeout": "1s", "filter": "n:5"}
    )
    assert r.status_code == 204
    assert r.headers["Stream-Next-Offset"] == encode_offset(1, 2)
    assert post(client, "lp", [{"name": "y", "n": 5}]).status_code == 204
    r = client.get(
        url("lp"),
        params={"offset": encode_offset(1, 2), "live": "long-poll", "filter": "n:5"},
    )
    assert r.status_code == 200 and r.json() == [{"name": "y", "n": 5}]


def test_profiles_install_their_registry_and_shape_appends(client: TestClient) -> None:
    assert client.put(url("ev"), headers=JSON).status_code == 201
    body = {"apiVersion": "durable.streams/profile/v1", "profile": {"kind": "evlog"}}
    r = client.post(url("ev", "_profile"), content=json.dumps(body), headers=JSON)
    assert r.status_code == 200, r.text
    assert r.json()["profile"] == {"kind": "evlog"}
    assert client.get(url("ev", "_profile")).json()["profile"] == {"kind": "evlog"}
    # installing evlog installed its canonical schema and search registry
    reg = client.get(url("ev", "_schema")).json()
    assert reg["currentVersion"] == 1 and "requestId" in reg["search"]["fields"]
    # WHEN a raw log line is appended, it is stored as the canonical envelope, with its
    # secrets redacted and its routing key taken from requestId
    raw = {"requestId": "r1", "message": "boom", "status": 503, "password": "hunter2"}
    assert post(client, "ev", [raw, {"requestId": "r2", "message": "ok"}]).status_code == 204
    (stored,) = read(client, "ev", key="r1").json()
    assert stored["level"] == "error" and stored["message"] == "boom"
    assert stored["context"]["password"] != "hunter2"
    assert "hunter2" not in read(client, "ev").text
    # ...and filters over the installed search fields work
    assert [e["requestId"] for e in read(client, "ev", filter="level:error").json()] == ["r1"]
    # bad updates: unknown kind, a JSON-only kind on a byte stream, evlog after data: 400
    for name, upd in (
        ("ev", {"profile": {"kind": "nope"}}),
        ("ev", {"profile": {"kind": "evlog"}, "extra": 1}),
    ):
        r = client.post(url(name, "_profile"), content=json.dumps(upd), headers=JSON)
        assert r.status_code == 400, r.text
    assert client.put(url("txt"), headers={"Content-Type": "text/plain"}).status_code == 201
    r = client.post(url("txt", "_profile"), content=json.dumps(body), headers=JSON)
    assert r.status_code == 400
    assert client.put(url("used"), headers=JSON, content="[1]").status_code == 201
    metrics = {"profile": {"kind": "metrics"}}
    r = client.post(url("used", "_profile"), content=json.dumps(metrics), headers=JSON)
    assert r.status_code == 400
    assert client.get(url("used", "_profile")).json()["profile"] == {"kind": "generic"}
