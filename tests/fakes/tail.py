"""In-memory LogTailStore: frames, holes, tag entries and idempotency keys of a
MemoryAccount.

An append is one all-or-nothing commit at its reserved key, judged under the account's lock
with the conditions and answers of the DynamoDB adapter (storage/log_tail.py): a free frame
key (else the slot was lost to a hole), unexpired idempotency keys refused with their
original seqs, the head absent or the deleted marker replaced (creating), the guarded ext
with nothing reserved after it. A commit re-sent under its ClientRequestToken answers its
first success; without the token, a failed condition on an item holding the commit's own id
answers "applied earlier" (True). Reads walk the chain of frames as the adapter does (one
partition: the fake keeps no partition keys) and stop before a key nothing stands at."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from headwater.engine.ports import (
    AppendCommit,
    AppendRejected,
    BlobStore,
    DeleteCommit,
    EvictCommit,
    FrameSummary,
    Head,
    IdemHit,
    KnownRecords,
    ProducerClaim,
    TagEntry,
)
from headwater.engine.records import Frame, StoredRecord, decode_records
from tests.fakes.heads import read_head, stored_head
from tests.fakes.storage import (
    MAX_ITEM_BYTES,
    MAX_TXN_ITEMS,
    FaultHook,
    FrameRow,
    HeadRow,
    IdemRow,
    MemoryAccount,
    Send,
    invalid,
)


def claim_holds(
    claim: ProducerClaim, stored: tuple[int, int, int, str] | None, at: int | None
) -> bool:
    """storage/head_items.py claim_op's condition: the producer takes (epoch, seq) next and
    (`at` given) its last frame is before `at`."""
    if not claim.takes(None if stored is None else (stored[0], stored[1])):
        return False
    return at is None or stored is None or stored[2] < at


def tag_sort_key(tag: str, frame_seq: int) -> str:
    # Entries sort by tag, then frame (the fixed-width suffix keeps any tag recoverable).
    return f"{tag}\x00{frame_seq:020d}"


class MemoryLogTailStore(FaultHook):
    PREFIX = "tail"
    WRITES = ("commit_append", "fill_hole", "commit_delete", "commit_evict", "set_trimmed")

    def __init__(self, account: MemoryAccount, blobs: BlobStore) -> None:
        self.account = account
        self.blobs = blobs

    # --- append -------------------------------------------------------------------------
    def commit_append(self, c: AppendCommit) -> bool:
        acct = self.account
        cid = c.cid or acct.new_cid()
        base = c.new_head or c.expected
        assert base is not None
        log_key = f"{c.topic}#{base.epoch}"
        if c.new_head is None and c.ext_expected is not None and not c.ext_new:
            raise ValueError("ext_new must not be empty")
        if 2 + len(c.tag_entries) + len(c.idem) > MAX_TXN_ITEMS:
            raise invalid("more than 100 items in one transaction")
        keys = [e.key for e in c.idem]
        tags = [(e.tag, e.frame_seq) for e in c.tag_entries]
        if len(set(keys)) < len(keys) or len(set(tags)) < len(tags):
            raise invalid("two operations on one item in one transaction")
        frame = FrameRow(
            c.first_seq,
            c.last_seq,
            c.ts,
            c.payload_bytes,
            c.blob if c.spill_key is None else None,
            c.spill_key,
            c.expires_s,
            cid,
            appended_bytes=c.appended_bytes,
        )
        if frame.size_bytes(log_key) > MAX_ITEM_BYTES:
            raise invalid("item size has exceeded the maximum allowed size")
        fingerprint = f"{cid}:{c!r}"
        if c.single:
            return self._put_frame(c, cid, log_key, frame)

        def attempt(send: Send) -> bool:
            with acct.lock:
                token = acct.token_for(cid, send)
                if acct.seen_token(token, fingerprint):
                    return False  # DynamoDB answers the first success again
                row = acct.heads.get(c.topic)
                owners: list[str | None] = []  # commit ids on the items whose condition failed
                current: Head | None = None
                head_ok = self._head_holds(c, row)
                if not head_ok and row is not None:
                    current = read_head(row.head)
                    owners.append(row.hc)
                old_frame = acct.frames.get(log_key, {}).get(c.first_seq)
                if old_frame is not None:
                    owners.append(old_frame.hc)
                claim_hits: dict[str, tuple[int, int, int] | None] = {}
                for cl in c.claims:
                    got = acct.producers.get((log_key, cl.producer))
                    if not claim_holds(cl, got, c.first_seq):
                        if got is not None:
                            owners.append(got[3])
                        claim_hits[cl.producer] = None if got is None else got[:3]
                hits: dict[str, IdemHit | None] = {}
                for e in c.idem:
                    old = acct.idem.get((log_key, e.key))
                    if old is not None and not old.expires_ms < c.ts:
                        owners.append(old.hc)
                        hits[e.key] = IdemHit(old.first_seq, old.last_seq)
                if not head_ok or old_frame is not None or hits or claim_hits:
                    if cid in owners:
                        return True  # an earlier attempt of this commit applied
                    raise AppendRejected(
                        not head_ok,
                        hits,
                        current,
                        slot_lost=old_frame is not None,
                        claim_hits=claim_hits,
                    )
                self._apply_append(c, cid, log_key, frame, row)
                acct.remember_token(token, fingerprint)
                return False

        return acct.run("tail.commit_append", attempt)

    def _put_frame(self, c: AppendCommit, cid: str, log_key: str, frame: FrameRow) -> bool:
        """The one-write append (storage/log_tail.py _put_frame): a put of the frame at its
        reserved key iff the key is free; a failed condition on a frame holding our commit id
        is our own earlier attempt, anything else there a hole: the slot is lost."""
        acct = self.account

        def attempt(send: Send) -> bool:
            with acct.lock:
                old = acct.frames.get(log_key, {}).get(c.first_seq)
                if old is not None:
                    if old.hc == cid:
                        return True
                    raise AppendRejected(False, {}, None, slot_lost=True)
                acct.frames.setdefault(log_key, {})[c.first_seq] = frame
                return False

        return acct.run("tail.commit_append", attempt)

    def fill_hole(
        self,
        head: Head,
        first_seq: int,
        last_seq: int | None = None,
        void_bytes: int = 0,
        expires_s: int | None = None,
    ) -> Frame:
        acct = self.account
        cid = acct.new_cid()
        hole = FrameRow(
            first_seq,
            first_seq if last_seq is None else last_seq,
            0,
            0,
            None,
            None,
            expires_s,
            cid,
            hole=True,
            void_bytes=void_bytes,
        )

        def attempt(send: Send) -> Frame:
            with acct.lock:
                frames = acct.frames.setdefault(head.log_key, {})
                old = frames.get(first_seq)
                if old is None:
                    frames[first_seq] = hole
                    old = hole
                row = dataclasses.replace(old, deleted=set(old.deleted))
            return self._frame(row)

        return acct.run("tail.fill_hole", attempt)

    @staticmethod
    def _head_holds(c: AppendCommit, row: HeadRow | None) -> bool:
        if c.new_head is not None:
            if c.expected is None:
                return row is None
            return row is not None and row.head.deleted and row.head.epoch == c.expected.epoch
        h = c.expected
        assert h is not None
        if c.ext_expected is None and not c.tag_pending:
            return True  # no head item in the commit
        if row is None:
            return False
        cur = row.head
        if c.ext_expected is None:
            return cur.epoch == h.epoch and not cur.deleted
        # serialized: the head as the writer read it (seqs, ext), and the caps
        return (
            cur.epoch == h.epoch
            and not cur.deleted
            and cur.ext == c.ext_expected
            and cur.head_seq == h.head_seq
            and (c.max_count is None or cur.count <= c.max_count)
            and (c.max_bytes is None or cur.bytes <= c.max_bytes)
        )

    def _apply_append(
        self, c: AppendCommit, cid: str, log_key: str, frame: FrameRow, row: HeadRow | None
    ) -> None:
        acct = self.account
        if c.new_head is not None:
            acct.heads[c.topic] = HeadRow(stored_head(c.new_head), cid)
        elif row is not None and (c.ext_expected is not None or c.tag_pending):
            cur = row.head
            pending = dict(cur.tag_pending)
            if c.tag_pending:
                pending[c.first_seq] = c.last_seq
            if c.ext_expected is not None:  # serialized: the head moves with the frame
                cur = cur.reserved(c.last_seq - c.first_seq + 1, c.payload_bytes, c.ts)
            row.head = dataclasses.replace(
                cur,
                tag_pending=pending,
                ext=c.ext_new if c.ext_expected is not None and c.ext_new else cur.ext,
            )
            row.hc = cid
        acct.frames.setdefault(log_key, {})[c.first_seq] = frame
        entries = acct.tags.setdefault(log_key, {})
        for e in c.tag_entries:
            entries[tag_sort_key(e.tag, e.frame_seq)] = tuple(e.seqs)
        for ie in c.idem:
            acct.idem[(log_key, ie.key)] = IdemRow(ie.first_seq, ie.last_seq, ie.expires_ms, cid)
        for cl in c.claims:
            acct.producers[(log_key, cl.producer)] = (cl.epoch, cl.seq, c.first_seq, cid)

    # --- reads --------------------------------------------------------------------------
    def _frame(self, row: FrameRow, records: list[StoredRecord] | None = None) -> Frame:
        if row.hole:
            return Frame(
                row.first_seq, row.last_seq, row.ts, [], hole=True, void_bytes=row.void_bytes
            )
        if records is None:
            if row.spill_key is not None:
                blob = self.blobs.get(row.spill_key)
            else:
                assert row.blob is not None
                blob = row.blob
            records = decode_records(blob, row.first_seq, row.ts)
        return Frame(
            first_seq=row.first_seq,
            last_seq=row.last_seq,
            ts=row.ts,
            records=records,
            deleted=frozenset(row.deleted),
            deleted_count=row.deleted_count,
            deleted_bytes=row.deleted_bytes,
            payload_bytes=row.size,
        )

    def _chain(self, log_key: str, after_seq: int, upto_seq: int) -> list[FrameRow]:
        """The chain (storage/frame_chain.py): the frame holding after_seq + 1, then the one
        keyed by its last seq + 1, ...; it stops before the first key nothing stands at, or
        past upto_seq. Copies of the rows."""
        out: list[FrameRow] = []
        with self.account.lock:
            frames = self.account.frames.get(log_key, {})
            key = after_seq + 1
            row = frames.get(key)
            if row is None:
                below = [k for k in frames if k <= after_seq]
                if below and frames[max(below)].last_seq > after_seq:
                    row = frames[max(below)]
            while row is not None and row.first_seq <= upto_seq:
                out.append(dataclasses.replace(row, deleted=set(row.deleted)))
                row = frames.get(row.last_seq + 1)
        return out

    def read_frames(
        self,
        head: Head,
        after_seq: int,
        upto_seq: int,
        max_records: int,
        max_bytes: int = 0,
        known: KnownRecords | None = None,
    ) -> list[Frame]:
        """The chain's frames holding seqs in (after_seq, upto_seq], until max_records
        records after after_seq or max_bytes payload bytes are reached (at least one)."""
        if upto_seq <= after_seq:
            return []
        chosen: list[FrameRow] = []
        got = nbytes = 0
        for row in self._chain(head.log_key, after_seq, upto_seq):
            chosen.append(row)
            got += row.last_seq - max(row.first_seq, after_seq + 1) + 1
            nbytes += row.size
            if got >= max_records or 0 < max_bytes <= nbytes:
                break
        frames = []
        for r in chosen:
            recs = known(r.first_seq, r.last_seq) if known and r.spill_key is not None else None
            frames.append(self._frame(r, recs))
        return frames

    def get_frames(self, head: Head, frame_seqs: Sequence[int]) -> dict[int, Frame]:
        with self.account.lock:
            frames = self.account.frames.get(head.log_key, {})
            rows = [
                dataclasses.replace(frames[s], deleted=set(frames[s].deleted))
                for s in sorted(set(frame_seqs))
                if s in frames
            ]
        return {r.first_seq: self._frame(r) for r in rows}

    def get_producer(self, head: Head, producer: str) -> tuple[int, int, int] | None:
        with self.account.lock:
            got = self.account.producers.get((head.log_key, producer))
            return None if got is None else got[:3]

    def get_idempotency(self, head: Head, key: str, now_ms: int) -> IdemHit | None:
        with self.account.lock:
            row = self.account.idem.get((head.log_key, key))
            if row is None or row.expires_ms < now_ms:
                return None
            return IdemHit(row.first_seq, row.last_seq)

    def tag_lookup(self, head: Head, tag: str, prefix: bool) -> list[TagEntry]:
        needle = tag if prefix else tag + "\x00"
        with self.account.lock:
            entries = self.account.tags.get(head.log_key, {})
            out: list[TagEntry] = []
            for sk in sorted(entries):
                if not sk.startswith(needle):
                    continue
                entry_tag, frame_seq = sk[:-21], int(sk[-20:])
                if prefix or entry_tag == tag:
                    out.append(TagEntry(entry_tag, frame_seq, entries[sk]))
            return out

    def write_tag_entries(self, head: Head, entries: Sequence[TagEntry]) -> None:
        with self.account.lock:
            table = self.account.tags.setdefault(head.log_key, {})
            for e in entries:
                table[tag_sort_key(e.tag, e.frame_seq)] = tuple(e.seqs)

    def frame_summaries(
        self, head: Head, after_seq: int, upto_seq: int, limit: int, *, every: bool = False
    ) -> list[FrameSummary]:
        """At most `limit` of the chain's frames with last_seq > after_seq and first_seq <=
        upto_seq (`every`: every frame item keyed in (after_seq, upto_seq])."""
        if every:
            with self.account.lock:
                frames = self.account.frames.get(head.log_key, {})
                rows = [frames[k] for k in sorted(frames) if after_seq < k <= upto_seq]
        else:
            rows = self._chain(head.log_key, after_seq, upto_seq)
        return [
            FrameSummary(
                r.first_seq,
                r.last_seq,
                r.ts,
                r.size,
                r.deleted_count,
                r.deleted_bytes,
                r.spill_key,
                r.expires_s,
                hole=r.hole,
                void_bytes=r.void_bytes,
            )
            for r in rows[:limit]
        ]

    # --- deletes and tiering ------------------------------------------------------------
    def commit_delete(self, d: DeleteCommit) -> bool:
        acct = self.account
        cid = acct.new_cid()
        log_key = f"{d.topic}#{d.epoch}"
        if 1 + len(d.frames) + len(d.segments) > MAX_TXN_ITEMS:
            raise invalid("more than 100 items in one transaction")
        fingerprint = f"{cid}:{d!r}"

        def attempt(send: Send) -> bool:
            with acct.lock:
                token = acct.token_for(cid, send)
                if acct.seen_token(token, fingerprint):
                    return True
                row = acct.heads.get(d.topic)
                head_ok = (
                    row is not None
                    and row.head.epoch == d.epoch
                    and row.head.del_ver == d.expected_del_ver
                    and row.head.sealed_through == d.expected_sealed
                    and not row.head.deleted
                )
                frames = acct.frames.get(log_key, {})
                segments = acct.segments.get(log_key, {})
                marks_ok = all(
                    fd.key_seq in frames
                    and frames[fd.key_seq].deleted_count == fd.expected_deleted_count
                    for fd in d.frames
                ) and all(
                    fd.key_seq in segments
                    and segments[fd.key_seq].item.deleted_count == fd.expected_deleted_count
                    for fd in d.segments
                )
                if not head_ok or not marks_ok:
                    # only the head item comes back (ALL_OLD): our id on it = applied earlier
                    return not head_ok and row is not None and row.hc == cid
                for fd in d.frames:
                    f = frames[fd.key_seq]
                    grown = dataclasses.replace(f, deleted=f.deleted | set(fd.seqs))
                    if grown.size_bytes(log_key) > MAX_ITEM_BYTES:
                        raise invalid("item size has exceeded the maximum allowed size")
                assert row is not None
                for fd in d.frames:
                    f = frames[fd.key_seq]
                    f.deleted |= set(fd.seqs)
                    f.deleted_count += len(fd.seqs)
                    f.deleted_bytes += fd.bytes
                for fd in d.segments:
                    s = segments[fd.key_seq]
                    s.item = dataclasses.replace(
                        s.item,
                        deleted=s.item.deleted | frozenset(fd.seqs),
                        deleted_count=s.item.deleted_count + len(fd.seqs),
                        deleted_bytes=s.item.deleted_bytes + fd.bytes,
                    )
                cur = row.head
                row.head = dataclasses.replace(
                    cur,
                    del_ver=cur.del_ver + 1,
                    count=cur.count - d.count_delta,
                    bytes=cur.bytes - d.bytes_delta,
                    earliest_seq=d.new_earliest if d.new_earliest is not None else cur.earliest_seq,
                )
                row.hc = cid
                acct.remember_token(token, fingerprint)
                return True

        return acct.run("tail.commit_delete", attempt)

    def delete_frames(self, head: Head, frame_seqs: Sequence[int]) -> None:
        with self.account.lock:
            frames = self.account.frames.get(head.log_key, {})
            for s in frame_seqs:
                frames.pop(s, None)

    def commit_evict(self, c: EvictCommit) -> bool:
        h = c.head

        def holds(cur: Head) -> bool:
            return (
                cur.epoch == h.epoch
                and cur.del_ver == h.del_ver
                and cur.earliest_seq == h.earliest_seq
                and cur.sealed_through == h.sealed_through
            )

        def moved(cur: Head) -> Head:
            return dataclasses.replace(
                cur,
                earliest_seq=c.new_earliest,
                evict_floor=c.new_floor,
                count=cur.count - c.count_delta,
                bytes=cur.bytes - c.bytes_delta,
                unsealed_bytes=cur.unsealed_bytes - c.unsealed_bytes_delta,
                evictions=c.evictions if c.evictions else cur.evictions,
            )

        return self._conditional("tail.commit_evict", h.topic, holds, moved)

    def set_trimmed(self, head: Head, trimmed_through: int) -> bool:
        return self._conditional(
            "tail.set_trimmed",
            head.topic,
            lambda cur: cur.epoch == head.epoch and cur.trimmed_through == head.trimmed_through,
            lambda cur: dataclasses.replace(cur, trimmed_through=trimmed_through),
        )

    def _conditional(
        self, op: str, topic: str, holds: Callable[[Head], bool], new: Callable[[Head], Head]
    ) -> bool:
        """A retry-safe conditional update of a live head (storage/ddb.py write_once)."""
        acct = self.account
        cid = acct.new_cid()

        def attempt(send: Send) -> bool:
            with acct.lock:
                row = acct.heads.get(topic)
                if row is None or row.head.deleted or not holds(row.head):
                    return row is not None and row.hc == cid
                row.head = new(row.head)
                row.hc = cid
                return True

        return acct.run(op, attempt)
