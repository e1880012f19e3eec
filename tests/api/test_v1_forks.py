"""/v1 stream forks beyond what the public conformance suite checks (it runs in
tests/e2e/test_ds_conformance.py): inherited history served from sealed S3 segments, offsets
shared along a fork chain, reference counting through deletes and expiry, and the fork
headers' validation. The multi-process proof is in tests/e2e/test_ds_concurrency.py."""

from __future__ import annotations

import json

import pytest
from api_helpers import MakeClient
from starlette.testclient import TestClient

from headwater.durable.offsets import Offset, decode_offset, encode_offset
from headwater.durable.state import state_of, topic_of
from headwater.services import Services
from headwater.settings import Tiering

pytestmark = pytest.mark.api

EAGER = Tiering(
    seal_records=10, seal_age_ms=0, grace_ms=0, block_bytes=256, interval_ms=0, inline=False
)
JSON = {"Content-Type": "application/json"}


def url(name: str) -> str:
    return f"/v1/stream/{name}"


def services(client: TestClient) -> Services:
    svc: Services = client.app.state.services.get()  # type: ignore[attr-defined]
    return svc


def fork(client: TestClient, name: str, src: str, offset: str | None = None, **h: str) -> str:
    headers = {"Stream-Forked-From": url(src), **h}
    if offset is not None:
        headers["Stream-Fork-Offset"] = offset
    r = client.put(url(name), headers=headers)
    assert r.status_code == 201, r.text
    return r.headers["Stream-Next-Offset"]


def append(client: TestClient, name: str, values: list[object]) -> str:
    r = client.post(url(name), content=json.dumps(values), headers=JSON)
    assert r.status_code == 204, r.text
    return r.headers["Stream-Next-Offset"]


def read_all(client: TestClient, name: str, offset: str = "-1") -> list[object]:
    out: list[object] = []
    for _ in range(1000):
        r = client.get(url(name), params={"offset": offset})
        assert r.status_code == 200, r.text
        out.extend(r.json())
        if r.headers.get("Stream-Up-To-Date") == "true":
            return out
        offset = r.headers["Stream-Next-Offset"]
    raise AssertionError("paging did not end")


def refs(client: TestClient, name: str) -> int:
    head = services(client).engine.heads.get(topic_of(name))
    state = state_of(head)
    assert state is not None
    return state.refs


def test_a_fork_reads_sealed_source_history_and_seals_its_own(make_client: MakeClient) -> None:
    c = make_client(tiering=EAGER)
    assert c.put(url("src"), headers=JSON).status_code == 201
    for i in range(0, 40, 5):
        append(c, "src", [{"s": k} for k in range(i, i + 5)])
    # GIVEN the source's history sealed into S3 segments and trimmed from DynamoDB
    services(c).upkeep.run(topic_of("src"))
    src_head = services(c).engine.heads.get(topic_of("src"))
    assert src_head is not None and src_head.sealed_through == 40
    assert src_head.trimmed_through == 40
    # WHEN a fork is taken mid-history and writes and seals entries of its own
    at = encode_offset(src_head.epoch, 25)
    fork(c, "f", "src", at)
    for i in range(0, 30, 3):
        append(c, "f", [{"f": k} for k in range(i, i + 3)])
    services(c).upkeep.run(topic_of("f"))
    f_head = services(c).engine.heads.get(topic_of("f"))
    assert f_head is not None and f_head.head_seq == 55 and f_head.sealed_through == 55
    # THEN it reads the source's first 25 entries, then its own 30, across both boundaries,
    # through a fresh process too (nothing from caches)
    want = [{"s": k} for k in range(25)] + [{"f": k} for k in range(30)]
    assert read_all(c, "f") == want
    fresh = make_client(tiering=EAGER)
    assert read_all(fresh, "f") == want
    # ...and reads from any point in between, by the source's offsets or its own
    assert read_all(fresh, "f", encode_offset(src_head.epoch, 20)) == want[20:]
    assert read_all(fresh, "f", encode_offset(f_head.epoch, 40)) == want[40:]
    # ...while the source is untouched
    assert read_all(fresh, "src") == [{"s": k} for k in range(40)]


def test_offsets_are_shared_along_a_fork_chain(client: TestClient) -> None:
    # GIVEN a source in its third incarnation (epoch 3), so its offsets differ from a fork's
    for _ in range(3):
        assert client.put(url("root"), headers=JSON).status_code == 201
        assert client.delete(url("root")).status_code == 204
    assert client.put(url("root"), headers=JSON).status_code == 201
    after_b = append(client, "root", ["a", "b"])
    append(client, "root", ["c"])
    root = decoded(after_b)
    assert root.epoch == 4
    # WHEN l1 forks it after "b" and l2 forks l1 at its tail
    fork(client, "l1", "root", after_b)
    append(client, "l1", ["x"])
    tail = fork(client, "l2", "l1")
    assert decoded(tail).seq == 3
    # THEN root's offsets up to the fork point read the same position on both forks
    assert read_all(client, "l2", encode_offset(4, 1)) == ["b", "x"]
    assert read_all(client, "l1", encode_offset(4, 2)) == ["x"]
    # ...but a root offset past the fork point names an entry no fork holds: 400
    r = client.get(url("l2"), params={"offset": encode_offset(4, 3)})
    assert r.status_code == 400, r.text
    # ...and a fork offset must be one of the source's: another incarnation's is 400
    r = client.put(
        url("l3"),
        headers={"Stream-Forked-From": url("root"), "Stream-Fork-Offset": encode_offset(3, 0)},
    )
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request"


def decoded(text: str) -> Offset:
    off = decode_offset(text)
    assert isinstance(off, Offset)
    return off


