"""In-memory HeadStore: the heads table of a MemoryAccount. Every conditional write is
judged under the account's lock, records its commit id on the head (as the DynamoDB adapter
does), and counts a failed condition on a head holding its own commit id as success: the
re-send of a write whose answer was lost."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from typing import Any

from headwater.engine.ports import Head
from tests.fakes.storage import FrameRow, HeadRow, MemoryAccount, Send


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


def merged_head(account: MemoryAccount, head: Head) -> Head:
    """A stored head as a read returns it: brought up to the newest frame of its log past
    the stored item (storage/dynamo.py `merged`). Under the account's lock."""
    out = read_head(head)
    if head.deleted:
        return out
    frames = account.frames.get(head.log_key, {})
    past = [k for k in frames if k > head.head_seq]
    if not past:
        return out
    newest = frames[max(past)]
    return out.past(newest.last_seq, newest.appended, newest.appended_bytes, newest.ts)


def ext_holds(head: Head, expected: str) -> bool:
    return head.ext == expected


class MemoryHeadStore:
    def __init__(self, account: MemoryAccount) -> None:
        self.account = account

    # --- reads --------------------------------------------------------------------------
    def get(self, topic: str, *, consistent: bool = True) -> Head | None:
        with self.account.lock:
            row = self.account.heads.get(topic)
            return merged_head(self.account, row.head) if row is not None else None

    def get_many(self, topics: Sequence[str], *, consistent: bool = True) -> dict[str, Head]:
        with self.account.lock:
            return {
                t: merged_head(self.account, self.account.heads[t].head)
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
            return [merged_head(self.account, self.account.heads[t].head) for t in names[:limit]]

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

    def put_ext(self, head: Head, ext: str) -> bool:
        if not ext:
            raise ValueError("ext must not be empty")
        return self._write(
            "put_ext",
            head.topic,
            lambda cur: (
                _live_epoch(cur, head.epoch)
                and _some(cur).head_seq == head.head_seq
                and ext_holds(_some(cur), head.ext)
            ),
            lambda cur: dataclasses.replace(_some(cur), ext=ext),
        )

    def mark_deleted(self, head: Head, *, if_empty: bool, if_ext: str | None = None) -> bool:
        marker = Head(
            topic=head.topic,
            epoch=head.epoch,
            deleted=True,
            config=head.config,
            prev_head_seq=head.head_seq,
        )

        ck = head.checkpoint
        acct = self.account
        cid = acct.new_cid()

        def condition(cur: Head | None) -> bool:
            """The marker's condition (the item still at the checkpoint read) and the
            fence's (a free frame key after the last frame), in one transaction."""
            if not _live_epoch(cur, head.epoch):
                return False
            cur = _some(cur)
            if cur.head_seq != ck.seq:
                return False
            if if_empty and cur.count != -(head.appended - ck.appended):
                return False
            if head.head_seq + 1 in acct.frames.get(head.log_key, {}):
                return False
            return if_ext is None or ext_holds(cur, if_ext)

        def attempt(send: Send) -> bool:
            with acct.lock:
                row = acct.heads.get(head.topic)
                fence = acct.frames.get(head.log_key, {}).get(head.head_seq + 1)
                if not condition(row.head if row is not None else None):
                    owners = [row.hc if row is not None else None]
                    owners.append(fence.hc if fence is not None else None)
                    return cid in owners  # our earlier attempt applied
                acct.heads[head.topic] = HeadRow(stored_head(marker), cid)
                acct.frames.setdefault(head.log_key, {})[head.head_seq + 1] = FrameRow(
                    head.head_seq + 1,
                    head.head_seq,
                    head.last_write_ts or 0,
                    0,
                    b"",
                    None,
                    None,
                    cid,
                    appended=head.appended,
                    appended_bytes=head.appended_bytes,
                    fence=True,
                )
                return True

        return acct.run("heads.mark_deleted", attempt)

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
