"""Router forwarding in the engine against in-process moto: preserved $node/$tag, the
filter, a durable cursor (a new engine resumes without duplicates), exactly_once replays,
backpressure from a rejecting dest, and the loop-breaker on allow_cycle routers."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from headwater.engine.log import LogEngine
from headwater.engine.records import NewRecord
from headwater.engine.routers import RouterEngine
from headwater.engine.values import AppendRequest, DiffRequest
from headwater.settings import Settings
from headwater.storage.blobs import S3BlobStore
from headwater.storage.bootstrap import ensure_resources
from headwater.storage.clients import AwsClients
from headwater.storage.dynamo import DynamoHeadStore, DynamoLogTailStore
from headwater.storage.ports import RouterItem
from headwater.storage.routers import DynamoRouterStore

pytestmark = pytest.mark.api


def _routers(settings: Settings) -> RouterEngine:
    clients = AwsClients.create(settings)
    ensure_resources(settings, clients)
    blobs = S3BlobStore(clients.s3, settings.bucket_name)
    engine = LogEngine(
        DynamoHeadStore(clients.dynamodb, settings),
        DynamoLogTailStore(clients.dynamodb, settings, blobs),
        blobs,
        settings,
    )
    return RouterEngine(engine, DynamoRouterStore(clients.dynamodb, settings))


def _rec(i: int, node: str | None = None, tag: str | None = None) -> NewRecord:
    return NewRecord({"i": i}, node=node, tag=tag, size=32)


async def _read(r: RouterEngine, topic: str) -> list[dict[str, Any]]:
    res = await r.log.diff(topic, DiffRequest(limit=1000, include_tags=True))
    return [json.loads(b) for b in res.records]


async def _drain(r: RouterEngine) -> None:
    for _ in range(50):
        if not await r.run_pass():
            return
    raise AssertionError("forwarding did not settle")


def test_forwarding_preserves_node_and_tag_filters_and_resumes(
    moto: None, resource_prefix: str
) -> None:
    settings = Settings(resource_prefix=resource_prefix)

    async def scenario() -> None:
        # GIVEN a router src -> dst forwarding tags "pub:*"
        r1 = _routers(settings)
        await r1.log.put_topic("src", {})
        await r1.put(RouterItem("src->dst", "src", "dst", filter=("tag", "Glob", "pub:*")))
        await r1.log.append(
            "src",
            AppendRequest([_rec(1, "n1", "pub:a"), _rec(2, "n1", "priv"), _rec(3, None, "pub:b")]),
        )
        # WHEN the forwarder runs
        await _drain(r1)
        # THEN matching records arrive with their $node/$tag, unstamped (at_least_once)
        got = await _read(r1, "dst")
        assert [(g["data"], g.get("$node"), g.get("$tag"), g.get("meta")) for g in got] == [
            ({"i": 1}, "n1", "pub:a", None),
            ({"i": 3}, None, "pub:b", None),
        ]
        assert (await r1.get("src->dst")).forwarded_total == 2
        assert (await r1.get("src->dst")).cursor == 3
        r1.log.close()
        # AND a new engine over the same tables resumes from the durable cursor
        r2 = _routers(settings)
        await _drain(r2)
        assert len(await _read(r2, "dst")) == 2
        await r2.log.append("src", AppendRequest([_rec(4, "n2", "pub:c")]))
        await _drain(r2)
        got = await _read(r2, "dst")
        assert [g["data"]["i"] for g in got] == [1, 3, 4]
        assert got[-1]["$node"] == "n2"
        r2.log.close()

    asyncio.run(scenario())


def test_preserve_false_clears_node_and_tag(moto: None, resource_prefix: str) -> None:
    async def scenario() -> None:
        r = _routers(Settings(resource_prefix=resource_prefix))
        await r.log.put_topic("s", {})
        await r.put(RouterItem("s->d", "s", "d", preserve_node=False, preserve_tag=False))
        await r.log.append("s", AppendRequest([_rec(1, "n", "t")]))
        await _drain(r)
        [got] = await _read(r, "d")
        assert "$node" not in got and "$tag" not in got
        r.log.close()

    asyncio.run(scenario())


def test_exactly_once_replay_does_not_duplicate(moto: None, resource_prefix: str) -> None:
    async def scenario() -> None:
        r = _routers(Settings(resource_prefix=resource_prefix))
        await r.log.put_topic("s", {})
        await r.put(RouterItem("s->d", "s", "d", guarantee="exactly_once"))
        await r.log.append("s", AppendRequest([_rec(i) for i in range(1, 4)]))
        await _drain(r)
        got = await _read(r, "d")
        assert [g["meta"]["_topics_router"]["src_seq"] for g in got] == [1, 2, 3]
        assert got[0]["meta"]["_topics_router"]["router"] == "s->d"
        # WHEN the cursor is lost (a crash between the dest append and the cursor write)
        assert r.store.advance("s->d", 3, 1, 0)
        await r.log.append("s", AppendRequest([_rec(4)]))
        await _drain(r)
        # THEN the replay only adds the new record
        got = await _read(r, "d")
        assert [g["data"]["i"] for g in got] == [1, 2, 3, 4]
        assert (await r.get("s->d")).cursor == 4
        r.log.close()

    asyncio.run(scenario())


def test_rejecting_dest_backs_off_without_advancing(moto: None, resource_prefix: str) -> None:
    async def scenario() -> None:
        r = _routers(Settings(resource_prefix=resource_prefix))
        await r.log.put_topic("s", {})
        await r.log.put_topic("d", {"cap_records": 1, "discard": "reject"})
        await r.put(RouterItem("s->d", "s", "d"))
        await r.log.append("s", AppendRequest([_rec(1)]))
        await _drain(r)
        await r.log.append("s", AppendRequest([_rec(2)]))
        await _drain(r)
        # dest full: the first record went, the second waits; the cursor did not pass it
        assert [g["data"]["i"] for g in await _read(r, "d")] == [1]
        item = await r.get("s->d")
        assert (item.cursor, item.forwarded_total) == (1, 1)
        assert "s->d" in r._backoff
        # WHEN room is made, the retry forwards it
        await r.log.delete_records("d", 2, None)
        r._backoff.clear()
        await _drain(r)
        assert [g["data"]["i"] for g in await _read(r, "d")] == [2]
        assert (await r.get("s->d")).cursor == 2
        r.log.close()

    asyncio.run(scenario())


def test_allow_cycle_pair_does_not_loop(moto: None, resource_prefix: str) -> None:
    async def scenario() -> None:
        r = _routers(Settings(resource_prefix=resource_prefix))
        await r.log.put_topic("A", {})
        await r.log.put_topic("B", {})
        await r.put(RouterItem("A->B", "A", "B", allow_cycle=True))
        await r.put(RouterItem("B->A", "B", "A", allow_cycle=True))
        await r.log.append("A", AppendRequest([_rec(1, "a")]))
        await r.log.append("B", AppendRequest([_rec(2, "b")]))
        await _drain(r)
        a = await _read(r, "A")
        b = await _read(r, "B")
        assert sorted(g["data"]["i"] for g in a) == [1, 2]
        assert sorted(g["data"]["i"] for g in b) == [1, 2]
        # a reader on A as node "a" sees only b's record: no echo
        res = await r.log.diff("A", DiffRequest(nodes=frozenset({"a"})))
        assert [json.loads(x)["$node"] for x in res.records] == ["b"]
        [from_a] = [g for g in b if g["data"]["i"] == 1]
        assert from_a["meta"]["_topics_router"]["path"] == ["A", "B"]
        # AND the hop cap: a record that has already hopped MAX_HOPS times stops here
        trail = {"router": "x", "src_seq": 1, "key": "x:1", "path": [f"t{i}" for i in range(8)]}
        await r.log.append("A", AppendRequest([NewRecord(3, meta={"_topics_router": trail})]))
        await _drain(r)
        assert 3 not in [g["data"] for g in await _read(r, "B")]
        assert (await r.get("A->B")).cursor == 3
        r.log.close()

    asyncio.run(scenario())


def test_worker_forwards_on_wakeup(moto: None, resource_prefix: str) -> None:
    async def scenario() -> None:
        r = _routers(Settings(resource_prefix=resource_prefix))
        await r.log.put_topic("s", {})
        await r.put(RouterItem("s->d", "s", "d"))
        r.ensure_running()
        try:
            await r.log.append("s", AppendRequest([_rec(1)]))
            for _ in range(200):
                if await _read(r, "d"):
                    break
                await asyncio.sleep(0.02)
            assert [g["data"]["i"] for g in await _read(r, "d")] == [1]
        finally:
            await r.stop()
            r.log.close()

    asyncio.run(scenario())
