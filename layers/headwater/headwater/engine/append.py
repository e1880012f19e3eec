"""Appends with group commit: concurrent appends to one topic in this process queue behind
one writer task, which commits them in groups (one frame per group). Seqs come from the
topic's counter (HeadStore.reserve: one atomic step on the head item, which never conflicts
with other writers), and the frame goes at its reserved key (docs/storage.md "The
sequencer"). Guards (a protocol layer's producer fencing, a stream's closed flag),
idempotency keys and discard:"reject" caps are judged per request inside the group, on the
head this process knows; the reservation is conditional on what they were judged on, so a
stale head costs a re-judgement, never a wrong verdict.

One piece on purpose (over 600 lines): the group commit is one state machine, judge ->
reserve -> commit -> learn or fill -> settle, whose invariants span its steps (a reservation
is conditional on the head the guards judged; a reservation that is not written is filled
as a hole, never left behind; a lost answer is settled from what storage holds, never
guessed). The values it shares with the rest of the engine are in values.py, the retry
budget and the writer queue are the few lines above `Appender`; cutting the steps apart
would put one transaction's reasoning in several files."""

from __future__ import annotations

import dataclasses
import logging
import random
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from headwater.engine import config as topic_config
from headwater.engine.core import LogCore
from headwater.engine.ports import (
    MAX_TXN_ITEMS,
    SPILL_PREFIX,
    AppendCommit,
    AppendRejected,
    Head,
    IdemEntry,
    IdemHit,
    Reservation,
    TagEntry,
)
from headwater.engine.quotas import TOPICS, TOTAL_BYTES
from headwater.engine.records import (
    Frame,
    NewRecord,
    compress_frame,
    encode_records,
    stored,
)
from headwater.engine.retention import frame_expiry_s
from headwater.engine.topics import Topics
from headwater.engine.upkeep import UpkeepTrigger
from headwater.engine.values import AppendRequest, AppendResult, ClaimRefused, Settle
from headwater.errors import (
    HeadwaterError,
    InvalidRequest,
    OutcomeUnknown,
    StorageUnavailable,
    Throttled,
    TopicFull,
    TopicNotFound,
)
from headwater.names import object_key_component

if TYPE_CHECKING:
    import asyncio

log = logging.getLogger(__name__)
# When an append that keeps losing races to other writers gives up with 503 + Retry-After
# (nothing of it applied). Lost races are contention only when they come fast: an attempt
# slowed by storage (botocore backs off up to 20 s per call on throttling and 5xx) loses to
# whoever committed meanwhile, and giving up on those turns slow storage into refusals.
APPEND_BUDGET_S = 20.0  # past it, give up once the lost races show contention:
MIN_CONFLICTS_TO_GIVE_UP = 4  # at least this many lost races
CONTENTION_RACES_PER_S = 1.0  # and at least this many per second of the append so far
# Never past this (then any lost race gives up): below the Timeout of every function that
# appends, by 5 s (template.yaml; a tests/infra check), so a Lambda answers a refusal
# instead of timing out on an unknown outcome.
APPEND_LIMIT_S = 25.0


def _gives_up(conflicts: int, elapsed: float) -> bool:
    """Whether an append that has just lost its `conflicts`-th race gives up. Time spent in
    slow or retried storage calls is not contention: a few races lost around it must not turn
    an append that can still succeed into a 503 (see APPEND_BUDGET_S)."""
    if elapsed > APPEND_LIMIT_S:
        return True
    return elapsed > APPEND_BUDGET_S and conflicts >= max(
        MIN_CONFLICTS_TO_GIVE_UP, CONTENTION_RACES_PER_S * elapsed
    )


@dataclass(slots=True)
class _Pending:
    """An append waiting for its group commit, with the future its caller awaits."""

    req: AppendRequest
    future: asyncio.Future[AppendResult]
    n: int


@dataclass(slots=True)
class GuardState:
    """What the guards of one group commit decided: the ext to write, each admitted
    request's note."""

    ext: str
    notes: dict[int, Any]


class _NotApplied(Exception):
    """A write whose answer never came is known not to have applied (Appender._learn)."""


class Retry(NamedTuple):
    """An attempt that did not settle every request: the head to retry on, whether it was
    refused (a head that moved, or a slot lost to a reader's fill), and whether that head
    was read from storage (else this process's own, on which a verdict that writes nothing
    is judged again on a read)."""

    head: Head | None
    conflicted: bool
    verified: bool = True


