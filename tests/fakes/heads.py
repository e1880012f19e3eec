"""In-memory HeadStore: the heads table of a MemoryAccount. Every conditional write is
judged under the account's lock, records its commit id on the head (as the DynamoDB adapter
does), and counts a failed condition on a head holding its own commit id as success: the
re-send of a write whose answer was lost. The head's counter hands out seqs (reserve), as
the adapter's UpdateItem does."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from typing import Any

from headwater.engine.ports import AppendRejected, Head, ProducerClaim, Reservation
from headwater.errors import Throttled
from tests.fakes.storage import FaultHook, HeadRow, MemoryAccount, Send


def stored_head(head: Head) -> Head:
    """A head as storage keeps it: config as JSON (so a caller's later changes to its dict
    do not reach storage) and a private tag_pending map."""
    return dataclasses.replace(
        head,
        config=json.loads(json.dumps(head.config, sort_keys=True)),
        tag_pending=dict(head.tag_pending),
    )


def read_head(head: Head) -> Head:
    """A stored head as a read returns it: fresh maps, unsealed bytes never below 0."""
    return dataclasses.replace(
        head,
        config=json.loads(json.dumps(head.config)),
        tag_pending=dict(head.tag_pending),
        unsealed_bytes=max(0, head.unsealed_bytes),
    )


def ext_holds(head: Head, expected: str) -> bool:
    return head.ext == expected


class MemoryHeadStore(FaultHook):
    PREFIX = "heads"
    WRITES = ("reserve", "create", "put_config", "put_ext", "mark_deleted")

    def __init__(self, account: MemoryAccount) -> None:
        self.account = account
        # the next this many reservations meet a throttled head key (DynamoDB past ~1,000
        # writes a second on one key): refused at once when not patient, else (botocore's
        # back-off, elided) applied
        self.throttle_next = 0

    # --- reads --------------------------------------------------------------------------
    def get(self, topic: str, *, consistent: bool = True) -> Head | None:
        with self.account.lock:
            row = self.account.heads.get(topic)
            return read_head(row.head) if row is not None else None

    def get_many(self, topics: Sequence[str], *, consistent: bool = True) -> dict[str, Head]:
        with self.account.lock:
            return {
                t: read_head(self.account.heads[t].head)
                for t in dict.fromkeys(topics)
                if t in self.account.heads
            }

    def list_live(self, prefix: str, after: str | None, limit: int) -> list[Head]:
        with self.account.lock:
            names = sorted(
                t
                for t, row in self.account.heads.items()
                if not row.head.deleted and t.startswith(prefix) and (after is None or t > after)
            )
            return [read_head(self.account.heads[t].head) for t in names[:limit]]

    def count_live(self, internal: bool = True) -> int:
        with self.account.lock:
            return sum(
                1
                for row in self.account.heads.values()
                if not row.head.deleted and (internal or not row.head.topic.startswith("~"))
            )

    def total_live_bytes(self) -> int:
        with self.account.lock:
            return sum(
                row.head.bytes for row in self.account.heads.values() if not row.head.deleted
            )

    # --- the sequencer ------------------------------------------------------------------
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
    ) -> Reservation:
        """The counter step of storage/heads.py `reserve`: iff the head is live in its epoch
        with the config (ext, caps) judged on; a re-send that finds our commit id on the head
        (nobody reserved since) answers the seqs it took."""
        acct = self.account
        cid = acct.new_cid()
        if self.throttle_next > 0:
            self.throttle_next -= 1
            if not patient:
                raise Throttled(f"topic {head.topic!r} is at its write rate; retry")

        def attempt(send: Send) -> Reservation:
            with acct.lock:
                row = acct.heads.get(head.topic)
                if row is not None and row.hc == cid:
                    after = row.head
                    return Reservation(
                        after.head_seq - n + 1,
                        after.head_seq,
                        after.last_write_ts or ts,
                        after.appended_bytes,
                        read_head(after),
                        retried=True,
                    )
                cur = row.head if row is not None else None
                if (
                    cur is None
                    or not _live_epoch(cur, head.epoch)
                    or cur.config != head.config
                    or (ext is not None and cur.ext != ext)
                    or (max_count is not None and cur.count > max_count)
                    or (max_bytes is not None and cur.bytes > max_bytes)
                ):
                    raise AppendRejected(True, {}, read_head(cur) if cur is not None else None)
                assert row is not None
                row.head = cur.reserved(n, nbytes, ts)
                row.hc = cid
                return Reservation(
                    cur.head_seq + 1,
                    cur.head_seq + n,
                    max(ts, cur.last_write_ts or 0),
                    cur.appended_bytes + nbytes,
                    read_head(row.head),
                    retried=send.retried,
                )

        return acct.run("heads.reserve", attempt)

    # --- conditional writes -------------------------------------------------------------
    def _write(
        self,
        op: str,
        topic: str,
        condition: Callable[[Head | None], bool],
        new: Callable[[Head | None], Head],
    ) -> bool:
        """One retry-safe conditional put/update of a head (storage/ddb.py write_once)."""
        cid = self.account.new_cid()

        def attempt(send: Send) -> bool:
            with self.account.lock:
                row = self.account.heads.get(topic)
                current = row.head if row is not None else None
                if not condition(current):
                    return row is not None and row.hc == cid  # our earlier attempt applied
                self.account.heads[topic] = HeadRow(new(current), cid)
                return True

        return self.account.run(f"heads.{op}", attempt)

    def create(self, head: Head, *, replacing: Head | None) -> bool:
        def condition(cur: Head | None) -> bool:
            if replacing is None:
                return cur is None
            return cur is not None and cur.deleted and cur.epoch == replacing.epoch

        return self._write("create", head.topic, condition, lambda _: stored_head(head))

    def put_config(self, head: Head, config: dict[str, Any]) -> bool:
        return self._write(
            "put_config",
            head.topic,
            lambda cur: _live_epoch(cur, head.epoch),
            lambda cur: stored_head(dataclasses.replace(_some(cur), config=config)),
        )

    def put_ext(self, head: Head, ext: str, claim: ProducerClaim | None = None) -> bool:
        if not ext:
            raise ValueError("ext must not be empty")
        acct = self.account
        cid = acct.new_cid()
        log_key = head.log_key

        def attempt(send: Send) -> bool:
            from tests.fakes.tail import claim_holds

            with acct.lock:
                row = acct.heads.get(head.topic)
                cur = row.head if row is not None else None
                ok = (
                    _live_epoch(cur, head.epoch)
                    and _some(cur).head_seq == head.head_seq
                    and ext_holds(_some(cur), head.ext)
                )
                got = acct.producers.get((log_key, claim.producer)) if claim else None
                if ok and claim is not None and not claim_holds(claim, got, None):
                    if got is not None and got[3] == cid:
                        return True  # our earlier attempt applied
                    stored = None if got is None else got[:3]
                    raise AppendRejected(False, {}, claim_hits={claim.producer: stored})
                if not ok:
                    return row is not None and row.hc == cid
                assert row is not None
                row.head = dataclasses.replace(_some(cur), ext=ext)
                row.hc = cid
                if claim is not None:
                    acct.producers[(log_key, claim.producer)] = (
                        claim.epoch,
                        claim.seq,
                        head.head_seq,
                        cid,
                    )
                return True

        return acct.run("heads.put_ext", attempt)

    def mark_deleted(self, head: Head, *, if_empty: bool, if_ext: str | None = None) -> bool:
        """The marker, iff nothing was reserved since `head` was read (storage/heads.py)."""
        marker = Head(
            topic=head.topic,
            epoch=head.epoch,
            deleted=True,
            config=head.config,
            prev_head_seq=head.head_seq,
        )

        def condition(cur: Head | None) -> bool:
            if not _live_epoch(cur, head.epoch):
                return False
            cur = _some(cur)
            if cur.head_seq != head.head_seq:
                return False
            if if_empty and cur.count != 0:
                return False
            return if_ext is None or ext_holds(cur, if_ext)

        return self._write("mark_deleted", head.topic, condition, lambda _: stored_head(marker))

    # --- unconditional-in-effect updates (no commit id: nothing re-sends them) ----------
    def touch_read(self, head: Head, ts: int) -> None:
        with self.account.lock:
            row = self.account.heads.get(head.topic)
            if row is not None and _live_epoch(row.head, head.epoch):
                row.head = dataclasses.replace(row.head, last_read_ts=ts)

    def clear_tag_pending(self, head: Head, frame_seq: int) -> None:
        with self.account.lock:
            row = self.account.heads.get(head.topic)
            if row is not None and row.head.epoch == head.epoch:
                pending = {k: v for k, v in row.head.tag_pending.items() if k != frame_seq}
                row.head = dataclasses.replace(row.head, tag_pending=pending)


def _some(head: Head | None) -> Head:
    assert head is not None
    return head


def _live_epoch(head: Head | None, epoch: int) -> bool:
    """The head exists, is live (not a deleted marker) and is of this epoch."""
    return head is not None and not head.deleted and head.epoch == epoch