def test_a_deleted_source_lives_until_its_last_fork_goes(client: TestClient) -> None:
    assert client.put(url("a"), headers=JSON).status_code == 201
    append(client, "a", [1])
    fork(client, "b", "a")
    append(client, "b", [2])
    fork(client, "c", "b")
    append(client, "c", [3])
    fork(client, "c2", "b")
    assert (refs(client, "a"), refs(client, "b")) == (1, 2)
    # WHEN the root and the middle are deleted
    assert client.delete(url("a")).status_code == 204
    assert client.delete(url("b")).status_code == 204
    # THEN both answer 410 everywhere, their names stay taken, and they cannot be forked
    for name in ("a", "b"):
        assert client.head(url(name)).status_code == 410
        r = client.get(url(name), params={"offset": "-1"})
        assert r.status_code == 410 and r.json()["error"]["code"] == "stream_gone"
        assert client.post(url(name), content="[9]", headers=JSON).status_code == 410
        assert client.delete(url(name)).status_code == 410
        assert client.put(url(name), headers=JSON).status_code == 409
        r = client.put(url("z"), headers={"Stream-Forked-From": url(name)})
        assert r.status_code == 409 and r.json()["error"]["code"] == "fork_source_deleted"
    # ...and the leaves read their whole history through them
    assert read_all(client, "c") == [1, 2, 3]
    assert read_all(client, "c2") == [1, 2]
    # WHEN one leaf goes, the middle still has the other
    assert client.delete(url("c")).status_code == 204
    assert client.head(url("b")).status_code == 410 and refs(client, "b") == 1
    # WHEN the last leaf goes, the chain is reclaimed to the root, and the names are free
    assert client.delete(url("c2")).status_code == 204
    for name in ("a", "b", "c", "c2"):
        assert client.head(url(name)).status_code == 404
    assert client.put(url("a"), headers=JSON).status_code == 201
    assert read_all(client, "a") == []


def test_an_expired_source_is_kept_for_its_forks(client: TestClient) -> None:
    streams = services(client).streams
    real = streams.clock
    assert client.put(url("ttl"), headers={**JSON, "Stream-TTL": "60"}).status_code == 201
    append(client, "ttl", ["kept"])
    # A fork inherits its source's TTL unless it sets its own
    fork(client, "inherits", "ttl")
    assert client.head(url("inherits")).headers["Stream-TTL"] == "60"
    fork(client, "own", "ttl", **{"Stream-TTL": "7200"})
    assert client.head(url("own")).headers["Stream-TTL"] == "7200"
    # WHEN two minutes pass without a touch
    streams.clock = lambda: real() + 120_000
    try:
        # THEN the source and the inheriting fork have expired, the source is kept (410,
        # its name held: 409) for the fork that still reads it
        assert client.head(url("inherits")).status_code == 404
        assert client.head(url("ttl")).status_code == 410
        assert client.put(url("ttl"), headers=JSON).status_code == 409
        assert read_all(client, "own") == ["kept"]
        # ...recreating the expired fork gives back its reference
        assert client.put(url("inherits"), headers=JSON).status_code == 201
        assert refs(client, "ttl") == 1
        # ...and deleting the last fork reclaims the source
        assert client.delete(url("own")).status_code == 204
        assert client.head(url("ttl")).status_code == 404
        assert client.put(url("ttl"), headers=JSON).status_code == 201
    finally:
        streams.clock = real


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"Stream-Fork-Offset": "-1"}, 400),  # no Stream-Forked-From
        ({"Stream-Fork-Sub-Offset": "0"}, 400),
        ({"Stream-Forked-From": "/v0/topics/src"}, 400),  # not a /v1/stream/ path
        ({"Stream-Forked-From": "/v1/stream/missing"}, 404),
        ({"Stream-Forked-From": "/v1/stream/src", "Stream-Fork-Offset": "42"}, 400),
        (
            {"Stream-Forked-From": "/v1/stream/src", "Stream-Fork-Offset": "0000000000000001_0"},
            400,
        ),
        (
            {
                "Stream-Forked-From": "/v1/stream/src",
                "Stream-Fork-Offset": "0000000000000000_0000000000000001",
            },
            400,
        ),
        ({"Stream-Forked-From": "/v1/stream/src", "Content-Type": "text/plain"}, 409),
    ],
)
def test_fork_header_validation(client: TestClient, headers: dict[str, str], status: int) -> None:
    assert client.put(url("src"), headers=JSON).status_code == 201
    append(client, "src", [1, 2])
    r = client.put(url("bad"), headers=headers)
    assert r.status_code == status, r.text
    assert set(r.json()) == {"error"}
    # a refused fork takes no reference and creates nothing
    assert refs(client, "src") == 0
    assert client.head(url("bad")).status_code == 404


def test_fork_from_an_absolute_url_and_at_the_start(client: TestClient) -> None:
    assert client.put(url("u"), headers=JSON).status_code == 201
    append(client, "u", [1, 2, 3])
    fork(client, "u0", "u", "-1")
    assert read_all(client, "u0") == []
    r = client.put(
        url("u1"),
        headers={
            "Stream-Forked-From": "http://example.test/v1/stream/u",
            "Stream-Fork-Sub-Offset": "0",
        },
    )
    assert r.status_code == 201 and read_all(client, "u1") == [1, 2, 3]
    # JSON sub-offsets count messages from the fork offset
    fork(client, "u2", "u", "-1", **{"Stream-Fork-Sub-Offset": "2"})
    assert read_all(client, "u2") == [1, 2]
    r = client.put(
        url("u3"),
        headers={
            "Stream-Forked-From": url("u"),
            "Stream-Fork-Offset": "-1",
            "Stream-Fork-Sub-Offset": "4",
        },
    )
    assert r.status_code == 400
