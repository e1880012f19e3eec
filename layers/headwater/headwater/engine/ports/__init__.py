"""Ports: the small typed interfaces the engine and the surfaces depend on, their value types,
and the object layout they share. Adapters in headwater.storage (dynamo.py, blobs.py, ...)
implement them over boto3 and import nothing of the engine but this module and its record
codec (engine.records); nothing above storage knows about AWS (checked by `make lint`:
the import contracts in .importlinter)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from headwater.engine.config import TopicConfig
from headwater.engine.records import Frame, StoredRecord


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """What the stored head item says when frames appended by single writes stand beyond it
    (docs/storage.md "One write per append"): its head seq and cumulative counters."""

    seq: int
    appended: int
    appended_bytes: int


@dataclass(frozen=True, slots=True)
class Head:
    """Per-topic metadata. A deleted topic keeps a marker (deleted=True) holding its epoch, so
    a recreate gets epoch + 1 and stale cursors can be fenced."""

    topic: str
    epoch: int
    head_seq: int = 0
    earliest_seq: int = 1
    evict_floor: int = 1
    count: int = 0
    bytes: int = 0
    config: dict[str, Any] = field(default_factory=dict)
    created_ms: int = 0
    last_write_ts: int | None = None
    last_read_ts: int | None = None
    del_ver: int = 0
    tag_pending: dict[int, int] = field(default_factory=dict)  # frame first seq -> last seq
    deleted: bool = False
    # Tiering (docs/storage.md "Tiering"): seqs <= sealed_through live in S3 segments; tail
    # frames <= trimmed_through are gone from DynamoDB; unsealed_bytes drives sealing.
    sealed_through: int = 0
    trimmed_through: int = 0
    unsealed_bytes: int = 0
    # Why seqs below evict_floor were lost: ascending runs (last seq of the run, reason).
    evictions: tuple[tuple[int, str], ...] = ()
    # The previous incarnation's head_seq (deleted marker, then the recreated head).
    prev_head_seq: int = 0
    # Extension state owned by a protocol layer (a Durable Streams stream's JSON state: its
    # content type, expiry, closure, Stream-Seq and producer epochs). Changed only together
    # with an append (AppendCommit.ext_*) or alone, conditionally (HeadStore.put_ext).
    ext: str = ""
    # Records and payload bytes appended in this epoch through head_seq (never decreased by
    # deletes or eviction): frames carry them too, so a head can be brought up to date from
    # its newest frame.
    appended: int = 0
    appended_bytes: int = 0
    # The stored head item, when the newest frame is past it (None: it is this head).
    stored: Checkpoint | None = None
    # `config` decoded once (engine.config.TopicConfig): what the engine reads
    cfg: TopicConfig = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "cfg", TopicConfig.of(self.config))

    @property
    def log_key(self) -> str:
        return f"{self.topic}#{self.epoch}"

    def past(self, last_seq: int, appended: int, appended_bytes: int, ts: int) -> Head:
        """This head brought up to a frame written alone beyond it (docs/storage.md "One
        write per append"): seq, append time and counters from the frame's cumulative ones;
        the stored item stays where it was."""
        if self.deleted or last_seq <= self.head_seq:
            return self
        dn = appended - self.appended
        db = appended_bytes - self.appended_bytes
        return dataclasses.replace(
            self,
            head_seq=last_seq,
            appended=appended,
            appended_bytes=appended_bytes,
            count=self.count + dn,
            bytes=self.bytes + db,
            unsealed_bytes=max(0, self.unsealed_bytes + db),
            last_write_ts=max(ts, self.last_write_ts or 0),
            stored=self.checkpoint,
        )

    @property
    def checkpoint(self) -> Checkpoint:
        """The stored head item's seq and counters (conditional head writes compare them)."""
        if self.stored is not None:
            return self.stored
        return Checkpoint(self.head_seq, self.appended, self.appended_bytes)

    @property
    def first_live_seq(self) -> int:
        """`earliest_seq` as reported: head_seq + 1 whenever the topic holds no record."""
        return self.earliest_seq if self.count else self.head_seq + 1


@dataclass(frozen=True, slots=True)
class TagEntry:
    """The seqs of one frame that carry one tag: a tag index item, written with the frame."""

    tag: str
    frame_seq: int  # the frame's key: its first seq
    seqs: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class IdemEntry:
    """An idempotency key and the seqs its first append got, kept until `expires_ms`."""

    key: str
    first_seq: int
    last_seq: int
    expires_ms: int


@dataclass(frozen=True, slots=True)
class IdemHit:
    """The seqs an idempotency key already holds: a retried append answers with them."""

    first_seq: int
    last_seq: int


@dataclass(slots=True)
class AppendCommit:
    """Everything one group commit writes, atomically: the head advance (or creation), the
    frame, inline tag-index entries, and idempotency keys."""

    topic: str
    expected: Head | None  # live head we read (None: create; deleted marker: recreate)
    new_head: Head | None  # full head to put when creating
    first_seq: int
    last_seq: int
    ts: int
    blob: bytes | None
    spill_key: str | None
    payload_bytes: int
    tag_entries: list[TagEntry]
    tag_pending: bool
    idem: list[IdemEntry]
    max_count: int | None = None  # discard:"reject" caps: head count must stay <= this
    max_bytes: int | None = None
    expires_s: int | None = None  # DynamoDB TTL of the frame item (lossy durability classes)
    # Guarded appends: the head's ext must still equal ext_expected, and becomes ext_new.
    ext_expected: str | None = None
    ext_new: str | None = None
    # The commit id (and ClientRequestToken): the same for every attempt of this commit, so
    # a retry recognises its own earlier success (storage/ddb.py). None: the adapter picks.
    cid: str | None = None
    # One conditional write of the frame alone (no head write): an append with no condition
    # beyond a free frame key (docs/storage.md "One write per append"). The frame carries
    # the cumulative counters below either way.
    single: bool = False
    appended: int = 0  # records appended in the epoch through last_seq
    appended_bytes: int = 0


@dataclass(frozen=True, slots=True)
class FrameDelete:
    """Delete marks for one item: a tail frame (keyed by its first seq) or a sealed segment
    (keyed by its last seq)."""

    key_seq: int
    seqs: tuple[int, ...]
    bytes: int
    expected_deleted_count: int


@dataclass(slots=True)
class DeleteCommit:
    """Record deletes: `frames` are tail frames, `segments` sealed segments (keyed by their
    last seq); conditional on the head's delete version and sealed_through."""

    topic: str
    epoch: int
    expected_del_ver: int
    frames: list[FrameDelete]
    count_delta: int
    bytes_delta: int
    new_earliest: int | None
    expected_sealed: int = 0
    segments: list[FrameDelete] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class FrameSummary:
    """A tail frame without its records (a projected Query)."""

    first_seq: int
    last_seq: int
    ts: int
    bytes: int
    deleted_count: int
    deleted_bytes: int
    spill_key: str | None
    expires_s: int | None = None  # its DynamoDB TTL, if it has one


@dataclass(frozen=True, slots=True)
class SegmentItem:
    """A sealed segment as recorded in DynamoDB: where the object is, its encoded block index
    (segment.encode_index), its counters, and the seqs deleted since (S3 objects are
    immutable, so record deletes of sealed seqs live here)."""

    first_seq: int
    last_seq: int
    key: str
    index: bytes
    count: int
    bytes: int
    min_ts: int
    max_ts: int
    created_ms: int
    deleted: frozenset[int] = frozenset()
    deleted_count: int = 0
    deleted_bytes: int = 0


@dataclass(frozen=True, slots=True)
class SealCommit:
    """Record a segment and move sealed_through, if nothing moved since the frames were read."""

    head: Head
    segment: SegmentItem
    sealed_bytes: int


@dataclass(frozen=True, slots=True)
class EvictCommit:
    """Move the floors past evicted/expired units (conditional on the head as read)."""

    head: Head
    new_earliest: int
    new_floor: int
    count_delta: int
    bytes_delta: int
    unsealed_bytes_delta: int
    evictions: tuple[tuple[int, str], ...]


class AppendRejected(Exception):
    """The append transaction was cancelled. `head_conflict` means the head moved (re-read and
    retry); `idem_hits` maps idempotency keys that already exist to their original seqs."""

    def __init__(
        self,
        head_conflict: bool,
        idem_hits: dict[str, IdemHit | None],
        current_head: Head | None = None,
        *,
        unconfirmed: bool = False,
        stepped: bool = False,
    ) -> None:
        super().__init__("append transaction cancelled")
        self.head_conflict = head_conflict
        self.idem_hits = idem_hits
        # The head as the failed condition saw it (saves a read on the retry), when known.
        self.current_head = current_head
        # Several attempts were sent and no frame stands where ours would: if the head shows
        # those seqs trimmed or evicted since, whether ours applied can no longer be seen.
        self.unconfirmed = unconfirmed
        # `current_head` is the head stepped past the single-write frame that holds our key
        # (nothing was read): more frames may stand beyond it, so it is a guess to retry on
        # at once, and a verdict that writes nothing is not final on it.
        self.stepped = stepped


class HeadStore(Protocol):
    def get(self, topic: str, *, consistent: bool = True) -> Head | None: ...
    def get_many(
        self, topics: Sequence[str], *, consistent: bool = True
    ) -> dict[str, Head]: ...  # one BatchGetItem per 100 names; absent topics are left out
    def create(self, head: Head, *, replacing: Head | None) -> bool: ...
    def put_config(self, head: Head, config: dict[str, Any]) -> bool: ...
    def put_ext(self, head: Head, ext: str) -> bool: ...  # iff head_seq and ext unchanged
    def mark_deleted(
        self, head: Head, *, if_empty: bool, if_ext: str | None = None
    ) -> bool: ...  # if_ext: iff the ext attribute still holds it
    def list_live(self, prefix: str, after: str | None, limit: int) -> list[Head]: ...
    # internal=False: without the surfaces' internal logs (names starting "~": ~ds/, ~flags/,
    # ~aviso/), i.e. the topics /v0 shows
    def count_live(self, internal: bool = True) -> int: ...
    def total_live_bytes(self) -> int: ...
    def touch_read(self, head: Head, ts: int) -> None: ...
    def clear_tag_pending(self, head: Head, frame_seq: int) -> None: ...


# The records of a spilled frame (first_seq, last_seq) this process holds already, or None:
# read_frames then does not fetch its S3 object (upkeep sealing what this process appended).
KnownRecords = Callable[[int, int], list[StoredRecord] | None]


class LogTailStore(Protocol):
    def commit_append(self, commit: AppendCommit) -> bool: ...  # True: applied earlier
    def read_frames(
        self,
        head: Head,
        after_seq: int,
        upto_seq: int,
        max_records: int,
        max_bytes: int = 0,
        known: KnownRecords | None = None,
    ) -> list[Frame]: ...  # stops at max_records records or max_bytes payload bytes (0: none)
    # Tail frames are keyed by their first seq (get_frames answers by it, delete_frames takes it).
    def get_frames(self, head: Head, frame_seqs: Sequence[int]) -> dict[int, Frame]: ...
    def get_idempotency(self, head: Head, key: str, now_ms: int) -> IdemHit | None: ...
    def tag_lookup(self, head: Head, tag: str, prefix: bool) -> list[TagEntry]: ...
    def write_tag_entries(self, head: Head, entries: Sequence[TagEntry]) -> None: ...
    def commit_delete(self, commit: DeleteCommit) -> bool: ...
    def frame_summaries(
        self, head: Head, after_seq: int, upto_seq: int, limit: int
    ) -> list[FrameSummary]: ...  # frames with last_seq > after_seq and first_seq <= upto_seq
    def delete_frames(self, head: Head, frame_seqs: Sequence[int]) -> None: ...
    def commit_evict(self, commit: EvictCommit) -> bool: ...
    def set_trimmed(self, head: Head, trimmed_through: int) -> bool: ...
    # Store `head` (read with frames past its stored item) as the head item: iff the item is
    # still the checkpoint `head.stored` describes. Before frames past the stored item may
    # be deleted, the item must be brought past them.
    def checkpoint(self, head: Head) -> bool: ...


class SegmentStore(Protocol):
    def after(self, head: Head, after_seq: int, limit: int) -> list[SegmentItem]: ...
    def commit_seal(self, commit: SealCommit) -> bool: ...
    def delete_items(self, head: Head, last_seqs: Sequence[int]) -> None: ...


class BlobStore(Protocol):
    def put(self, key: str, body: bytes) -> None: ...
    def get(self, key: str) -> bytes: ...
    def get_range(self, key: str, start: int, end: int) -> bytes: ...  # bytes [start, end)
    def find(self, key: str) -> bytes | None: ...  # None when absent
    def delete_many(self, keys: Sequence[str]) -> None: ...


@dataclass(frozen=True, slots=True)
class WatchSessionItem:
    """A stored watch session (spec §7.1): the subscription, who created it, and the
    last-delivered cursor per topic. `spec` and `cursors` are opaque JSON to the store."""

    wid: str
    key_id: str
    scopes: frozenset[str]
    auth: bool  # created with auth on: the stream GET must present the same key
    spec: str  # JSON: the validated subscription with resolved initial positions
    cursors: str | None  # JSON map topic -> seq once a stream has delivered; None before
    last_access_ms: int
    ttl_ms: int


class SessionStore(Protocol):
    def put(self, item: WatchSessionItem) -> None: ...
    def get(self, wid: str) -> WatchSessionItem | None: ...
    def save_cursors(self, wid: str, cursors: str | None, now_ms: int, ttl_ms: int) -> bool: ...
    def delete(self, wid: str) -> bool: ...
    def sweep(self, now_ms: int) -> int: ...


# --------------------------------------------------------------------------- object layout
# S3 key prefixes of what the engine and the surfaces write (storage/requests.py classifies
# requests by them; storage/bootstrap.py's lifecycle rules use them).
SPILL_PREFIX = "spill/"
SEGMENT_PREFIX = "segments/"
INDEX_PREFIX = "indexes/"
REGISTRY_PREFIX = "registries/"  # Durable Streams schema registries, one object per revision
COMPANION_SUFFIX = ".cix"  # a segment's index companion: its key + this (engine.segment)
LEXICON_RUN_SUFFIX = ".rkr"  # a routing-key lexicon run ending at a segment (index.runs)


# --------------------------------------------------------------------------- transactions
MAX_TXN_ITEMS = 100
CONFLICT = -1  # a failed position meaning: cancelled by a concurrent write, retry
