"""Ports: the small typed interfaces the engine and the surfaces depend on, their value types,
and the object layout they share. Adapters in headwater.storage (heads.py, log_tail.py,
blobs.py, ...) implement them over boto3 and import nothing of the engine but this module and
its record codec (engine.records); nothing above storage knows about AWS (checked by `make lint`:
the import contracts in .importlinter)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from headwater.engine.config import TopicConfig
from headwater.engine.records import Frame, StoredRecord


def frame_partition(seq: int, partitions: int) -> int:
    """Which of an incarnation's `partitions` keys holds the frame keyed by `seq`: a
    multiplicative hash, so consecutive seqs (one-record frames from many writers) and
    strides alike spread evenly."""
    if partitions <= 1:
        return 0
    return (((seq * 0x9E3779B1) & 0xFFFFFFFF) * partitions) >> 32


def frame_pk(topic: str, epoch: int, partitions: int, seq: int) -> str:
    """`<topic>#<epoch>` for partition 0 (the whole log when there is one partition),
    `<topic>#<epoch>~<p>` for the others. An epoch is digits, so the key parses from the
    right whatever the topic name holds (log_key_parts)."""
    p = frame_partition(seq, partitions)
    return f"{topic}#{epoch}" if p == 0 else f"{topic}#{epoch}~{p}"


def log_key_parts(pk: str) -> tuple[str, int] | None:
    """(topic, epoch) of a frame's partition key, or None when it is not one."""
    topic, sep, rest = pk.rpartition("#")
    epoch, _, part = rest.partition("~")
    if not sep or not epoch.isdigit() or (part and not part.isdigit()):
        return None
    return topic, int(epoch)


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
    # Records and payload bytes reserved in this epoch through head_seq (never decreased by
    # deletes or eviction; appends that failed after reserving count too): every frame
    # carries the bytes through its last seq, so sealing can tell a hole's bytes.
    appended: int = 0
    appended_bytes: int = 0
    # Frames of this incarnation spread over this many partition keys (docs/storage.md
    # "The sequencer"); fixed when the incarnation is created.
    partitions: int = 1
    # `config` decoded once (engine.config.TopicConfig): what the engine reads
    cfg: TopicConfig = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "cfg", TopicConfig.of(self.config))

    @property
    def log_key(self) -> str:
        return f"{self.topic}#{self.epoch}"

    def frame_pk(self, seq: int) -> str:
        """The partition key of the frame (or hole) keyed by `seq` in this incarnation."""
        return frame_pk(self.topic, self.epoch, self.partitions, seq)

    def reserved(self, n: int, nbytes: int, ts: int) -> Head:
        """This head after a reservation of `n` records of `nbytes` payload bytes: every
        counter moves at once, in the same write as the seqs (HeadStore.reserve)."""
        return dataclasses.replace(
            self,
            head_seq=self.head_seq + n,
            appended=self.appended + n,
            appended_bytes=self.appended_bytes + nbytes,
            count=self.count + n,
            bytes=self.bytes + nbytes,
            unsealed_bytes=self.unsealed_bytes + nbytes,
            last_write_ts=ts,
        )

    @property
    def first_live_seq(self) -> int:
        """`earliest_seq` as reported: head_seq + 1 whenever the topic holds no record."""
        return self.earliest_seq if self.count else self.head_seq + 1


@dataclass(frozen=True, slots=True)
class Reservation:
    """Seqs handed out by the topic's counter (HeadStore.reserve): nobody else ever gets
    them. The frame goes at `first_seq`; `appended_bytes` is the log's cumulative reserved
    payload bytes through `last_seq` (the frame carries it); `head` is the head item just
    after the reservation. `retried`: botocore re-sent the request, so an earlier attempt
    may have reserved seqs too (left as a hole for readers to fill)."""

    first_seq: int
    last_seq: int
    ts: int
    appended_bytes: int
    head: Head
    retried: bool = False


