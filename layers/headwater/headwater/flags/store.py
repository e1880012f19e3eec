"""Manifest versions on the log engine and S3 (issue 8: the store the spec assumes).

A flag namespace `<tenant>/<slug>` is the engine topic `~flags/<tenant>/<slug>`: one record
per version, so a version number is the record's seq (1, 2, ...) and its `created_at` the
record's append time. The head's `ext` holds the current tree hash, so the current version
and tree cost one head read.

The tree of a version lives in S3, content-addressed under `flags/<tenant>/<slug>/`:
- `files/<sha256 hex>`: one object per distinct file content;
- `trees/<tree hex>.json`: the per-version files index (`manifest_version_files`): every
  path with its sha256 and size, and each file's segment references, which is all a closure
  or a closure hash needs (no file is parsed again after publish);
- `closures/<closure hex>.tar.gz`: closure tarballs; the `*` one (the whole tree) is written
  right after a publish commits, and is also where a cold reader takes many files from in
  one read; narrower ones are built on first request.

The tree hash is the closure hash of the whole tree (which is the `*` closure: lint allows
only namespace.toml, flags and segments). Everything is written before the commit that
references it, and the commit is one conditional append (a guard on the head's ext): an
identical tree settles to the current version, two racing publishers of different trees get
consecutive versions, and a crash leaves at most unreferenced objects.

Retention: the files index of version v is available while v is one of the newest
`versions` (100) or was created within `max_age_ms` (30 days): the larger of the two.
Versions outside it stay listed (`versions()`) but are not reconstructed (410 / snapshot /
resync). The horizon is logical: objects are content-addressed and shared between versions,
and are not deleted.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

import orjson

from headwater import jsoncodec
from headwater.engine import Admit, AppendRequest, LogEngine, NewRecord, Settle
from headwater.engine.ports import Head
from headwater.errors import TopicNotFound
from headwater.flags import names
from headwater.flags.closure import FlagSelection, closure_hash_of_digests, closure_paths
from headwater.flags.lint import Model
from headwater.flags.tarball import Snapshot, build_snapshot, read_snapshot, tar_size

log = logging.getLogger(__name__)

TOPIC_PREFIX = "~flags/"
HASH_PREFIX = "sha256:"
READ_BYTES = 1 << 20
BULK_FILES = 8  # more files missing than this: read the tree's `*` tarball instead

K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")


def topic_of(tenant: str, slug: str) -> str:
    return f"{TOPIC_PREFIX}{tenant}/{slug}"


def _prefix(tenant: str, slug: str) -> str:
    return f"flags/{tenant}/{slug}/"


def _hex(hash_text: str) -> str:
    return hash_text.removeprefix(HASH_PREFIX)


class Lru(Generic[K, V]):
    """A small thread-safe LRU bounded by a cost budget (bytes, roughly)."""

    def __init__(self, max_cost: int) -> None:
        self._max = max_cost
        self._cost = 0
        self._items: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            hit = self._items.get(key)
            if hit is None:
                return None
            self._items.move_to_end(key)
            return hit[0]

    def put(self, key: K, value: V, cost: int) -> None:
        if cost > self._max:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._cost -= old[1]
            self._items[key] = (value, cost)
            self._cost += cost
            while self._cost > self._max:
                _, (_, c) = self._items.popitem(last=False)
                self._cost -= c


@dataclass(frozen=True, slots=True)
class TreeIndex:
    """One version's files index: path -> (raw sha256, size), and the model closures need."""

    tree_hash: str
    files: Mapping[str, tuple[bytes, int]]
    model: Model

    @property
    def paths(self) -> frozenset[str]:
        return frozenset(self.files)

    @classmethod
    def build(cls, tree: Mapping[str, bytes], model: Model) -> TreeIndex:
        files = {p: (hashlib.sha256(c).digest(), len(c)) for p, c in tree.items()}
        tree_hash = closure_hash_of_digests({p: d for p, (d, _) in files.items()})
        return cls(tree_hash, files, model)

    def to_json(self) -> bytes:
        uses = {names.flag_path(k): sorted(v) for k, v in self.model.flag_uses.items()}
        uses |= {names.segment_path(k): sorted(v) for k, v in self.model.segment_uses.items()}
        body = {
            "tree_hash": self.tree_hash,
            "files": {p: [d.hex(), n] for p, (d, n) in sorted(self.files.items())},
            "uses": dict(sorted(uses.items())),
        }
        return jsoncodec.exact(orjson.dumps(body))

    @classmethod
    def from_json(cls, raw: bytes) -> TreeIndex:
        body = orjson.loads(raw)
        files = {p: (bytes.fromhex(d), int(n)) for p, (d, n) in body["files"].items()}
        flag_uses: dict[str, frozenset[str]] = {}
        segment_uses: dict[str, frozenset[str]] = {}
        for path in files:
            refs = frozenset(body["uses"].get(path, ()))
            flag, segment = names.flag_key_of(path), names.segment_name_of(path)
            if flag is not None:
                flag_uses[flag] = refs
            elif segment is not None:
                segment_uses[segment] = refs
        model = Model(frozenset(flag_uses), frozenset(segment_uses), flag_uses, segment_uses)
        return cls(str(body["tree_hash"]), files, model)

    def cost(self) -> int:
        return 200 + 120 * len(self.files)


