"""The state every in-memory store shares: one emulated account (its tables as dicts), one
lock, the commit-id and request-token bookkeeping the DynamoDB adapters rely on, item and
transaction limits, and the fault hook that loses an answer.

What the fakes copy from DynamoDB, and why: the adapters' retry safety (storage/ddb.py) rests
on two mechanisms, and the engine sees the difference between them, so the fakes keep both.
- A transaction's ClientRequestToken: an identical request re-sent after it committed is
  answered with the original success (DynamoDB remembers it for 10 minutes; here until
  `forget_tokens`), a different request under the same token is refused.
- Commit ids: each write records the id of the commit that last wrote an item (`hc`), and a
  failed condition shows the old item, so a re-sent write that finds its own id knows an
  earlier attempt applied."""

from __future__ import annotations

import contextlib
import enum
import itertools
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from headwater.engine.ports import AppendRejected, Head, SegmentItem, WatchSessionItem
from headwater.engine.ports.catalogue import Catalogue
from headwater.engine.ports.dashboard import DashboardConfig
from headwater.engine.ports.queue import Lease
from headwater.engine.ports.routers import RouterItem
from headwater.engine.ports.ws import WsConnection, WsSubscription
from headwater.errors import HeadwaterError, OutcomeUnknown, StorageUnavailable

T = TypeVar("T")

MAX_ITEM_BYTES = 400 * 1024  # DynamoDB's item limit
MAX_TXN_ITEMS = 100  # DynamoDB's transaction limit


class Fault(enum.Enum):
    """What happens to the next call of an armed operation."""

    # Storage applies the write and the answer never arrives: the adapter, out of re-sends,
    # raises OutcomeUnknown (it may or may not have applied; here it did).
    LOSE_AFTER_APPLY = "lose-after-apply"
    # Nothing reaches storage and no answer arrives: OutcomeUnknown, nothing applied.
    FAIL_BEFORE_APPLY = "fail-before-apply"
    # Storage applies the write, the answer is lost, and the adapter re-sends the same
    # request (botocore's retry): the caller gets the answer to the re-send.
    RESEND_AFTER_APPLY = "resend-after-apply"


@dataclass(frozen=True, slots=True)
class Armed:
    fault: Fault
    fresh_token: bool = False  # the re-send carries a new token (a backend ignoring tokens)
    between: Callable[[], None] | None = None  # runs after the first attempt, before the re-send


@dataclass(frozen=True, slots=True)
class Send:
    """One attempt of a write: whether an earlier attempt of it was sent, and the
    ClientRequestToken it carries (transactions only)."""

    retried: bool = False
    fresh_token: bool = False


FIRST = Send()


def invalid(why: str) -> StorageUnavailable:
    """What the adapters raise for a request DynamoDB refuses as invalid (an item over
    400 KB, a transaction of more than 100 items)."""
    code = "ValidationException"
    return StorageUnavailable(f"storage error: {code} ({why})", detail={"aws_error": code})


def number_size(v: int) -> int:
    """DynamoDB's size of a number: one byte per two significant digits, plus one."""
    digits = len(str(abs(v)).strip("0")) or 1
    return (digits + 1) // 2 + 1


def item_size(attrs: dict[str, str | bytes | int | frozenset[int] | None]) -> int:
    """The size DynamoDB counts for an item: attribute names plus values (strings as UTF-8,
    binaries as is, numbers and number sets as above). The fakes size each item the way the
    DynamoDB adapter lays it out, so the item limit bites where it bites there."""
    total = 0
    for name, v in attrs.items():
        if v is None:
            continue
        total += len(name.encode())
        if isinstance(v, str):
            total += len(v.encode())
        elif isinstance(v, bytes):
            total += len(v)
        elif isinstance(v, int):
            total += number_size(v)
        else:
            total += sum(number_size(x) for x in v)
    return total


