"""One index companion object per sealed segment, as the request path reads it.

Format: ``docs/index-format.md``. Families: ``index.plan``. The object is written by
``index.writer.build_companion``; its framing is ``index.format``, the ``q=`` families are
answered by ``index.query`` and the rollup windows by ``index.agg``: ``Companion`` puts them
together behind one decoded, lazily parsed object.

How the request path uses it:

* Storage: the companion of the segment at S3 key ``K`` is stored at ``companion_key(K)``
  (``K + ".cix"``). A DynamoDB catalogue item per stream records the plan ``generation`` the
  companions were built with and the seq through which every sealed segment has a companion
  (companions are built oldest-first, so coverage is a prefix). A companion whose header
  ``generation`` differs from ``IndexPlan.from_registry(reg).generation`` is stale: scan that
  segment. Companions are built from the records a segment read returns (deleted seqs
  already filtered); a segment whose delete count changed after the build must be rebuilt
  or scanned, and candidates must still be checked against the segment's deleted seqs.
* Build: the Glue job and the in-process builder both call
  ``build_companion(plan, docs_from_records(records, registry))`` (index.writer, index.docs)
  on one segment's records and PUT the bytes; the function is pure, so both write
  byte-identical objects.
* ``_search`` / ``filter=`` reads: ``Companion.from_bytes(obj).candidates(query)`` gives the
  doc ordinals that may match (``None``: scan the whole segment); ``seq_of(ordinal)`` maps
  them to seqs to read. ``narrow(query).exact`` says the set is exactly the matches (the
  evaluator still runs on the fetched docs for scores and sort keys).
* ``_routing_keys`` / ``key=`` reads: ``routing_keys()`` and ``docs_with_key(k)``.
* ``_aggregate`` without ``q``: ``rollup_windows(...)`` returns the segment's contribution to
  each window as shared groups (cached per request shape); the caller keeps those inside
  ``[from, to)`` (``agg.full_span``), adds the partial edge windows by scanning and merges
  segments. With a ``q`` the rollup cannot be used (scan).

Pure (see index/writer.py on import discipline): reading a companion never imports
durable.schema; durable.aggregate is imported only when rollup windows are read.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from headwater.durable.fields import FieldSpec
from headwater.durable.filter import Predicate
from headwater.index.agg import read_windows
from headwater.index.format import CompanionError, SectionNotLoaded, Sections, read_table
from headwater.index.query import FieldFamilies, Narrowing

if TYPE_CHECKING:
    from headwater.durable.aggregate import Group


class Companion:
    """A decoded companion. Sections are parsed lazily, on first use."""

    def __init__(
        self,
        generation: str,
        first_seq: int,
        last_seq: int,
        doc_count: int,
        min_ts: int,
        max_ts: int,
        raw_sections: Mapping[str, bytes],
        unloaded: Mapping[str, tuple[int, int, int]] | None = None,
    ) -> None:
        self.generation = generation
        self.first_seq = first_seq
        self.last_seq = last_seq
        self.doc_count = doc_count
        self.min_ts = min_ts
        self.max_ts = max_ts
        # `unloaded`: sections in the object but not read yet, name -> (offset, length, crc32)
        self._sections = Sections(raw_sections, unloaded)
        self._fields = FieldFamilies(self._sections.get, doc_count)
        self._seqs: list[int] | None = None
        self._rollups: dict[tuple[Any, ...], list[tuple[int, dict[str, Group]]]] = {}

    # ------------------------------------------------------------------ decoding
    @classmethod
    def from_bytes(cls, data: bytes) -> Companion:
        """Parse and verify (magic, version, checksums, bounds); raises CompanionError."""
        out = cls.from_prefix(data)
        if out._sections.unloaded:
            raise CompanionError("companion section lies outside the object (truncated)")
        return out

    @classmethod
    def from_prefix(cls, data: bytes, size: int | None = None) -> Companion:
        """Parse the first bytes of a companion object (of `size` bytes, when known): the
        header and section table, verified, and every section lying wholly inside `data`;
        the others are read when first needed (SectionNotLoaded, then `load`). A request
        reads only the sections its query uses. Raises CompanionError."""
        t = read_table(bytes(data), size)
        out = cls(
            t.generation,
            t.first_seq,
            t.last_seq,
            t.doc_count,
            t.min_ts,
            t.max_ts,
            t.sections,
            t.unloaded,
        )
        if "seq" in t.sections:
            out._check_seqs()
        return out

    def load(self, name: str, body: bytes) -> None:
        """Add a section read after `from_prefix` (the bytes SectionNotLoaded named);
        verified against the section table. Loading one already held is a no-op."""
        if self._sections.load(name, body) and name == "seq":
            self._check_seqs()

    def missing(self, name: str) -> SectionNotLoaded | None:
        return self._sections.missing(name)

    def _check_seqs(self) -> None:
        seqs = self.seqs()
        n, first, last = self.doc_count, self.first_seq, self.last_seq
        if len(seqs) != n or (seqs and (seqs[0] != first or seqs[-1] != last)):
            raise CompanionError("companion seq section disagrees with its header")

    @property
    def families(self) -> tuple[str, ...]:
        return tuple(n for n in self._sections.names() if n != "seq")

    def seqs(self) -> list[int]:
        """The seq of every doc ordinal, ascending."""
        if self._seqs is None:
            runs = self._sections.get("seq")
            try:
                self._seqs = [s + k for s, n in runs for k in range(n)]
            except (TypeError, ValueError):
                raise CompanionError("companion seq section has the wrong shape") from None
        return self._seqs

    def seq_of(self, ordinal: int) -> int:
        return self.seqs()[ordinal]

    # ------------------------------------------------------------------ routing keys
    def routing_keys(self) -> list[str]:
        """The segment's distinct routing keys, sorted; [] without the rk family."""
        rk = self._sections.get("rk")
        return list(rk["keys"]) if rk else []

    def docs_with_key(self, key: str) -> list[int]:
        """Ordinals of the docs whose routing key is `key` (ascending)."""
        rk = self._sections.get("rk")
        if not rk:
            return []
        i = bisect.bisect_left(rk["keys"], key)
        if i < len(rk["keys"]) and rk["keys"][i] == key:
            return list(rk["docs"][i])
        return []

    # ------------------------------------------------------------------ queries
    def candidates(self, query: Predicate) -> set[int] | None:
        """Doc ordinals that may match `query` (never missing a match), or None when this
        companion cannot narrow it (scan the segment)."""
        got = self.narrow(query)
        return None if got is None else set(got.ordinals)

    def narrow(self, query: Predicate) -> Narrowing | None:
        """Like ``candidates``, also telling whether the set is exact."""
        return self._fields.narrow(query)

    def scored(self, p: Predicate) -> dict[int, float] | None:
        """The docs matching `p` exactly, each with the score ``p.evaluate`` gives it, or
        None when the families cannot say exactly (then the docs are read and evaluated);
        how text clauses are scored: ``query.FieldFamilies.scored``."""
        return self._fields.scored(p)

    def column(self, spec: FieldSpec) -> list[Any] | None:
        """The field's first value per doc (None where it has none), from the `col` family;
        None when the field is not a column here."""
        return self._fields.column(spec)

    # ------------------------------------------------------------------ rollups
    def rollup_windows(
        self,
        rollup: str,
        interval: str,
        group_by: Sequence[str] = (),
        measures: Sequence[str] | None = None,
    ) -> list[tuple[int, dict[str, Group]]]:
        """This segment's pre-aggregated windows of `interval`, grouped by `group_by`
        (dimensions of the rollup) with the `measures` (default: all): (window start, group
        key JSON -> Group), in window order, the group keys JSON as ``run_aggregate`` keys
        its groups. Valid only for a request without ``q``. Counts, min, max and histograms
        equal a scan's; a float ``sum`` is added per stored group and then across groups, so
        it can differ from a scan's record-by-record sum in the last bits. The groups are
        `shared`: kept with this (immutable) companion for the next request of the same
        shape, never changed by a caller. Raises KeyError for a rollup/interval the
        companion does not hold (it was built under another plan)."""
        return read_windows(
            self._sections.get("agg"), self._rollups, rollup, interval, group_by, measures
        )