@dataclass(slots=True)
class _Writer:
    """A topic's queue of pending appends and the task committing them in groups."""

    queue: deque[_Pending] = field(default_factory=deque)
    task: asyncio.Task[None] | None = None


class Appender:
    def __init__(self, core: LogCore, topics: Topics, upkeep: UpkeepTrigger) -> None:
        self.core = core
        self.topics = topics
        self.upkeep = upkeep
        self._writers: dict[str, _Writer] = {}

    async def append(self, topic: str, req: AppendRequest) -> AppendResult:
        import asyncio  # not at the top: see engine/__init__.py

        loop = asyncio.get_running_loop()
        pending = _Pending(req, loop.create_future(), len(req.records))
        writer = self._writers.setdefault(topic, _Writer())
        writer.queue.append(pending)
        if writer.task is None or writer.task.done():
            writer.task = loop.create_task(self._drain(topic, writer))
        return await pending.future

    async def _drain(self, topic: str, writer: _Writer) -> None:
        import asyncio  # not at the top: see engine/__init__.py

        limit = self.core.settings.group_commit_max_records
        while writer.queue:
            group: list[_Pending] = [writer.queue.popleft()]
            total = group[0].n
            while writer.queue and total + writer.queue[0].n <= limit and len(group) < 64:
                p = writer.queue.popleft()
                group.append(p)
                total += p.n
            # Live readers of this process leave storage alone while it lasts: this commit
            # wakes them (engine/reads.py, DiffReader.committing)
            self.core.committing[topic] = time.monotonic()
            try:
                results = await self.core.io(self.commit_group, topic, [p.req for p in group])
            except BaseException as exc:  # every waiter learns of the failure
                self.core.head_cache.pop(topic, None)  # the commit's outcome may be unknown
                for p in group:
                    if not p.future.done():
                        p.future.set_exception(exc)
                if not isinstance(exc, Exception):
                    raise
                continue
            finally:
                self.core.committing.pop(topic, None)
            for p, r in zip(group, results, strict=True):
                if p.future.done():
                    continue
                if isinstance(r, BaseException):
                    p.future.set_exception(r)
                else:
                    p.future.set_result(r)
            self.core.notifier.notify(topic)
            self.upkeep.after_commit(topic)
        if writer.task is asyncio.current_task() and not writer.queue:
            self._writers.pop(topic, None)

    def commit_group(
        self, topic: str, reqs: list[AppendRequest]
    ) -> list[AppendResult | HeadwaterError]:
        results: list[AppendResult | HeadwaterError | None] = [None] * len(reqs)
        head = self.core.head_cache.get(topic)
        verified = head is None  # read from storage now, not this process's last commit
        if head is None:
            head = self.core.heads.get(topic)
        started = time.monotonic()
        conflicts = 0
        while True:
            live = [i for i, r in enumerate(results) if r is None]
            if not live:
                break
            outcome = self.try_commit(topic, head, reqs, live, results, verified)
            if outcome is None:
                break
            # retries start from the head the refusal returned (or a read)
            head, conflicted, verified = outcome
            if conflicted:
                conflicts += 1
                log.debug(
                    "append to %s lost race %d at %.2fs (%d requests, keyed %s)",
                    topic,
                    conflicts,
                    time.monotonic() - started,
                    len(live),
                    any(reqs[i].idempotency_key for i in live),
                )
                if _gives_up(conflicts, time.monotonic() - started):
                    raise StorageUnavailable(
                        "append kept conflicting with other writers; retry",
                        headers={"Retry-After": "1"},
                    )
                # Jittered backoff keeps racing processes fair under sustained contention.
                if conflicts > 2:
                    time.sleep(random.uniform(0, min(0.05, 0.001 * 2**conflicts)))
        return [r for r in results if r is not None]

    def try_commit(
        self,
        topic: str,
        head: Head | None,
        reqs: list[AppendRequest],
        live: list[int],
        results: list[AppendResult | HeadwaterError | None],
        verified: bool = True,
    ) -> Retry | None:
        """One attempt. Fills `results` for requests it settles; returns None when done, or
        the Retry to go on with for the remaining requests.

        Guards may judge on this process's cached head: when anything commits, the condition
        proved that head current, and every verdict with it. Verdicts that write nothing
        (a duplicate, a conflict) on an unverified head are judged again on a read."""
        creating = head is None or head.deleted
        creator: int | None = None
        if creating:
            for i in live:
                if reqs[i].create is False:
                    results[i] = TopicNotFound(topic)
            live = [i for i in live if results[i] is None]
            if not live:
                return None
            creator = live[0]
            fresh = topic_config.resolve(reqs[creator].config or {})
            base = self.topics.fresh_head(topic, head, fresh, reqs[creator].base_seq)
        else:
            assert head is not None
            base = head
            self._known_keys(base, reqs, live, results)
            live = [i for i in live if results[i] is None]
            if not live:
                return None
        cfg = base.cfg

        # discard:"reject" caps: admit requests in order while they fit, reject the rest.
        cap_n, cap_b = cfg.cap_records, cfg.cap_bytes
        reject = cfg.rejects_over_cap
        count, nbytes = base.count, base.bytes
        admitted: list[int] = []
        seen_keys: dict[str, int] = {}
        claimed: set[str] = set()
        window = cfg.idempotency_window_ms
        ext = base.ext
        guarded = False
        provisional: list[int] = []  # settled by a guard in this attempt: redo on a retry
        notes: dict[int, Any] = {}
        for i in live:
            r = reqs[i]
            key = r.idempotency_key if window > 0 else None
            if key is not None and key in seen_keys:
                continue  # same key twice in one group: settled from the first below
            claim = r.claim
            if claim is not None and claim.producer in claimed:
                continue  # one write per producer per commit: the next one is next attempt's
            n, b = len(r.records), sum(rec.size for rec in r.records)
            if reject and ((cap_n > 0 and count + n > cap_n) or (cap_b > 0 and nbytes + b > cap_b)):
                results[i] = TopicFull(
                    f"topic {topic!r} is full (discard: reject)",
                    detail={"topic": topic, "cap_records": cap_n, "cap_bytes": cap_b},
                )
                continue
            if r.guard is not None:
                guarded = True
                tail = base.head_seq + (count - base.count)  # after the requests admitted so far
                try:
                    verdict = r.guard(base, ext, tail)
                except HeadwaterError as exc:
                    results[i] = exc
                    provisional.append(i)
                    continue
                if isinstance(verdict, Settle):
                    results[i] = AppendResult(0, 0, tail, False, True, verdict.note)
                    provisional.append(i)
                    continue
                ext = verdict.ext
                notes[i] = verdict.note
            count, nbytes = count + n, nbytes + b
            admitted.append(i)
            if key is not None:
                seen_keys[key] = i
            if claim is not None:
                claimed.add(claim.producer)
        if not admitted:
            if provisional and not verified:
                for i in provisional:
                    results[i] = None
                return Retry(self.core.heads.get(topic), False)
            self._settle_duplicates(reqs, live, results, seen_keys, base)
            return None

        # Resource caps (spec §11): a new topic takes a max_topics slot, the payload counts
        # against max_total_bytes; both are given back if this attempt does not commit.
        payload = sum(rec.size for i in admitted for rec in reqs[i].records)
        reserved = self._reserve_append(creating, payload)
        if isinstance(reserved, Throttled):
            for i in admitted:
                results[i] = reserved
            self._settle_duplicates(reqs, live, results, seen_keys, base)
            return None
        committed = False
        try:
            outcome, committed = self._commit_admitted(
                topic,
                head,
                base,
                reqs,
                live,
                admitted,
                seen_keys,
                results,
                creating,
                creator,
                GuardState(ext, notes) if guarded else None,
            )
            if outcome is not None:
                for i in provisional:  # decided on a head that has since moved
                    results[i] = None
            return outcome
        except OutcomeUnknown:
            # It may have applied: keep what it reserved. A counter left high is corrected
            # by the recount a refused reservation runs; one left low would let a cap pass.
            committed = True
            raise
        finally:
            if not committed:
                self.core.quota_release(TOPICS, reserved[0])
                self.core.quota_release(TOTAL_BYTES, reserved[1])

    def _known_keys(
        self,
        head: Head,
        reqs: list[AppendRequest],
        live: list[int],
        results: list[AppendResult | HeadwaterError | None],
    ) -> None:
        """Settle the requests whose idempotency key already holds seqs (a client's retry)
        before any seq is reserved: a retry then costs one read, not a reservation filled as
        a hole. A key taken between this read and the commit still refuses the commit."""
        if head.cfg.idempotency_window_ms <= 0:
            return
        now = self.core.clock()
        seen: dict[str, IdemHit | None] = {}
        for i in live:
            key = reqs[i].idempotency_key
            if key is None:
                continue
            if key not in seen:
                seen[key] = self.core.tail.get_idempotency(head, key, now)
            hit = seen[key]
            if hit is not None:
                results[i] = AppendResult(hit.first_seq, hit.last_seq, head.head_seq, False, True)

    def _reserve_append(self, creating: bool, payload: int) -> tuple[int, int] | Throttled:
        if self.core.quotas is None:
            return 0, 0
        topic_slot = 0
        try:
            if creating:
                self.core.quotas.reserve(TOPICS, 1)
                topic_slot = 1
            byte_slot = payload if self.core.quotas.bytes_enabled else 0
            self.core.quotas.reserve(TOTAL_BYTES, byte_slot)
        except Throttled as exc:
            self.core.quota_release(TOPICS, topic_slot)
            return exc
        return topic_slot, byte_slot

    def _commit_admitted(
        self,
        topic: str,
        head: Head | None,
        base: Head,
        reqs: list[AppendRequest],
        live: list[int],
        admitted: list[int],
        seen_keys: dict[str, int],
        results: list[AppendResult | HeadwaterError | None],
        creating: bool,
        creator: int | None,
        guard: GuardState | None = None,
    ) -> tuple[Retry | None, bool]:
        """Write the admitted requests as one frame: (the Retry, or None when settled;
        whether the frame committed)."""
        # Append time never goes back on a topic in one process; across processes the
        # reservation returns the last writer's time and the frame takes the later one. An
        # append-time hint may pick an earlier time than now, but not one before the last.
        hints = [h for i in admitted if (h := reqs[i].ts_hint) is not None]
        now = max(hints) if len(hints) == len(admitted) else self.core.clock()
        now = max(now, base.last_write_ts or 0)
        cfg = base.cfg
        epoch = base.epoch
        window = cfg.idempotency_window_ms
        records: list[NewRecord] = []
        for i in admitted:
            records.extend(reqs[i].records)
        n = len(records)
        payload = sum(r.size for r in records)
        blob = encode_records(records)
        spill_key: str | None = None
        # Spilled before the seqs are reserved: a reservation's key stays open only for the
        # one write that fills it, not an S3 PUT too.
        if len(blob) > self._spill_threshold(len(admitted)):
            spill_key = f"{SPILL_PREFIX}{object_key_component(topic)}/{epoch}/{uuid.uuid4().hex}"
            self.core.blobs.put(spill_key, blob)
        else:
            blob = compress_frame(blob)
        # A guarded append that changes the ext is serialized: its head moves with its frame
        # in one transaction, on the head as read (AppendCommit.ext_expected); every other
        # append takes its seqs from the counter first.
        serial = guard is not None and not creating and guard.ext != base.ext
        reject = cfg.rejects_over_cap
        cap_n, cap_b = cfg.cap_records, cfg.cap_bytes
        max_count = cap_n - n if reject and cap_n > 0 and not creating else None
        max_bytes = cap_b - payload if reject and cap_b > 0 and not creating else None
        rsv: Reservation | None = None
        if creating or serial:
            first, ts = base.head_seq + 1, now
        else:
            try:
                rsv = self.core.heads.reserve(
                    base,
                    n,
                    payload,
                    now,
                    ext=base.ext if guard is not None else None,
                    max_count=max_count,
                    max_bytes=max_bytes,
                    # a saturated topic answers 429 unless a request would rather wait
                    patient=not all(reqs[i].backpressure for i in admitted),
                )
            except Throttled:
                if spill_key:  # the topic is saturated: the client backs off (429)
                    self.core.blobs.delete_many([spill_key])
                raise
            except AppendRejected as rej:
                # The head is not what the guards, caps or config were judged on: judge again
                # on the head the refusal returned (no seqs were taken).
                if spill_key:
                    self.core.blobs.delete_many([spill_key])
                self.core.head_cache.pop(topic, None)
                cur = rej.current_head or self.core.heads.get(topic)
                return Retry(cur, True), False
            first, ts = rsv.first_seq, rsv.ts
        last = first + n - 1
        spans: dict[int, tuple[int, int]] = {}
        seq = first
        for i in admitted:
            k = len(reqs[i].records)
            spans[i] = (seq, seq + k - 1)
            seq += k
        tags: dict[str, list[int]] = {}
        for offset, rec in enumerate(records):
            if rec.tag is not None:
                tags.setdefault(rec.tag, []).append(first + offset)
        entries = [TagEntry(t, first, tuple(s)) for t, s in tags.items()]
        idem = [
            IdemEntry(reqs[i].idempotency_key, *spans[i], ts + window)  # type: ignore[arg-type]
            for i in admitted
            if reqs[i].idempotency_key is not None and window > 0
        ]
        n_claims = sum(1 for i in admitted if reqs[i].claim is not None)
        inline_tags = len(entries) + len(idem) + n_claims + 2 <= MAX_TXN_ITEMS
        if len(idem) + n_claims + 2 > MAX_TXN_ITEMS:
            if rsv is not None:
                self._abandon(base, rsv, payload)
            raise InvalidRequest("too many idempotent writes in one group")

        new_head: Head | None = None
        if creating:
            new_head = dataclasses.replace(
                base,
                head_seq=last,
                earliest_seq=base.earliest_seq,
                count=n,
                bytes=payload,
                last_write_ts=now,
                tag_pending={} if inline_tags or not entries else {first: last},
                unsealed_bytes=payload,
                ext=guard.ext if guard is not None else base.ext,
                appended=base.appended + n,
                appended_bytes=base.appended_bytes + payload,
            )
        appended_bytes = rsv.appended_bytes if rsv is not None else base.appended_bytes + payload
        tag_pending = bool(entries) and not inline_tags and not creating
        claims = [c for i in admitted if (c := reqs[i].claim) is not None]
        commit = AppendCommit(
            topic=topic,
            expected=head,
            new_head=new_head,
            first_seq=first,
            last_seq=last,
            ts=ts,
            blob=None if spill_key else blob,
            spill_key=spill_key,
            payload_bytes=payload,
            tag_entries=entries if inline_tags else [],
            tag_pending=tag_pending,
            idem=idem,
            expires_s=frame_expiry_s(cfg, self.core.settings.tiering, ts),
            ext_expected=base.ext if serial else None,
            ext_new=guard.ext if serial and guard is not None else None,
            max_count=max_count if serial else None,
            max_bytes=max_bytes if serial else None,
            # nothing but the frame to write: one conditional put at the reserved key
            single=rsv is not None
            and not idem
            and not claims
            and not (entries and inline_tags)
            and not tag_pending,
            appended_bytes=appended_bytes,
            claims=claims,
        )
        try:
            try:
                repeated = self.core.tail.commit_append(commit)
            except OutcomeUnknown:
                if rsv is None or not self._learn(base, rsv, payload):
                    raise
                repeated = True  # our frame stands at our seqs: it applied
        except _NotApplied:
            # Storage never confirmed the write, and our hole at its seqs now stands where it
            # would have gone: it did not apply, and never will. Reserve again.
            if spill_key:
                self.core.blobs.delete_many([spill_key])
            self.core.head_cache.pop(topic, None)
            assert rsv is not None
            return Retry(rsv.head, True), False
        except AppendRejected as rej:
            if spill_key:
                self.core.blobs.delete_many([spill_key])
            self.core.head_cache.pop(topic, None)
            self._refused_claims(reqs, admitted, results, rej)
            if rsv is None:
                # Created (or recreated) by somebody else first, or (serialized) the head moved.
                return Retry(rej.current_head or self.core.heads.get(topic), True), False
            if rej.slot_lost:
                # A reader filled our slot as a hole before the frame got there: those seqs
                # are gone; reserve again.
                return Retry(rsv.head, True), False
            # Refused as a whole (an idempotency key already taken, or the ext moved): the
            # seqs are ours alone, so we fill them ourselves and readers do not wait on them.
            self._abandon(base, rsv, payload)
            for i in admitted:
                key = reqs[i].idempotency_key
                if key is not None and key in rej.idem_hits:
                    hit = rej.idem_hits[key] or self.core.tail.get_idempotency(base, key, ts)
                    if hit is not None:
                        results[i] = AppendResult(
                            hit.first_seq, hit.last_seq, rsv.head.head_seq, False, True
                        )
            if rej.head_conflict or not (rej.idem_hits or rej.claim_hits):
                return Retry(rej.current_head or self.core.heads.get(topic), True), False
            return Retry(rsv.head, False), False
        # Committed.
        if new_head is not None:
            committed = new_head
        elif rsv is not None:
            committed = rsv.head
        else:
            committed = base.reserved(n, payload, ts)
        if guard is not None and not creating:
            committed = dataclasses.replace(committed, ext=guard.ext)
        if repeated:
            # A lost response, retried: our commit applied, but others may have appended
            # since, so the head after it is not known here.
            self.core.head_cache.pop(topic, None)
        else:
            self.core.head_cache[topic] = committed
            self.core.known.note(committed)
        frame = Frame(
            first_seq=first,
            last_seq=last,
            ts=ts,
            records=[stored(r, first + k, ts) for k, r in enumerate(records)],
            payload_bytes=payload,
        )
        self.core.cache.put(committed.log_key, frame, committed.del_ver)
        notes = guard.notes if guard is not None else {}
        for i in admitted:
            results[i] = AppendResult(
                *spans[i], last, creating and i == creator, False, notes.get(i), ts
            )
        self._settle_duplicates(reqs, live, results, seen_keys, committed)
        if entries and not inline_tags:
            try:
                self.core.tail.write_tag_entries(committed, entries)
                self.core.heads.clear_tag_pending(committed, first)
            except HeadwaterError:
                # The records are committed, so the write must succeed; the head still marks
                # the frame tag-pending and the next tag delete indexes it first.
                log.warning("tag index for %s frame %d left pending", topic, last, exc_info=True)
        return None, True

    @staticmethod
    def _refused_claims(
        reqs: list[AppendRequest],
        admitted: list[int],
        results: list[AppendResult | HeadwaterError | None],
        rej: AppendRejected,
    ) -> None:
        """Settle the requests whose producer refused its claim: a producer that does not take
        the write (a duplicate, a stale epoch, a gap) is the request's answer; one that would
        take it but wrote after these seqs (another process reserved earlier and committed
        later) tries again on fresh seqs, after its last write."""
        for i in admitted:
            claim = reqs[i].claim
            if claim is None or claim.producer not in rej.claim_hits:
                continue
            got = rej.claim_hits[claim.producer]
            stored = None if got is None else (got[0], got[1])
            if not claim.takes(stored):
                results[i] = ClaimRefused(claim.producer, stored)

    def _abandon(self, head: Head, rsv: Reservation, payload: int) -> None:
        """Fill our own reserved seqs as a hole (we know their span and bytes), so no reader
        waits for them. Best effort: a reader fills what we could not, after the timeout."""
        try:
            self._fill_own(head, rsv, payload)
        except HeadwaterError:
            log.warning(
                "could not fill abandoned seqs %d-%d of %s",
                rsv.first_seq,
                rsv.last_seq,
                head.topic,
                exc_info=True,
            )

    def _learn(self, head: Head, rsv: Reservation, payload: int) -> bool:
        """Whether a commit storage never confirmed applied, learned by putting a hole at its
        reserved seqs (CORFU's fill): nobody but its writer puts a frame there, so a frame
        standing there is ours (True), and a hole (this one, or a reader's) means it did not
        and never will (_NotApplied). False: storage would not answer that either."""
        try:
            got = self._fill_own(head, rsv, payload)
        except HeadwaterError:
            return False
        if got.hole:
            raise _NotApplied
        return True

    def _fill_own(self, head: Head, rsv: Reservation, payload: int) -> Frame:
        """A hole over our reserved seqs, iff nothing stands at their key: the frame standing
        there afterwards. When a reader has put a hole at the first seq already (we were
        past the timeout), the rest are ours to fill too."""
        expires = frame_expiry_s(head.cfg, self.core.settings.tiering, rsv.ts)
        got = self.core.tail.fill_hole(head, rsv.first_seq, rsv.last_seq, payload, expires)
        nxt = got.last_seq + 1
        while got.hole and nxt <= rsv.last_seq:
            more = self.core.tail.fill_hole(head, nxt, rsv.last_seq, 0, expires)
            nxt = more.last_seq + 1
        return got

    def _spill_threshold(self, requests: int) -> int:
        """Frames above this go to S3. A frame of several requests (concurrent writers) may
        spill sooner: past ~8 KB one S3 PUT costs less than the frame's write units."""
        settings = self.core.settings
        group = settings.group_spill_threshold_bytes
        if requests > 1 and group:
            return min(group, settings.spill_threshold_bytes)
        return settings.spill_threshold_bytes

    @staticmethod
    def _settle_duplicates(
        reqs: list[AppendRequest],
        live: list[int],
        results: list[AppendResult | HeadwaterError | None],
        seen_keys: dict[str, int],
        head: Head,
    ) -> None:
        for i in live:
            key = reqs[i].idempotency_key
            if results[i] is None and key is not None and key in seen_keys:
                orig = results[seen_keys[key]]
                if isinstance(orig, AppendResult):
                    results[i] = AppendResult(
                        orig.first_seq, orig.last_seq, head.head_seq, False, True
                    )
                elif orig is not None:
                    results[i] = orig
