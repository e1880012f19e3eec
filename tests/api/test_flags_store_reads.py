"""The manifest store's read path against moto, counting S3 calls: a publish wakes every
follower at once and they must share one read per file, not one each; the files a publish
wrote are already cached; and a cold reader of many files takes them from the tree's `*`
tarball (written at publish) in one read instead of one read per file."""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter
from typing import Any

import pytest
from api_helpers import counting_engine

from headwater.engine.log import LogEngine
from headwater.flags.closure import FlagSelection
from headwater.flags.lint import check
from headwater.flags.store import ManifestStore
from headwater.settings import Settings


def s3_counting(engine: LogEngine, calls: Counter[str]) -> None:
    def count(event_name: str, **_: Any) -> None:
        calls[event_name.split(".")[-1]] += 1

    engine.blobs._s3.meta.events.register("before-call.s3.*", count)  # type: ignore[attr-defined]


def tree_of(n_flags: int, tag: str) -> dict[str, bytes]:
    files = {"namespace.toml": f'name = "{tag}"\n'.encode(), "segments/staff.toml": b"x = 1\n"}
    for i in range(n_flags):
        files[f"flags/f{i}.toml"] = f'segment = "staff"\nv = "{tag}-{i}"\n'.encode()
    return files


@pytest.fixture
def engine(settings: Settings) -> LogEngine:
    return counting_engine(settings, Counter())


def test_concurrent_readers_share_one_read_and_publish_seeds_the_cache(engine: LogEngine) -> None:
    calls: Counter[str] = Counter()
    s3_counting(engine, calls)

    async def run() -> None:
        writer = ManifestStore(engine)
        tree = tree_of(3, "a")
        await writer.publish("acme", "billing", tree, check(tree))
        digest = hashlib.sha256(tree["flags/f1.toml"]).digest()
        # GIVEN a process that did not publish (empty caches)
        reader = ManifestStore(engine)
        calls.clear()
        # WHEN 50 followers ask for the same new file at once
        results = await asyncio.gather(
            *(reader.contents("acme", "billing", [digest]) for _ in range(50))
        )
        # THEN one GetObject served them all, with the right bytes
        assert calls["GetObject"] == 1
        assert all(r == {digest: tree["flags/f1.toml"]} for r in results)
        # AND the publishing process needs no read at all for what it just wrote
        calls.clear()
        assert (await writer.contents("acme", "billing", [digest]))[digest] == tree["flags/f1.toml"]
        assert calls["GetObject"] == 0

    asyncio.run(run())


def test_a_cold_reader_of_many_files_reads_the_tree_tarball_once(engine: LogEngine) -> None:
    calls: Counter[str] = Counter()
    s3_counting(engine, calls)

    async def run() -> None:
        tree = tree_of(40, "b")
        writer = ManifestStore(engine)
        result = await writer.publish("acme", "growth", tree, check(tree))
        await writer.settle()  # the tree's tarball is written right after the commit
        reader = ManifestStore(engine)
        head = await reader.head("acme", "growth")
        assert head is not None and head.ext == result.closure_hash
        index = await reader.index("acme", "growth", head.ext)
        calls.clear()
        # WHEN a fresh process reads the whole tree (GET manifest)
        assert await reader.tree("acme", "growth", index) == tree
        # THEN it read the `*` tarball, not 42 files
        assert calls["GetObject"] == 1
        # AND a narrow closure's tarball is then built from cached files: one lookup of a
        # stored copy (absent), no file read, and one write of the built tarball
        calls.clear()
        closure = reader.closure(index, FlagSelection.of(["f1", "f2"]))
        snap = await reader.closure_tarball("acme", "growth", index, closure)
        assert snap.body and (calls["GetObject"], calls["PutObject"]) == (1, 1)

    asyncio.run(run())


def test_a_cold_reader_of_a_few_files_reads_just_those(engine: LogEngine) -> None:
    calls: Counter[str] = Counter()
    s3_counting(engine, calls)

    async def run() -> None:
        tree = tree_of(40, "c")
        await ManifestStore(engine).publish("acme", "few", tree, check(tree))
        reader = ManifestStore(engine)
        wanted = [hashlib.sha256(tree[f"flags/f{i}.toml"]).digest() for i in range(3)]
        calls.clear()
        got = await reader.contents("acme", "few", wanted, tree_hash=None)
        assert calls["GetObject"] == 3 and len(got) == 3

    asyncio.run(run())


def test_a_stale_head_hint_never_misreports_a_publish(settings: Settings) -> None:
    # Two engines over the same tables stand in for two processes; each knows only its own
    # last commit, so A's hint is stale once B has published.
    a = ManifestStore(counting_engine(settings, Counter()))
    b = ManifestStore(counting_engine(settings, Counter()))

    async def run() -> None:
        t1, t2, t3 = tree_of(2, "one"), tree_of(2, "two"), tree_of(2, "three")
        first = await a.publish("acme", "stale", t1, check(t1))
        second = await b.publish("acme", "stale", t2, check(t2))
        assert (first.version, second.version) == (1, 2)
        # A (hint: version 1) publishes B's tree: identical to the current one, nothing new
        same = await a.publish("acme", "stale", t2, check(t2))
        assert (same.version, same.created) == (2, False)
        # A publishes its own old tree again: a new version on top of B's, not a settle
        back = await a.publish("acme", "stale", t1, check(t1))
        assert (back.version, back.prev_version, back.created) == (3, 2, True)
        # and B, whose hint is now stale, publishes something new: version 4
        new = await b.publish("acme", "stale", t3, check(t3))
        assert (new.version, new.prev_version, new.created) == (4, 3, True)
        head = await a.head("acme", "stale")
        assert head is not None
        listed = [(v.version, v.tree_hash) for v in await a.versions(head)]
        hashes = [
            (await a.publish("acme", "x", t, check(t))).closure_hash for t in (t1, t2, t1, t3)
        ]
        assert listed == list(zip([1, 2, 3, 4], hashes, strict=True))

    asyncio.run(run())
