"""The incremental indexer (index/build.py) over a real stream's sealed segments: it builds one
companion per segment next to it, oldest first, publishes coverage in the catalogue, writes
exactly what the pure per-segment build gives, resumes where it stopped, lets two passes race
harmlessly, resets coverage when the search config changes, and eviction deletes companions
with their segments."""

from __future__ import annotations

import json
from typing import Any

import pytest
from api_helpers import MakeClient
from starlette.testclient import TestClient
from test_v1_search import EAGER, JSON, docs, make_stream, services, url

from headwater.durable.state import state_of, topic_of
from headwater.engine.ports import Head, SegmentItem
from headwater.engine.segment import companion_key
from headwater.index.build import build_segment, index_stream
from headwater.index.companion import Companion
from headwater.index.local import LocalIndexer
from headwater.index.plan import IndexPlan
from headwater.settings import Settings
from headwater.storage.clients import AwsClients
from headwater.storage.index_catalogue import DynamoIndexCatalogue

pytestmark = pytest.mark.api


def _head_and_registry(c: TestClient, name: str) -> tuple[Head, dict[str, Any]]:
    svc = services(c)
    head = svc.engine.heads.get(topic_of(name))
    assert head is not None
    state = state_of(head)
    assert state is not None
    reg = c.portal.call(svc.streams.registry, name, state.registry_key)  # type: ignore[union-attr]
    return head, dict(reg)


def _sealed_stream(c: TestClient, name: str, n: int, per_segment: int = 20) -> None:
    """A searchable stream of `n` entries sealed into segments of `per_segment`."""
    values = docs(n)
    make_stream(c, name, values[:per_segment])
    services(c).upkeep.run(topic_of(name))
    for i in range(per_segment, n, per_segment):
        r = c.post(url(name), content=json.dumps(values[i : i + per_segment]), headers=JSON)
        assert r.status_code == 204, r.text
        services(c).upkeep.run(topic_of(name))


def _segments(c: TestClient, head: Head) -> list[SegmentItem]:
    return services(c).upkeep.segments.after(head, 0, 1000)


def _pass(c: TestClient, aws: AwsClients, settings: Settings, name: str, **kw: Any) -> Any:
    head, reg = _head_and_registry(c, name)
    svc = services(c)
    return index_stream(
        head,
        reg,
        segments=svc.upkeep.segments,
        blobs=svc.engine.blobs,
        catalogue=DynamoIndexCatalogue(aws.dynamodb, settings),
        now_ms=1,
        **kw,
    )


def test_builds_each_sealed_segment_once_in_order_and_publishes_coverage(
    make_client: MakeClient, aws: AwsClients, settings: Settings
) -> None:
    # GIVEN a searchable stream whose first 100 entries are sealed in several segments
    c = make_client(tiering=EAGER)
    _sealed_stream(c, "ix", 100)
    head, reg = _head_and_registry(c, "ix")
    segs = _segments(c, head)
    assert len(segs) >= 3
    # WHEN one pass may build only two segments
    first = _pass(c, aws, settings, "ix", max_segments=2)
    # THEN it built the two oldest and published them, and nothing else
    assert first.built == 2 and first.reset and not first.lost_race
    cat = DynamoIndexCatalogue(aws.dynamodb, settings)
    got = cat.get(head.topic, head.epoch)
    assert got is not None and got.covered_through == segs[1].last_seq and got.segments == 2
    assert got.generation == IndexPlan.from_registry(reg).generation  # type: ignore[union-attr]
    # ...and the next pass resumes after them and covers the rest
    rest = _pass(c, aws, settings, "ix")
    assert rest.built == len(segs) - 2 and not rest.reset
    got = cat.get(head.topic, head.epoch)
    assert got is not None and got.covered_through == segs[-1].last_seq
    assert got.segments == len(segs)
    # ...each object is exactly the pure build of its segment, next to the segment
    plan = IndexPlan.from_registry(reg)
    assert plan is not None
    total = 0
    for seg in segs:
        body = aws.s3.get_object(Bucket=settings.bucket_name, Key=companion_key(seg.key))[
            "Body"
        ].read()
        blob = aws.s3.get_object(Bucket=settings.bucket_name, Key=seg.key)["Body"].read()
        assert body == build_segment(plan, reg, blob, seg.deleted)
        comp = Companion.from_bytes(body)
        assert comp.seqs() == list(range(seg.first_seq, seg.last_seq + 1))
        total += len(body)
    assert got.bytes == total
    # ...and _index_status reports the coverage
    status = c.get(url("ix", "_index_status")).json()
    assert status["bundled_companions"]["covered_segment_count"] == len(segs)
    assert status["bundled_companions"]["lag_segments"] == 0
    assert status["bundled_companions"]["bytes_at_rest"] == str(total)
    assert {e["stale_configuration"] for e in status["exact_indexes"]} == {False}
    # ...and a pass with nothing new builds nothing
    assert _pass(c, aws, settings, "ix").built == 0


