"""In-memory LeaseStore: work-queue leases of a MemoryAccount (the queue item with the claim
cursor and dead-letter count, one lease per job handed out). Each write is one transaction
judged under the account's lock and answers as storage/leases.py does: the failed positions
(0 = the cursor or the head, then the items in order; CONFLICT never happens here, requests
do not interleave), the empty set when it committed, now or in an attempt whose answer was
lost (recognised by the token, by the commit id on an item, or by the read-back of a finish:
our leases gone before anybody else could have ended them)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from headwater.engine.ports import CONFLICT
from headwater.engine.ports.queue import Guard, Lease, LeaseCommit, QueueState
from tests.fakes.storage import (
    MAX_TXN_ITEMS,
    FaultHook,
    FrameRow,
    HeadRow,
    LeaseRow,
    MemoryAccount,
    QueueRow,
    Send,
    invalid,
)

# A failed item: its position, and what a condition failure returns of it (the commit id,
# and the old item itself for the finish's read-back), None when nothing comes back.
_Failure = tuple[int, object | None]


def _holds(row: LeaseRow | None, guard: Guard) -> bool:
    if row is None:
        return False
    lease = row.lease
    return (
        (guard.lease_id is None or lease.lease_id == guard.lease_id)
        and (guard.due is None or lease.due == guard.due)
        and (guard.node is None or lease.node == guard.node)
    )


def _hc(old: object | None) -> str | None:
    return getattr(old, "hc", None)


class MemoryLeaseStore(FaultHook):
    PREFIX = "leases"
    WRITES = ("claim", "update", "complete")

    def __init__(self, account: MemoryAccount) -> None:
        self.account = account

    # --- reads --------------------------------------------------------------------------
    def load(self, qkey: str, at: int | None = None) -> QueueState:
        with self.account.lock:
            q = self.account.queues.get(qkey)
            rows = self.account.leases.get(qkey, {})
            leases = [rows[s].lease for s in sorted(rows)]
        shown = [x for x in leases if at is None or x.node is None or x.due < at]
        cursor = q.cursor or 0 if q is not None else 0
        dead = q.dead or 0 if q is not None else 0
        return QueueState(cursor, dead, shown, len(leases))

    def get(self, qkey: str, seqs: Sequence[int]) -> dict[int, Lease]:
        with self.account.lock:
            rows = self.account.leases.get(qkey, {})
            return {s: rows[s].lease for s in dict.fromkeys(seqs) if s in rows}

    # --- writes -------------------------------------------------------------------------
    def _transact(
        self,
        op: str,
        items: int,
        fingerprint: str,
        check: Callable[[], list[_Failure]],
        apply: Callable[[str], None],
        read_back: Callable[[list[_Failure]], bool] | None = None,
    ) -> set[int]:
        """One retry-safe transaction of `items` items: check every condition, then apply
        all (or nothing). The failed positions, or the empty set when it committed."""
        if items > MAX_TXN_ITEMS:
            raise invalid("more than 100 items in one transaction")
        acct = self.account
        cid = acct.new_cid()

        def attempt(send: Send) -> set[int]:
            with acct.lock:
                token = acct.token_for(cid, send)
                if acct.seen_token(token, fingerprint):
                    return set()
                failures = check()
                if not failures:
                    apply(cid)
                    acct.remember_token(token, fingerprint)
                    return set()
                if send.retried and any(_hc(old) == cid for _, old in failures):
                    return set()  # an earlier attempt applied: its id is on an item
                if send.retried and read_back is not None and read_back(failures):
                    return set()
                return {pos for pos, _ in failures} or {CONFLICT}

        return acct.run(f"leases.{op}", attempt)

    def claim(
        self,
        qkey: str,
        cursor: tuple[int, int] | None,
        fresh: Sequence[Lease],
        reclaimed: Sequence[tuple[Lease, Guard]],
    ) -> set[int]:
        n = (cursor is not None) + len(fresh) + len(reclaimed)
        if not n:
            return set()
        acct = self.account

        def check() -> list[_Failure]:
            failures: list[_Failure] = []
            pos = 0
            rows = acct.leases.get(qkey, {})
            if cursor is not None:
                q = acct.queues.get(qkey)
                cur = q.cursor if q is not None else None
                old = cursor[0]
                if not (cur == old or (not old and cur is None)):
                    failures.append((pos, q))
                pos += 1
            for lease in fresh:
                if lease.seq in rows:
                    failures.append((pos, rows[lease.seq]))
                pos += 1
            for lease, guard in reclaimed:
                row = rows.get(lease.seq)
                if not _holds(row, guard):
                    failures.append((pos, row))
                pos += 1
            return failures

        def apply(cid: str) -> None:
            rows = acct.leases.setdefault(qkey, {})
            if cursor is not None:
                q = acct.queues.setdefault(qkey, QueueRow())
                q.cursor, q.hc = cursor[1], cid
            for lease in fresh:
                rows[lease.seq] = LeaseRow(lease, cid)
            for lease, _ in reclaimed:
                row = rows[lease.seq]
                # the holder attribute is set to "" when none is given, as the adapter does
                row.lease = dataclasses.replace(
                    row.lease,
                    node=lease.node or "",
                    lease_id=lease.lease_id,
                    due=lease.due,
                    deliveries=lease.deliveries,
                )
                row.hc = cid

        fingerprint = f"claim:{qkey}:{cursor!r}:{list(fresh)!r}:{list(reclaimed)!r}"
        failed = self._transact("claim", n, fingerprint, check, apply)
        if cursor is None and CONFLICT not in failed:
            return {i + 1 for i in failed}
        return failed

    def update(self, qkey: str, changes: Sequence[tuple[int, Guard, int, str | None]]) -> set[int]:
        if not changes:
            return set()
        acct = self.account

        def check() -> list[_Failure]:
            rows = acct.leases.get(qkey, {})
            return [
                (i, rows.get(seq))
                for i, (seq, guard, _, _) in enumerate(changes)
                if not _holds(rows.get(seq), guard)
            ]

        def apply(cid: str) -> None:
            rows = acct.leases[qkey]
            for seq, _, due, holder in changes:
                row = rows[seq]
                node = None if holder is None else row.lease.node
                row.lease = dataclasses.replace(row.lease, due=due, node=node)
                row.hc = cid

        fingerprint = f"update:{qkey}:{list(changes)!r}"
        return self._transact("update", len(changes), fingerprint, check, apply)

    def complete(self, c: LeaseCommit) -> set[int]:
        """Finish jobs: delete each lease on its guard and each still-live record (the frame's
        deleted set and the head's counters), all or nothing. Positions: 0 the head, one per
        frame (ascending), one per lease."""
        acct = self.account
        head = c.head
        frames: dict[int, list[tuple[int, int]]] = {}
        for frame, seq, size in c.records:
            frames.setdefault(frame, []).append((seq, size))
        order = sorted(frames)
        lease_start = 1 + len(order)
        n = lease_start + len(c.leases) + (1 if c.dead_lettered else 0)

        def check() -> list[_Failure]:
            failures: list[_Failure] = []
            row = acct.heads.get(head.topic)
            live = row is not None and row.head.epoch == head.epoch and not row.head.deleted
            if c.records:
                low = min(seq for _, seq, _ in c.records)
                if not (live and row is not None and row.head.earliest_seq <= low):
                    failures.append((0, row))
            elif not live:
                failures.append((0, None))  # a condition check returns no item
            log = acct.frames.get(head.log_key, {})
            for k, frame in enumerate(order, start=1):
                f = log.get(frame)
                if f is None or any(seq in f.deleted for seq, _ in frames[frame]):
                    failures.append((k, f))
            leases = acct.leases.get(c.qkey, {})
            for i, (seq, guard) in enumerate(c.leases):
                if not _holds(leases.get(seq), guard):
                    failures.append((lease_start + i, leases.get(seq)))
            return failures

        def apply(cid: str) -> None:
            if c.records:
                row = acct.heads[head.topic]
                cur = row.head
                row.head = dataclasses.replace(
                    cur,
                    del_ver=cur.del_ver + 1,
                    count=cur.count - len(c.records),
                    bytes=cur.bytes - sum(size for _, _, size in c.records),
                )
                row.hc = cid
            log = acct.frames[head.log_key] if order else {}
            for frame in order:
                f = log[frame]
                f.deleted |= {seq for seq, _ in frames[frame]}
                f.deleted_count += len(frames[frame])
                f.deleted_bytes += sum(size for _, size in frames[frame])
                f.hc = cid
            leases = acct.leases.get(c.qkey, {})
            for seq, _ in c.leases:
                leases.pop(seq, None)
            if c.dead_lettered:
                q = acct.queues.setdefault(c.qkey, QueueRow())
                q.dead, q.hc = (q.dead or 0) + c.dead_lettered, cid

        def ours_before(failures: list[_Failure]) -> bool:
            """Every refusal is what our own applied finish leaves behind (storage/leases.py
            `_ours_before`): the head still of this epoch, the records already marked, our
            leases gone while nobody else could have ended them (held, unexpired)."""
            for pos, old in failures:
                if pos == 0:
                    if not isinstance(old, HeadRow):
                        return False
                    if old.head.epoch != head.epoch or old.head.deleted:
                        return False
                elif pos < lease_start:
                    marked = old.deleted if isinstance(old, FrameRow) else set()
                    if not {seq for seq, _ in frames[order[pos - 1]]} <= marked:
                        return False
                else:
                    seq = c.leases[pos - lease_start][0]
                    if old is not None or c.held_until.get(seq, 0) <= c.now_ms:
                        return False
            return True

        fingerprint = f"complete:{c!r}"
        return self._transact("complete", n, fingerprint, check, apply, ours_before)

    def clear(self, qkey: str) -> int:
        with self.account.lock:
            rows = self.account.leases.pop(qkey, {})
            self.account.queues.pop(qkey, None)
            return len(rows) + 1