@dataclass(frozen=True, slots=True)
class ProducerClaim:
    """An idempotent producer's write (Kafka's producer id, epoch and seq): it commits with
    the records iff the producer's stored state takes (epoch, seq) as its next write: a new
    producer at seq 0, a new epoch at seq 0, or the seq after the stored one in the stored
    epoch; and only after the producer's last write in the log. The state is an item of its
    own beside the log (docs/storage.md "Producers"), so producers never contend."""

    producer: str
    epoch: int
    seq: int

    def takes(self, stored: tuple[int, int] | None) -> bool:
        """Whether a producer whose stored (epoch, seq) is `stored` takes this write next."""
        if stored is None:
            return self.seq == 0
        epoch, seq = stored
        if self.epoch > epoch:
            return self.seq == 0
        return self.epoch == epoch and self.seq == seq + 1


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
    """Everything one group commit writes, atomically, at seqs its reservation holds (or, when
    it creates the topic, the head put with the first frame): the frame, inline tag-index
    entries, idempotency keys, and a guarded append's new ext."""

    topic: str
    expected: Head | None  # live head the seqs were reserved on (None: create; marker: recreate)
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
    expires_s: int | None = None  # DynamoDB TTL of the frame item
    # Guarded appends that change the ext (a close, a Stream-Seq, a flag namespace's
    # tree) are serialized: no reservation, the head moves with the frame in one transaction,
    # iff its seqs and ext are still as `expected` (so a reader never sees the head's seqs
    # and its ext apart, and everyone who judged on the old ext is ordered before it); the
    # ext becomes ext_new. The caps, for such a commit, are checked in it.
    ext_expected: str | None = None
    ext_new: str | None = None
    max_count: int | None = None
    max_bytes: int | None = None
    # The commit id (and ClientRequestToken): the same for every attempt of this commit, so
    # a retry recognises its own earlier success (storage/ddb.py). None: the adapter picks.
    cid: str | None = None
    # The frame alone, one conditional put at the reserved key (no other item to write).
    single: bool = False
    appended_bytes: int = 0  # the log's cumulative reserved payload bytes through last_seq
    # Idempotent producers' writes, committed with the frame iff each producer takes its
    # write next, after its last one in the log (its stored last frame key < first_seq).
    claims: list[ProducerClaim] = field(default_factory=list)


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
    partitions: int = 1  # the incarnation's (Head.partitions): where each frame key lives


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
    hole: bool = False  # a reserved span no append committed: no records
    # A hole's reserved payload bytes, when its writer left it (a reader's fill cannot know
    # them: 0); bytes counts it is in the head's counters until a seal or eviction passes it.
    void_bytes: int = 0


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
    sealed_bytes: int  # payload bytes the seal passes (records, and holes' known bytes)
    # What the holes in the sealed span held in the live counters (reserved by appends that
    # never committed): the seal takes them out.
    void_records: int = 0
    void_bytes: int = 0


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
    """A reservation or an append's write was refused. `head_conflict`: the head is not as
    the attempt saw it (re-judge on `current_head`, when known, and retry); `idem_hits` maps
    idempotency keys that already exist to their original seqs; `slot_lost`: the reserved key
    was filled as a hole before the frame got there (reserve again)."""

    def __init__(
        self,
        head_conflict: bool,
        idem_hits: dict[str, IdemHit | None],
        current_head: Head | None = None,
        *,
        slot_lost: bool = False,
        claim_hits: dict[str, tuple[int, int, int] | None] | None = None,
    ) -> None:
        super().__init__("append refused")
        self.head_conflict = head_conflict
        self.idem_hits = idem_hits
        self.current_head = current_head
        self.slot_lost = slot_lost
        # producers whose claim was refused: their stored (epoch, seq, last frame key)
        self.claim_hits = claim_hits or {}


class HeadStore(Protocol):
    def get(self, topic: str, *, consistent: bool = True) -> Head | None: ...
    # The sequencer: one atomic counter step on the head item hands out `n` seqs (and moves
    # the counters by n records, nbytes bytes), iff the head's epoch and config are as read,
    # it is live, its ext equals `ext` (None: any) and the caps hold (count <= max_count,
    # bytes <= max_bytes before it). Never conflicts with other reservations. Raises
    # AppendRejected(head_conflict=True, current_head=...) when the condition fails.
    def reserve(
        self,
        head: Head,
        n: int,
        nbytes: int,
        ts: int,
        *,
        ext: str | None = None,
        max_count: int | None = None,
        max_bytes: int | None = None,
        patient: bool = True,
    ) -> Reservation: ...
    # (patient=False: a throttled step raises Throttled at once, not after the SDK's and the
    # adapter's back-off: the topic is at its write ceiling, and the client is told so)
    def get_many(
        self, topics: Sequence[str], *, consistent: bool = True
    ) -> dict[str, Head]: ...  # one BatchGetItem per 100 names; absent topics are left out
    def create(self, head: Head, *, replacing: Head | None) -> bool: ...
    def put_config(self, head: Head, config: dict[str, Any]) -> bool: ...
    # iff head_seq (nothing reserved since) and ext unchanged; with a producer's claim, the
    # two at once (AppendRejected with claim_hits when the producer does not take it)
    def put_ext(self, head: Head, ext: str, claim: ProducerClaim | None = None) -> bool: ...
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
    # Frames are read as a chain: the frame holding after_seq + 1, then the one keyed by its
    # last seq + 1, and so on; a read stops before the first key nothing stands at (a slot
    # reserved and not yet written, or one a seal or eviction has since taken).
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
    # A producer's stored (epoch, seq, last frame key), or None
    def get_producer(self, head: Head, producer: str) -> tuple[int, int, int] | None: ...
    def tag_lookup(self, head: Head, tag: str, prefix: bool) -> list[TagEntry]: ...
    def write_tag_entries(self, head: Head, entries: Sequence[TagEntry]) -> None: ...
    def commit_delete(self, commit: DeleteCommit) -> bool: ...
    # The chain's frames with last_seq > after_seq and first_seq <= upto_seq (at most
    # `limit`); `every`: every frame item in that span of keys instead, holes off the chain
    # (a fill that raced a late commit) included, for deleting them all.
    def frame_summaries(
        self, head: Head, after_seq: int, upto_seq: int, limit: int, *, every: bool = False
    ) -> list[FrameSummary]: ...
    def delete_frames(self, head: Head, frame_seqs: Sequence[int]) -> None: ...
    def commit_evict(self, commit: EvictCommit) -> bool: ...
    def set_trimmed(self, head: Head, trimmed_through: int) -> bool: ...
    # A hole at `first_seq` (covering through `last_seq`: the owner of a reservation that
    # wrote nothing knows its span; a reader filling a slot nobody wrote covers that one seq),
    # iff the key is free: the frame (or hole) standing there afterwards.
    def fill_hole(
        self,
        head: Head,
        first_seq: int,
        last_seq: int | None = None,
        void_bytes: int = 0,
        expires_s: int | None = None,
    ) -> Frame: ...


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