def test_two_racing_passes_publish_once_and_a_config_change_resets_coverage(
    make_client: MakeClient, aws: AwsClients, settings: Settings
) -> None:
    c = make_client(tiering=EAGER)
    _sealed_stream(c, "ixr", 60)
    head, reg = _head_and_registry(c, "ixr")
    segs = _segments(c, head)
    cat = DynamoIndexCatalogue(aws.dynamodb, settings)
    # GIVEN a pass whose publish is overtaken by another pass between its read and its write
    real_publish = cat.publish
    raced: list[Any] = []

    def overtaken(topic: str, epoch: int, expected: Any, new: Any) -> bool:
        if not raced and expected is not None and new.segments > expected.segments:
            raced.append(_pass(c, aws, settings, "ixr"))  # the other pass wins
        return real_publish(topic, epoch, expected, new)

    cat.publish = overtaken  # type: ignore[method-assign]
    svc = services(c)
    lost = index_stream(
        head, reg, segments=svc.upkeep.segments, blobs=svc.engine.blobs, catalogue=cat, now_ms=2
    )
    # THEN exactly one of them published, and coverage is what one full pass gives
    assert raced and raced[0].built == len(segs) and not raced[0].lost_race
    assert lost.lost_race
    got = DynamoIndexCatalogue(aws.dynamodb, settings).get(head.topic, head.epoch)
    assert got is not None and got.segments == len(segs)
    # WHEN the search config changes (a field made exact): a new plan generation
    new_search = json.loads(json.dumps(reg["search"]))
    new_search["fields"]["ms"]["exact"] = True
    r = c.post(url("ixr", "_schema"), content=json.dumps({"search": new_search}), headers=JSON)
    assert r.status_code == 200, r.text
    stale = c.get(url("ixr", "_index_status")).json()
    assert stale["exact_indexes"] and all(e["stale_configuration"] for e in stale["exact_indexes"])
    assert stale["bundled_companions"]["covered_segment_count"] == 0
    again = _pass(c, aws, settings, "ixr")
    # THEN coverage restarts under the new generation and every segment is rebuilt
    assert again.reset and again.built == len(segs)
    assert again.generation != got.generation
    _head2, reg2 = _head_and_registry(c, "ixr")
    plan2 = IndexPlan.from_registry(reg2)
    assert plan2 is not None and plan2.generation == again.generation


def test_eviction_deletes_companions_with_their_segments(
    make_client: MakeClient, aws: AwsClients, settings: Settings
) -> None:
    c = make_client(tiering=EAGER)
    _sealed_stream(c, "ixe", 60)
    head, _reg = _head_and_registry(c, "ixe")
    assert _pass(c, aws, settings, "ixe").built >= 2
    segs = _segments(c, head)
    keys = [companion_key(s.key) for s in segs]

    def exists(key: str) -> bool:
        resp = aws.s3.list_objects_v2(Bucket=settings.bucket_name, Prefix=key)
        return any(o["Key"] == key for o in resp.get("Contents", []))

    assert all(exists(k) for k in keys)
    # WHEN the upkeep drops the segments (the engine's _drop: eviction and collection)
    upkeep = services(c).upkeep
    upkeep._drop(head, [_unit(s) for s in segs], _report(head.topic))  # type: ignore[arg-type]
    # THEN no companion is left behind
    assert not any(exists(k) for k in keys)


def _unit(seg: SegmentItem) -> Any:
    from headwater.engine.tiering import _Unit

    return _Unit(seg.first_seq, seg.last_seq, seg.count, seg.bytes, seg.max_ts, segment=seg)


def _report(topic: str) -> Any:
    from headwater.engine.tiering import UpkeepReport

    return UpkeepReport(topic)


def test_the_local_indexer_sweeps_streams_and_no_other_protocols_heads(
    make_client: MakeClient, aws: AwsClients, settings: Settings
) -> None:
    # GIVEN a searchable sealed stream, and a topic whose ext another protocol owns (as a
    # flag namespace's is): not a stream's JSON state
    c = make_client(tiering=EAGER)
    _sealed_stream(c, "ix", 60)
    assert c.post("/v0/topics/other", json={"records": [{"data": 1}]}).status_code == 201
    svc = services(c)
    other = svc.engine.heads.get("other")
    assert other is not None and svc.engine.heads.put_ext(other, "v=3;h=abc")
    # WHEN the in-process indexer sweeps
    indexer = LocalIndexer(
        svc.engine, svc.upkeep.segments, DynamoIndexCatalogue(aws.dynamodb, settings)
    )
    got = indexer.sweep()
    # THEN it indexed the stream and read nothing else's state as a stream's
    assert list(got) == [topic_of("ix")] and got[topic_of("ix")].built >= 3