@dataclass(frozen=True, slots=True)
class Closure:
    """A subscription's closure of one tree: path -> raw sha256, sizes, and its hash."""

    digests: Mapping[str, bytes]
    sizes: Mapping[str, int]
    hash: str

    @property
    def tar_size(self) -> int:
        return tar_size(self.sizes.values())


@dataclass(frozen=True, slots=True)
class VersionInfo:
    version: int
    created_ms: int
    tree_hash: str


@dataclass(frozen=True, slots=True)
class PublishResult:
    version: int
    prev_version: int | None
    closure_hash: str
    created: bool


@dataclass(frozen=True, slots=True)
class Retention:
    versions: int = 100
    max_age_ms: int = 30 * 86_400_000


class ManifestStore:
    def __init__(
        self,
        engine: LogEngine,
        retention: Retention | None = None,
        cache_bytes: int = 64 << 20,
    ) -> None:
        self.engine = engine
        self.retention = retention or Retention()
        self._indexes: Lru[str, TreeIndex] = Lru(cache_bytes // 4)
        self._blobs: Lru[str, bytes] = Lru(cache_bytes // 2)
        self._closures: Lru[tuple[str, str], Closure] = Lru(cache_bytes // 8)
        self._tarballs: Lru[str, Snapshot] = Lru(cache_bytes // 8)
        self._versions: Lru[tuple[str, int, int], VersionInfo] = Lru(4 << 20)
        self._known_blobs: Lru[str, bool] = Lru(1 << 20)
        self._inflight: dict[str, asyncio.Future[Any]] = {}
        self._background: set[asyncio.Task[None]] = set()

    # --- heads ----------------------------------------------------------------------------
    async def head(self, tenant: str, slug: str, *, consistent: bool = True) -> Head | None:
        """The namespace's head, None when it has no version."""
        head = await self.engine.head_of(topic_of(tenant, slug), consistent=consistent)
        if head is None or head.deleted or head.head_seq < 1 or not head.ext:
            return None
        return head

    # --- publish --------------------------------------------------------------------------
    async def publish(
        self, tenant: str, slug: str, tree: Mapping[str, bytes], model: Model
    ) -> PublishResult:
        """Commit a linted tree: a new version, or the current one when the tree is identical.

        The head this process already knows (its own last commit) saves a read: it only
        decides which files need uploading, and the commit's guard re-checks the real head
        (an identical tree settles to the current version whatever the hint said)."""
        index = TreeIndex.build(tree, model)
        topic = topic_of(tenant, slug)
        hint = self.engine.head_hint(topic)
        head = hint if hint is not None and not hint.deleted else await self.head(tenant, slug)
        if hint is None and head is not None and head.ext == index.tree_hash:
            # read just now, strongly: the tree is the current one, nothing to write
            return PublishResult(head.head_seq, _prev(head.head_seq), index.tree_hash, False)
        current = None
        if head is not None and head.ext:
            current = await self.index(tenant, slug, head.ext)
        index_key = _prefix(tenant, slug) + f"trees/{_hex(index.tree_hash)}.json"
        await asyncio.gather(
            self._put_files(tenant, slug, tree, current),
            self.engine.put_blob(index_key, index.to_json()),
        )
        self._indexes.put(index.tree_hash, index, index.cost())

        def guard(_head: Head, ext: str, head_seq: int) -> Admit | Settle:
            if ext == index.tree_hash:
                return Settle(note=head_seq)
            return Admit(ext=index.tree_hash, note=head_seq)

        record = _version_record(index)
        res = await self.engine.append(topic, AppendRequest([record], create=True, guard=guard))
        self._write_tree_tarball(tenant, slug, index.tree_hash, tree)
        before = int(res.note)
        if res.first_seq > res.last_seq or res.deduped or res.last_seq <= before:
            return PublishResult(before, _prev(before), index.tree_hash, False)
        return PublishResult(res.last_seq, before or None, index.tree_hash, True)

    def _write_tree_tarball(
        self, tenant: str, slug: str, tree_hash: str, tree: Mapping[str, bytes]
    ) -> None:
        """The `*` closure is the whole tree: its tarball is built from the bytes at hand and
        stored after the commit, off the publish's path, so a cold `*` snapshot is one read
        and a cold reader of many files takes them from it in one read. Best effort: until
        it exists (or if it never gets written, e.g. a frozen Lambda) readers build it or
        read files one by one."""
        if self._tarballs.get(tree_hash) is not None:
            return
        files = dict(tree)

        async def write() -> None:
            loop = asyncio.get_running_loop()
            snap = await loop.run_in_executor(None, build_snapshot, files)
            await self.engine.put_blob(self._tarball_key(tenant, slug, tree_hash), snap.body)
            self._tarballs.put(tree_hash, snap, len(snap.body) + 100)

        task = asyncio.get_running_loop().create_task(write())
        self._background.add(task)

        def done(t: asyncio.Task[None]) -> None:
            self._background.discard(t)
            if not t.cancelled() and t.exception() is not None:
                log.warning("tree tarball of %s/%s not stored: %r", tenant, slug, t.exception())

        task.add_done_callback(done)

    async def settle(self) -> None:
        """Wait for the background writes started so far (tests, benchmarks, shutdown)."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    async def _put_files(
        self, tenant: str, slug: str, tree: Mapping[str, bytes], current: TreeIndex | None
    ) -> None:
        """Upload the contents the store does not hold yet (the current version's are there:
        they were written before it committed)."""
        held = {d for d, _ in current.files.values()} if current is not None else set()
        todo: dict[bytes, bytes] = {}
        for content in tree.values():
            digest = hashlib.sha256(content).digest()
            known = self._known_blobs.get(_prefix(tenant, slug) + digest.hex())
            if digest in held or digest in todo or known:
                continue
            todo[digest] = content
        await _gather_limited(
            (self._put_file(tenant, slug, d, c) for d, c in todo.items()), limit=16
        )

    async def _put_file(self, tenant: str, slug: str, digest: bytes, content: bytes) -> None:
        await self.engine.put_blob(_prefix(tenant, slug) + f"files/{digest.hex()}", content)
        # Keyed by namespace: files are stored under each namespace's own prefix.
        self._known_blobs.put(_prefix(tenant, slug) + digest.hex(), True, 64)
        # Every follower of this namespace wants the new contents next (its inline delta).
        self._blobs.put(digest.hex(), content, len(content) + 100)

    @staticmethod
    def _tarball_key(tenant: str, slug: str, closure_hash: str) -> str:
        return _prefix(tenant, slug) + f"closures/{_hex(closure_hash)}.tar.gz"

    async def _once(self, key: str, fetch: Callable[[], Awaitable[T]]) -> T:
        """Run `fetch` once for concurrent callers asking for the same `key` (a publish
        wakes every follower at once: they share one read, not one each). The read is its
        own task, so a caller that goes away (a closed connection) cancels nobody else's."""
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.ensure_future(fetch())
            self._inflight[key] = task

            def done(t: asyncio.Future[Any], k: str = key) -> None:
                if self._inflight.get(k) is t:
                    del self._inflight[k]
                if not t.cancelled():
                    t.exception()  # retrieved, even when every caller has gone

            task.add_done_callback(done)
        return cast(T, await asyncio.shield(task))

    # --- reads ----------------------------------------------------------------------------
    async def index(self, tenant: str, slug: str, tree_hash: str) -> TreeIndex:
        hit = self._indexes.get(tree_hash)
        if hit is not None:
            return hit
        raw = await self.engine.get_blob(_prefix(tenant, slug) + f"trees/{_hex(tree_hash)}.json")
        index = TreeIndex.from_json(raw)
        self._indexes.put(tree_hash, index, index.cost())
        return index

    async def contents(
        self,
        tenant: str,
        slug: str,
        digests: Iterable[bytes],
        tree_hash: str | None = None,
    ) -> dict[bytes, bytes]:
        """The file contents with these sha256 digests: from the cache, else (more than
        BULK_FILES missing and `tree_hash` given) from that tree's `*` tarball in one read,
        else one read per file, in parallel. Concurrent callers share each read."""
        wanted = list(dict.fromkeys(digests))
        out: dict[bytes, bytes] = {}
        missing = self._cached(wanted, out)
        if tree_hash is not None and len(missing) > BULK_FILES:
            key = self._tarball_key(tenant, slug, tree_hash)
            await self._once(key, lambda: self._load_tarball(key))
            missing = self._cached(missing, out)

        if not missing:
            return out

        async def fetch(d: bytes) -> None:
            key = _prefix(tenant, slug) + f"files/{d.hex()}"
            out[d] = await self._once(key, lambda: self._load_file(key, d))

        await _gather_limited((fetch(d) for d in missing), limit=16)
        return out

    def _cached(self, digests: Iterable[bytes], out: dict[bytes, bytes]) -> list[bytes]:
        missing: list[bytes] = []
        for d in digests:
            hit = self._blobs.get(d.hex())
            if hit is not None:
                out[d] = hit
            else:
                missing.append(d)
        return missing

    async def _load_file(self, key: str, digest: bytes) -> bytes:
        body = await self.engine.get_blob(key)
        if hashlib.sha256(body).digest() != digest:
            raise RuntimeError(f"stored file {key} does not match its digest")
        self._blobs.put(digest.hex(), body, len(body) + 100)
        return body

    async def _load_tarball(self, key: str) -> bool:
        """Every file of a stored tarball into the content cache (False: no such object,
        e.g. a version published before tarballs were written at publish)."""
        body = await self.engine.find_blob(key)
        if body is None:
            return False
        for content in read_snapshot(body).values():
            self._blobs.put(hashlib.sha256(content).hexdigest(), content, len(content) + 100)
        return True

    async def tree(self, tenant: str, slug: str, index: TreeIndex) -> dict[str, bytes]:
        got = await self.contents(
            tenant, slug, (d for d, _ in index.files.values()), index.tree_hash
        )
        return {p: got[d] for p, (d, _) in index.files.items()}

    def closure(self, index: TreeIndex, selection: FlagSelection) -> Closure:
        key = (index.tree_hash, selection.canonical())
        hit = self._closures.get(key)
        if hit is not None:
            return hit
        paths = closure_paths(index.model, selection, names.NAMESPACE_FILE in index.files)
        digests = {p: index.files[p][0] for p in paths}
        sizes = {p: index.files[p][1] for p in paths}
        result = Closure(digests, sizes, closure_hash_of_digests(digests))
        self._closures.put(key, result, 100 + 80 * len(paths))
        return result

    async def closure_tarball(
        self, tenant: str, slug: str, index: TreeIndex, closure: Closure
    ) -> Snapshot:
        """The closure's deterministic tar.gz: from this process's memo, else S3, else built
        from the files (and stored in S3 for every other instance)."""
        hit = self._tarballs.get(closure.hash)
        if hit is not None:
            return hit
        key = self._tarball_key(tenant, slug, closure.hash)
        body = await self.engine.find_blob(key)
        if body is not None:
            snap = Snapshot(body, closure.tar_size)
        else:
            got = await self.contents(tenant, slug, closure.digests.values(), index.tree_hash)
            snap = build_snapshot({p: got[d] for p, d in closure.digests.items()})
            await self.engine.put_blob(key, snap.body)
        self._tarballs.put(closure.hash, snap, len(snap.body) + 100)
        return snap

    async def version(self, head: Head, version: int) -> VersionInfo:
        """Version `version` (1 <= version <= head.head_seq) of the namespace at `head`."""
        key = (head.topic, head.epoch, version)
        hit = self._versions.get(key)
        if hit is not None:
            return hit
        rr = await self.engine.read_range(
            head.topic, version - 1, 1, READ_BYTES, None, head, version
        )
        if not rr.records or rr.records[0].seq != version:
            raise TopicNotFound(head.topic)
        info = _version_info(rr.records[0].seq, rr.records[0].ts, rr.records[0].data_raw)
        self._versions.put(key, info, 200)
        return info

    async def versions(self, head: Head, page: int = 1000) -> list[VersionInfo]:
        out: list[VersionInfo] = []
        after = 0
        while after < head.head_seq:
            rr = await self.engine.read_range(head.topic, after, page, READ_BYTES, None, head)
            if not rr.records:
                break
            for rec in rr.records:
                info = _version_info(rec.seq, rec.ts, rec.data_raw)
                self._versions.put((head.topic, head.epoch, rec.seq), info, 200)
                out.append(info)
            after = rr.records[-1].seq
        return out

    async def is_retained(self, head: Head, version: int, now_ms: int) -> bool:
        """Whether version's files index is within retention (the newest `versions`
        versions, or created within `max_age_ms`)."""
        if version > head.head_seq or version < 1:
            return False
        if version > head.head_seq - self.retention.versions:
            return True
        info = await self.version(head, version)
        return info.created_ms >= now_ms - self.retention.max_age_ms


def _prev(version: int) -> int | None:
    return version - 1 if version > 1 else None


def _version_record(index: TreeIndex) -> NewRecord:
    body = {
        "tree": index.tree_hash,
        "files": len(index.files),
        "bytes": sum(n for _, n in index.files.values()),
    }
    raw = jsoncodec.exact(orjson.dumps(body))
    return NewRecord(data=None, meta=None, size=len(raw) + 16, data_raw=raw)


def _version_info(seq: int, ts: int, data_raw: bytes) -> VersionInfo:
    body: dict[str, Any] = orjson.loads(data_raw)
    return VersionInfo(seq, ts, str(body["tree"]))


async def _gather_limited(jobs: Iterable[Awaitable[None]], limit: int) -> None:
    sem = asyncio.Semaphore(limit)

    async def run(job: Awaitable[None]) -> None:
        async with sem:
            await job

    await asyncio.gather(*(run(j) for j in jobs))
