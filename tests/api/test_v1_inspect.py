"""/v1 inspection descriptors against what a client sees: the `_index_status` / `_details`
validator and long-poll answer an append (protocol §7B: the wait ends when "the stream head
changes because new events are appended"), and `_details.stream.total_size_bytes` is the
logical payload bytes, the messages' bytes as a reader gets them back."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from api_helpers import MakeClient
from starlette.testclient import TestClient

from headwater import jsoncodec
from headwater.durable.state import topic_of
from headwater.services import Services
from headwater.settings import Tiering

pytestmark = pytest.mark.api

EAGER = Tiering(
    seal_records=10, seal_age_ms=0, grace_ms=0, block_bytes=256, interval_ms=0, inline=False
)
JSON = {"Content-Type": "application/json"}
BYTES = {"Content-Type": "application/octet-stream"}
SEARCH: dict[str, Any] = {
    "primaryTimestampField": "ts",
    "fields": {
        "ts": {"kind": "date", "bindings": [{"version": 1, "jsonPointer": "/ts"}], "column": True},
        "svc": {
            "kind": "keyword",
            "bindings": [{"version": 1, "jsonPointer": "/svc"}],
            "exact": True,
        },
    },
}


def url(name: str, sub: str = "") -> str:
    return f"/v1/stream/{name}" + (f"/{sub}" if sub else "")


def seal(c: TestClient, name: str) -> None:
    svc: Services = c.app.state.services.get()  # type: ignore[attr-defined]
    svc.upkeep.run(topic_of(name))


def entries(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [
        {"ts": 1_700_000_000_000 + i, "svc": f"svc-{i % 3}", "rk": f"k{i % 4}"}
        for i in range(start, start + n)
    ]


def searchable_stream(c: TestClient, name: str) -> None:
    assert c.put(url(name), headers=JSON).status_code == 201
    schema = {
        "schema": {"type": "object"},
        "search": SEARCH,
        "routingKey": {"jsonPointer": "/rk", "required": True},
    }
    r = c.post(url(name, "_schema"), content=json.dumps(schema), headers=JSON)
    assert r.status_code == 200, r.text


def total_size(c: TestClient, name: str) -> int:
    r = c.get(url(name, "_details"))
    assert r.status_code == 200, r.text
    size = r.json()["stream"]["total_size_bytes"]
    assert isinstance(size, str)
    return int(size)


# --------------------------------------------------------------------------- long-poll
@pytest.mark.parametrize("sub", ["_index_status", "_details"])
def test_long_poll_on_the_descriptor_is_answered_by_an_append(
    make_client: MakeClient, sub: str
) -> None:
    # GIVEN a searchable stream with sealed segments and a tail, and its descriptor's ETag
    c = make_client(tiering=EAGER)
    searchable_stream(c, "lp")
    r = c.post(url("lp"), content=json.dumps(entries(25)), headers=JSON)
    assert r.status_code == 204
    seal(c, "lp")
    r = c.get(url("lp", sub))
    assert r.status_code == 200, r.text
    tag = r.headers["etag"]
    assert c.get(url("lp", sub), headers={"If-None-Match": tag}).status_code == 304

    # WHEN an append lands while a client long-polls with that ETag
    def later() -> None:
        time.sleep(0.2)
        r = c.post(url("lp"), content=json.dumps(entries(1, start=25)), headers=JSON)
        assert r.status_code == 204

    t = threading.Thread(target=later)
    t0 = time.monotonic()
    t.start()
    r = c.get(
        url("lp", sub),
        params={"live": "long-poll", "timeout_ms": "3000"},
        headers={"If-None-Match": tag},
    )
    elapsed = time.monotonic() - t0
    t.join()
    # THEN the wait ends with the new descriptor and a new validator, well before the timeout
    assert r.status_code == 200, (r.status_code, elapsed)
    new_tag = r.headers["etag"]
    assert new_tag != tag and elapsed < 2.0
    # ...a plain conditional GET with the old ETag is not "not modified" either
    assert c.get(url("lp", sub), headers={"If-None-Match": tag}).status_code == 200
    # ...and with nothing new, the new ETag still gets 304 (now and at the long-poll timeout)
    assert c.get(url("lp", sub), headers={"If-None-Match": new_tag}).status_code == 304
    r = c.get(
        url("lp", sub),
        params={"live": "true", "timeout_ms": "50"},
        headers={"If-None-Match": new_tag},
    )
    assert r.status_code == 304


# --------------------------------------------------------------------------- total_size_bytes
def test_total_size_bytes_is_the_logical_payload_of_a_byte_stream(client: TestClient) -> None:
    # GIVEN a byte stream with three messages (1,038 bytes), one of them under a Stream-Key
    assert client.put(url("raw"), headers=BYTES).status_code == 201
    bodies = [b"a" * 300, b"b" * 500, b"c" * 238]
    for i, body in enumerate(bodies):
        headers = BYTES | ({"Stream-Key": "tenant-7"} if i == 1 else {})
        assert client.post(url("raw"), content=body, headers=headers).status_code == 204
    # THEN total_size_bytes is the bytes a reader gets back, no per-record framing or key
    read = client.get(url("raw"), params={"offset": "-1"})
    assert read.status_code == 200 and len(read.content) == 1038
    assert total_size(client, "raw") == 1038
    assert client.get(url("raw", "_details")).json()["stream"]["entries"] == 3


def test_total_size_bytes_is_the_logical_payload_of_a_keyed_json_stream(
    make_client: MakeClient,
) -> None:
    # GIVEN a JSON stream whose schema derives routing keys, partly sealed into segments
    c = make_client(tiering=EAGER)
    searchable_stream(c, "js")
    values = entries(27)
    for i in range(0, 27, 9):
        r = c.post(url("js"), content=json.dumps(values[i : i + 9]), headers=JSON)
        assert r.status_code == 204
    seal(c, "js")
    r = c.post(url("js"), content=json.dumps(entries(4, start=27)), headers=JSON)
    assert r.status_code == 204
    # THEN total_size_bytes is the sum of the stored messages' bytes (each value as the
    # server keeps and returns it), whether sealed or in the tail
    read = c.get(url("js"), params={"offset": "-1"})
    assert read.status_code == 200
    got = read.json()
    assert got == values + entries(4, start=27)
    want = sum(len(jsoncodec.dumps(v)) for v in got)
    details = c.get(url("js", "_details")).json()["stream"]
    assert details["entries"] == 31 and details["sealed_through"] != details["next_offset"]
    assert int(details["total_size_bytes"]) == want