class Faults:
    """Faults armed per operation ("tail.commit_append", "leases.complete", ...), each for
    the next call of it only."""

    def __init__(self) -> None:
        self._armed: dict[str, list[Armed]] = {}
        self._lock = threading.Lock()

    def arm(self, op: str, armed: Armed) -> None:
        with self._lock:
            self._armed.setdefault(op, []).append(armed)

    def take(self, op: str) -> Armed | None:
        with self._lock:
            queue = self._armed.get(op)
            return queue.pop(0) if queue else None

    def pending(self) -> dict[str, int]:
        with self._lock:
            return {op: len(q) for op, q in self._armed.items() if q}


@dataclass(slots=True)
class HeadRow:
    head: Head  # unsealed_bytes as stored: a seal may take it below 0 (read as 0)
    hc: str | None = None


@dataclass(slots=True)
class FrameRow:
    first_seq: int
    last_seq: int
    ts: int
    size: int  # payload bytes
    blob: bytes | None  # inline (possibly compressed) records, or
    spill_key: str | None  # where the spilled blob is
    expires_s: int | None
    hc: str | None
    deleted: set[int] = field(default_factory=set)
    deleted_count: int = 0
    deleted_bytes: int = 0
    appended_bytes: int = 0  # reserved bytes in the epoch through last_seq
    hole: bool = False  # reserved seqs no append committed: no records
    void_bytes: int = 0  # a hole's reserved bytes, when its writer left it

    def size_bytes(self, log_key: str) -> int:
        """Sized as the DynamoDB adapter lays the frame item out."""
        return item_size(
            {
                "pk": log_key,
                "sk": self.last_seq,
                "fs": self.first_seq,
                "ts": self.ts,
                "sz": self.size,
                "dn": self.deleted_count,
                "dz": self.deleted_bytes,
                "hc": self.hc,
                "ttl": self.expires_s,
                "s3": self.spill_key,
                "rb": self.blob,
                "dx": frozenset(self.deleted) or None,
                "ab": self.appended_bytes,
            }
        )


@dataclass(slots=True)
class IdemRow:
    first_seq: int
    last_seq: int
    expires_ms: int
    hc: str | None


@dataclass(slots=True)
class SegmentRow:
    item: SegmentItem
    hc: str | None


@dataclass(slots=True)
class QueueRow:
    cursor: int | None = None
    dead: int | None = None
    hc: str | None = None


@dataclass(slots=True)
class LeaseRow:
    lease: Lease
    hc: str | None


@dataclass(slots=True)
class SessionRow:
    item: WatchSessionItem
    hc: str | None = None


@dataclass(slots=True)
class CatalogueRow:
    catalogue: Catalogue
    hc: str | None


@dataclass(slots=True)
class QuotaRow:
    n: int | None = None
    hc: str | None = None


