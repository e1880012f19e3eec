"""In-memory SegmentStore and BlobStore of a MemoryAccount: sealed segment items (a seal is
one commit with the head's sealed_through) and the bucket's objects."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from headwater.engine.ports import Head, SealCommit, SegmentItem
from headwater.errors import BlobNotFound, StorageUnavailable
from tests.fakes.storage import MemoryAccount, SegmentRow, Send


class MemorySegmentStore:
    def __init__(self, account: MemoryAccount) -> None:
        self.account = account

    def after(self, head: Head, after_seq: int, limit: int) -> list[SegmentItem]:
        with self.account.lock:
            rows = self.account.segments.get(head.log_key, {})
            return [rows[k].item for k in sorted(rows) if k > after_seq][:limit]

    def commit_seal(self, c: SealCommit) -> bool:
        """Put the segment item and move sealed_through, iff the head is as read (epoch,
        delete version, sealed_through) and no segment ends at the same seq."""
        acct = self.account
        seg, h = c.segment, c.head
        cid = acct.new_cid()
        fingerprint = f"{cid}:{c!r}"

        def attempt(send: Send) -> bool:
            with acct.lock:
                token = acct.token_for(cid, send)
                if acct.seen_token(token, fingerprint):
                    return True
                rows = acct.segments.setdefault(h.log_key, {})
                old = rows.get(seg.last_seq)
                row = acct.heads.get(h.topic)
                head_ok = (
                    row is not None
                    and row.head.epoch == h.epoch
                    and row.head.del_ver == h.del_ver
                    and row.head.sealed_through == h.sealed_through
                    and not row.head.deleted
                )
                if old is not None or not head_ok:
                    owners = [old.hc if old is not None else None]
                    if not head_ok and row is not None:
                        owners.append(row.hc)
                    return cid in owners  # an earlier attempt of this seal applied
                assert row is not None
                rows[seg.last_seq] = SegmentRow(seg, cid)
                cur = row.head
                row.head = dataclasses.replace(
                    _sealed(cur, seg.last_seq, c.sealed_bytes),
                    count=cur.count - c.void_records,
                    bytes=cur.bytes - c.void_bytes,
                )
                row.hc = cid
                acct.remember_token(token, fingerprint)
                return True

        return acct.run("segments.commit_seal", attempt)

    def delete_items(self, head: Head, last_seqs: Sequence[int]) -> None:
        with self.account.lock:
            rows = self.account.segments.get(head.log_key, {})
            for s in last_seqs:
                rows.pop(s, None)


def _sealed(head: Head, through: int, sealed_bytes: int) -> Head:
    return dataclasses.replace(
        head, sealed_through=through, unsealed_bytes=head.unsealed_bytes - sealed_bytes
    )


class MemoryBlobStore:
    """The bucket: errors as S3BlobStore raises them (a missing object is StorageUnavailable
    on get, BlobNotFound on a ranged get, None on find)."""

    def __init__(self, account: MemoryAccount) -> None:
        self.account = account

    def put(self, key: str, body: bytes) -> None:
        with self.account.lock:
            self.account.objects[key] = bytes(body)

    def get(self, key: str) -> bytes:
        with self.account.lock:
            body = self.account.objects.get(key)
        if body is None:
            raise StorageUnavailable(f"blob get failed: {key}")
        return body

    def get_range(self, key: str, start: int, end: int) -> bytes:
        with self.account.lock:
            body = self.account.objects.get(key)
        if body is None:
            raise BlobNotFound(f"no such blob: {key}")
        return body[start:end]

    def find(self, key: str) -> bytes | None:
        with self.account.lock:
            return self.account.objects.get(key)

    def list_keys(self, prefix: str) -> list[str]:
        with self.account.lock:
            return sorted(k for k in self.account.objects if k.startswith(prefix))

    def delete_many(self, keys: Sequence[str]) -> None:
        with self.account.lock:
            for k in keys:
                self.account.objects.pop(k, None)
