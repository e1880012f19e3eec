"""In-memory stores of single items written by one conditional write each: watch sessions,
index catalogues, quota counters. A write records its commit id on the item; a re-sent write
whose condition fails on an item holding its own id answers success, as
storage/ddb.py's write_once does; a delete re-sent after it applied still counts as ours."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from headwater.engine.ports import WatchSessionItem
from headwater.engine.ports.catalogue import Catalogue
from tests.fakes.storage import CatalogueRow, MemoryAccount, QuotaRow, Send, SessionRow


class _Row(Protocol):
    hc: str | None


R = TypeVar("R", bound=_Row)


def write_once(
    account: MemoryAccount,
    op: str,
    table: dict[str, R],
    key: str,
    condition: Callable[[R | None], bool],
    new: Callable[[R | None, str], R],
) -> bool:
    """A retry-safe conditional put/update of one item: True when it applied (now, or in an
    earlier attempt whose answer was lost), False when its condition failed."""
    cid = account.new_cid()

    def attempt(send: Send) -> bool:
        with account.lock:
            row = table.get(key)
            if not condition(row):
                return row is not None and row.hc == cid
            table[key] = new(row, cid)
            return True

    return account.run(op, attempt)


def delete_once(account: MemoryAccount, op: str, table: dict[str, R], key: str) -> bool:
    """Delete an item: True if it was there, or if an earlier attempt may have removed it."""

    def attempt(send: Send) -> bool:
        with account.lock:
            return table.pop(key, None) is not None or send.retried

    return account.run(op, attempt)


class MemorySessionStore:
    def __init__(self, account: MemoryAccount) -> None:
        self.account = account

    def put(self, item: WatchSessionItem) -> None:
        with self.account.lock:
            self.account.sessions[item.wid] = SessionRow(item)

    def get(self, wid: str) -> WatchSessionItem | None:
        with self.account.lock:
            row = self.account.sessions.get(wid)
            return row.item if row is not None else None

    def save_cursors(self, wid: str, cursors: str | None, now_ms: int, ttl_ms: int) -> bool:
        """Record cursors and refresh the last access; never recreates a session. (The TTL
        the adapter also refreshes is DynamoDB's own sweeper's; readers judge by
        last_access_ms and ttl_ms, which is kept as stored.)"""

        def new(row: SessionRow | None, cid: str) -> SessionRow:
            assert row is not None
            item = row.item
            return SessionRow(
                WatchSessionItem(
                    item.wid,
                    item.key_id,
                    item.scopes,
                    item.auth,
                    item.spec,
                    cursors if cursors is not None else item.cursors,
                    now_ms,
                    item.ttl_ms,
                ),
                cid,
            )

        return write_once(
            self.account,
            "sessions.save_cursors",
            self.account.sessions,
            wid,
            lambda row: row is not None,
            new,
        )

    def delete(self, wid: str) -> bool:
        return delete_once(self.account, "sessions.delete", self.account.sessions, wid)

    def sweep(self, now_ms: int) -> int:
        """Delete every session idle past its TTL at `now_ms`; how many live ones remain."""
        with self.account.lock:
            rows = self.account.sessions
            idle = [w for w, r in rows.items() if now_ms - r.item.last_access_ms > r.item.ttl_ms]
            for w in idle:
                del rows[w]
            return len(rows)


class MemoryIndexCatalogue:
    def __init__(self, account: MemoryAccount) -> None:
        self.account = account

    def get(self, topic: str, epoch: int) -> Catalogue | None:
        with self.account.lock:
            row = self.account.catalogues.get(f"{topic}#{epoch}")
            return row.catalogue if row is not None else None

    def publish(self, topic: str, epoch: int, expected: Catalogue | None, new: Catalogue) -> bool:
        """Make `new` the catalogue iff it still is `expected` as far as coverage goes (plan
        generation, covered prefix, segment count and lexicon runs; bytes and updated_ms
        are not compared)."""

        def condition(row: CatalogueRow | None) -> bool:
            if expected is None:
                return row is None
            if row is None:
                return False
            cur = row.catalogue
            return (cur.generation, cur.covered_through, cur.segments, cur.runs) == (
                expected.generation,
                expected.covered_through,
                expected.segments,
                expected.runs,
            )

        return write_once(
            self.account,
            "catalogue.publish",
            self.account.catalogues,
            f"{topic}#{epoch}",
            condition,
            lambda _, cid: CatalogueRow(new, cid),
        )

    def delete(self, topic: str, epoch: int) -> None:
        delete_once(self.account, "catalogue.delete", self.account.catalogues, f"{topic}#{epoch}")


class MemoryQuotaStore:
    """Deployment-wide counters (engine/ports/quota.py QuotaStore). Steps are guarded by their
    commit id too (the adapter's `once`): a re-sent step finds its own id and is not
    applied twice."""

    def __init__(self, account: MemoryAccount) -> None:
        self.account = account

    def _step(self, op: str, name: str, amount: int, cap: int | None) -> bool:
        acct = self.account
        cid = acct.new_cid()

        def attempt(send: Send) -> bool:
            with acct.lock:
                row = acct.quotas.get(name)
                n = row.n if row is not None else None
                mine = row is not None and row.hc == cid
                if mine or (cap is not None and n is not None and n > cap - amount):
                    return mine
                acct.quotas[name] = QuotaRow((n or 0) + amount, cid)
                return True

        return acct.run(f"quota.{op}", attempt)

    def reserve(self, name: str, amount: int, cap: int | None) -> bool:
        if cap is not None and amount > cap:
            return False
        return self._step("reserve", name, amount, cap)

    def release(self, name: str, amount: int) -> None:
        if amount > 0:
            self._step("release", name, -amount, None)

    def get(self, name: str) -> int | None:
        with self.account.lock:
            row = self.account.quotas.get(name)
            return row.n if row is not None else None

    def set_if(self, name: str, observed: int | None, value: int) -> bool:
        def condition(row: QuotaRow | None) -> bool:
            n = row.n if row is not None else None
            return n == observed

        return write_once(
            self.account,
            "quota.set_if",
            self.account.quotas,
            name,
            condition,
            lambda _, cid: QuotaRow(value, cid),
        )