class MemoryAccount:
    """One emulated AWS account (its DynamoDB tables and S3 bucket as dicts) shared by every
    in-memory store built over it: two LogEngines over one account are two processes over
    one deployment. Every read and write holds `lock`, so each request is atomic."""

    def __init__(self, *, honour_tokens: bool = True) -> None:
        self.lock = threading.RLock()
        self.faults = Faults()
        self.honour_tokens = honour_tokens
        self.calls: Counter[str] = Counter()  # write attempts per operation (re-sends too)
        self._tokens: dict[str, str] = {}
        self._cids = itertools.count(1)
        # the tables
        self.heads: dict[str, HeadRow] = {}
        self.frames: dict[str, dict[int, FrameRow]] = {}  # log key -> last seq -> frame
        self.tags: dict[str, dict[str, tuple[int, ...]]] = {}  # log key -> tag sort key -> seqs
        self.idem: dict[tuple[str, str], IdemRow] = {}  # (log key, idempotency key)
        # (log key, producer) -> (epoch, seq, last frame key, commit id): producers' state
        self.producers: dict[tuple[str, str], tuple[int, int, int, str]] = {}
        self.segments: dict[str, dict[int, SegmentRow]] = {}  # log key -> last seq -> segment
        self.queues: dict[str, QueueRow] = {}  # queue key -> the queue item
        self.leases: dict[str, dict[int, LeaseRow]] = {}  # queue key -> seq -> lease
        self.sessions: dict[str, SessionRow] = {}
        self.catalogues: dict[str, CatalogueRow] = {}  # log key -> catalogue
        self.quotas: dict[str, QuotaRow] = {}
        self.routers: dict[str, RouterItem] = {}  # router name -> the router's item
        self.dashboards: dict[str, dict[str, DashboardConfig]] = {}  # user -> config id -> it
        self.ws_connections: dict[str, WsConnection] = {}  # connection id -> the connection
        self.ws_subscriptions: dict[str, dict[str, WsSubscription]] = {}  # topic -> conn -> it
        self.flag_slots: dict[str, dict[int, tuple[str, int]]] = {}  # token -> slot -> (owner, exp)
        self.objects: dict[str, bytes] = {}  # the bucket

    def new_cid(self) -> str:
        """A commit id (deterministic: a counter, not random bits)."""
        return f"mc{next(self._cids):022d}"

    # --- request tokens -----------------------------------------------------------------
    def token_for(self, cid: str, send: Send) -> str:
        return self.new_cid() if send.fresh_token else cid

    def seen_token(self, token: str, fingerprint: str) -> bool:
        """True: this request committed before under this token (answer its success again)."""
        if not self.honour_tokens:
            return False
        seen = self._tokens.get(token)
        if seen is None:
            return False
        if seen != fingerprint:
            code = "IdempotentParameterMismatchException"
            raise StorageUnavailable(f"storage error: {code}", detail={"aws_error": code})
        return True

    def remember_token(self, token: str, fingerprint: str) -> None:
        if self.honour_tokens:
            self._tokens[token] = fingerprint

    def forget_tokens(self) -> None:
        """The token window passed: re-sent transactions are judged on their conditions."""
        with self.lock:
            self._tokens.clear()

    # --- faults -------------------------------------------------------------------------
    def arm(
        self,
        op: str,
        fault: Fault,
        *,
        fresh_token: bool = False,
        between: Callable[[], None] | None = None,
    ) -> None:
        self.faults.arm(op, Armed(fault, fresh_token, between))

    def run(self, op: str, attempt: Callable[[Send], T]) -> T:
        """Run a write's attempt(s) as the DynamoDB adapter would send them, with the fault
        armed for `op`, if any. Each attempt takes the lock itself: `between` runs without
        it, so it may call the stores (another process acting while the answer was lost)."""
        armed = self.faults.take(op)
        self._count(op)
        if armed is None:
            return attempt(FIRST)
        if armed.fault is Fault.FAIL_BEFORE_APPLY:
            raise _unknown(op)
        with contextlib.suppress(HeadwaterError, AppendRejected):
            attempt(FIRST)  # whatever storage answers, nobody hears it
        if armed.fault is Fault.LOSE_AFTER_APPLY:
            raise _unknown(op)
        if armed.between is not None:
            armed.between()
        self._count(op)
        return attempt(Send(retried=True, fresh_token=armed.fresh_token))

    def _count(self, op: str) -> None:
        with self.lock:
            self.calls[op] += 1


def _unknown(op: str) -> OutcomeUnknown:
    return OutcomeUnknown(
        f"storage did not confirm the {op}; it may or may not have applied, and will not "
        "apply twice (retry with an idempotency key to learn which)"
    )


class FaultHook:
    """`fail_next` for a fake store whose writes (WRITES) can meet a Fault; `PREFIX` names
    the store in the account's fault table and call counts."""

    PREFIX: str
    WRITES: tuple[str, ...]
    account: MemoryAccount

    def fail_next(
        self,
        op: str,
        fault: Fault,
        *,
        fresh_token: bool = False,
        between: Callable[[], None] | None = None,
    ) -> None:
        """The fault hook: the next call of `op` (one of WRITES) meets `fault`."""
        if op not in self.WRITES:
            raise ValueError(f"{op!r} is not one of {self.WRITES}")
        self.account.arm(f"{self.PREFIX}.{op}", fault, fresh_token=fresh_token, between=between)
