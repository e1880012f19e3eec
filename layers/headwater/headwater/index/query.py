"""Answering a ``q=`` predicate from one companion's ``exact``, ``col`` and ``fts`` families
(``Companion.narrow``, ``candidates``, ``scored`` and ``column`` delegate here): the doc
ordinals that may match (``Narrowing``; ``exact`` when they are exactly the matches), each
matching doc's score as ``Predicate.evaluate`` gives it, or a field's column of first values.
A clause no family indexes (or indexes under another spec) narrows nothing: the caller scans.

Pure: durable.filter, durable.fields and index.plan."""

from __future__ import annotations

import bisect
import json
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from headwater.durable.fields import FieldSpec
from headwater.durable.filter import (
    And,
    Compare,
    Has,
    Not,
    Or,
    Predicate,
    Prefix,
    Text,
    TextTarget,
)
from headwater.index.columns import exact_key, spec_key
from headwater.index.plan import canonical_json, field_fingerprint

_OPS: Final[dict[str, Callable[[Any, Any], bool]]] = {
    "eq": operator.eq,
    "gt": operator.gt,
    "gte": operator.ge,
    "lt": operator.lt,
    "lte": operator.le,
}


@dataclass(frozen=True, slots=True)
class Narrowing:
    """Doc ordinals that may match; ``exact``: they are exactly the matching docs."""

    ordinals: frozenset[int]
    exact: bool


class FieldFamilies:
    """The exact, col and fts families of one companion, read through `section` (the
    companion's parsed sections: a section not read yet raises SectionNotLoaded, and the
    call is made again once it is loaded). What it derives (sorted columns, first values)
    is kept with it, as the companion is kept by the readers' cache."""

    def __init__(self, section: Callable[[str], Any], doc_count: int) -> None:
        self._section = section
        self.doc_count = doc_count
        self._sorted_cols: dict[Any, tuple[list[Any], list[int]]] = {}
        self._first_values: dict[Any, list[Any]] = {}

    def narrow(self, p: Predicate) -> Narrowing | None:
        """The docs that may match `p` (never missing a match), and whether they are
        exactly the matches; None when the families cannot narrow it."""
        if isinstance(p, And):
            parts = [self.narrow(c) for c in p.children]
            known = [x for x in parts if x is not None]
            if not known:
                return None
            ords = frozenset.intersection(*(x.ordinals for x in known))
            return Narrowing(ords, len(known) == len(parts) and all(x.exact for x in known))
        if isinstance(p, Or):
            parts = [self.narrow(c) for c in p.children]
            if any(x is None for x in parts):
                return None
            done = [x for x in parts if x is not None]
            return Narrowing(
                frozenset().union(*(x.ordinals for x in done)), all(x.exact for x in done)
            )
        if isinstance(p, Not):
            inner = self.narrow(p.child)
            if inner is None or not inner.exact:
                return None
            return Narrowing(self._all() - inner.ordinals, True)
        got: frozenset[int] | None = None
        if isinstance(p, Has):
            got = self._has(p.field)
        elif isinstance(p, Compare):
            got = self._compare(p)
        elif isinstance(p, Prefix):
            entry = self._field("exact", p.field)
            if entry is not None:
                got = self._exact_prefix(entry, p.value)
        elif isinstance(p, Text):
            got = self._text(p)
        return None if got is None else Narrowing(got, True)

    def scored(self, p: Predicate) -> dict[int, float] | None:
        """The docs matching `p` exactly, each with the score ``p.evaluate`` gives it (text
        clauses from the postings' positions: occurrences of the query tokens, +2 per token
        for a phrase, times the target's boost, the best value and target counting; AND and
        OR add their matching children's scores), or None when the families cannot say
        exactly (then the docs are read and evaluated)."""
        if isinstance(p, And):
            parts = [self.scored(c) for c in p.children]
            if any(x is None for x in parts) or not parts:
                return None
            known = [x for x in parts if x is not None]
            common = set(known[0]).intersection(*known[1:])
            out: dict[int, float] = {}
            for o in common:
                total = 0.0
                for x in known:
                    total += x[o]
                out[o] = total
            return out
        if isinstance(p, Or):
            alts = [self.scored(c) for c in p.children]
            if any(x is None for x in alts):
                return None
            sums: dict[int, Any] = {}
            for part in alts:
                assert part is not None
                for o, sc in part.items():
                    sums[o] = sums.get(o, 0) + sc  # as sum(): 0 + s1 + s2 ...
            return sums
        if isinstance(p, Text):
            return self._text_scores(p)
        got = self.narrow(p)
        if got is None or not got.exact:
            return None
        return dict.fromkeys(got.ordinals, 0.0)

    def _text_scores(self, p: Text) -> dict[int, float] | None:
        best: dict[int, float] = {}
        for t in p.targets:
            if t.field.kind == "keyword":
                docs = self._text_target(p, t)
                if docs is None:
                    return None
                for o in docs:
                    best[o] = max(best.get(o, 0.0), t.boost)
                continue
            entry = self._field("fts", t.field) if t.field.kind == "text" else None
            if entry is None or not entry["spec"].get("positions") or not t.tokens:
                return None  # occurrences are counted from positions
            per_token = self._units(entry, p, t)
            common = set(per_token[0])
            for units in per_token[1:]:
                common &= units.keys()
            consecutive = p.phrase and len(t.tokens) > 1
            bonus = 2 * len(t.tokens) if p.phrase else 0
            for unit in common:
                if consecutive and not any(
                    all(s + i in per_token[i][unit] for i in range(1, len(per_token)))
                    for s in per_token[0][unit]
                ):
                    continue
                hits = sum(len(units[unit]) for units in per_token)
                o = unit[0]
                best[o] = max(best.get(o, 0.0), float(hits + bonus) * t.boost)
        return best

    def _units(
        self, entry: Mapping[str, Any], p: Text, t: TextTarget
    ) -> list[dict[tuple[int, int], set[int]]]:
        """Per query token: (doc, value) -> the positions where it occurs."""
        last = len(t.tokens) - 1
        per_token: list[dict[tuple[int, int], set[int]]] = []
        for i, q in enumerate(t.tokens):
            units: dict[tuple[int, int], set[int]] = {}
            for postings in self._terms(entry, q, p.prefix and i == last):
                for item in postings:
                    units.setdefault((item[0], item[1]), set()).update(item[2:])
            per_token.append(units)
        return per_token

    def column(self, spec: FieldSpec) -> list[Any] | None:
        """The field's first value per doc (None where it has none), from the `col` family;
        None when the field is not a column here."""
        memo = spec_key(spec)
        got = self._first_values.get(memo)
        if got is None:
            entry = self._field("col", spec)
            if entry is None:
                return None
            got = self._first_values[memo] = [
                v[0] if isinstance(v, list) else v for v in entry["values"]
            ]
        return got

    def _all(self) -> frozenset[int]:
        return frozenset(range(self.doc_count))

    def _field(self, family: str, spec: FieldSpec) -> Any:
        sec = self._section(family)
        if not sec:
            return None
        entry = sec["fields"].get(spec.name)
        if entry is None or entry["spec"] != json.loads(
            canonical_json(field_fingerprint(spec, family))
        ):
            return None  # not indexed, or indexed under a different spec
        return entry

    def _has(self, spec: FieldSpec) -> frozenset[int] | None:
        entry = self._field("exact", spec)
        if entry is not None:
            return frozenset(i for docs in entry["docs"] for i in docs)
        entry = self._field("col", spec)
        if entry is not None:
            return frozenset(i for i, v in enumerate(entry["values"]) if v is not None)
        entry = self._field("fts", spec)
        if entry is not None:
            return frozenset(entry["docs"])
        return None

    def _compare(self, p: Compare) -> frozenset[int] | None:
        if p.op == "eq":
            entry = self._field("exact", p.field)
            if entry is not None:
                return self._exact_eq(entry, p.value)
        entry = self._field("col", p.field)
        if entry is None:
            return None
        try:
            return self._column_range(p, entry)
        except TypeError:
            pass  # values the query value does not compare with: test one by one
        test = _OPS[p.op]
        out: list[int] = []
        for i, v in enumerate(entry["values"]):
            if v is None:
                continue
            vs = v if isinstance(v, list) else (v,)
            if any(test(x, p.value) for x in vs):
                out.append(i)
        return frozenset(out)

    def _column_range(self, p: Compare, entry: Mapping[str, Any]) -> frozenset[int]:
        """The docs with a column value `p.op` p.value, by bisecting the column sorted by
        value (built on first use and kept with the companion, which readers cache)."""
        name = spec_key(p.field)
        got = self._sorted_cols.get(name)
        if got is None:
            pairs = sorted(
                (x, i)
                for i, v in enumerate(entry["values"])
                if v is not None
                for x in (v if isinstance(v, list) else (v,))
            )
            got = self._sorted_cols[name] = ([x for x, _ in pairs], [i for _, i in pairs])
        vals, ords = got
        if p.op == "eq":
            lo, hi = bisect.bisect_left(vals, p.value), bisect.bisect_right(vals, p.value)
        elif p.op == "gt":
            lo, hi = bisect.bisect_right(vals, p.value), len(vals)
        elif p.op == "gte":
            lo, hi = bisect.bisect_left(vals, p.value), len(vals)
        elif p.op == "lt":
            lo, hi = 0, bisect.bisect_left(vals, p.value)
        else:
            lo, hi = 0, bisect.bisect_right(vals, p.value)
        return frozenset(ords[lo:hi])

    @staticmethod
    def _exact_eq(entry: Mapping[str, Any], value: Any) -> frozenset[int]:
        key = exact_key(value)
        vals: Sequence[Any] = entry["values"]
        i = bisect.bisect_left(vals, key)
        if i < len(vals) and vals[i] == key:
            return frozenset(entry["docs"][i])
        return frozenset()

    @staticmethod
    def _exact_prefix(entry: Mapping[str, Any], prefix: str) -> frozenset[int]:
        vals: Sequence[Any] = entry["values"]
        out: set[int] = set()
        i = bisect.bisect_left(vals, prefix)
        while i < len(vals) and isinstance(vals[i], str) and vals[i].startswith(prefix):
            out.update(entry["docs"][i])
            i += 1
        return frozenset(out)

    def _text(self, p: Text) -> frozenset[int] | None:
        out: set[int] = set()
        for t in p.targets:
            got = self._text_target(p, t)
            if got is None:
                return None
            out |= got
        return frozenset(out)

    def _text_target(self, p: Text, t: TextTarget) -> frozenset[int] | None:
        if t.field.kind == "keyword":
            entry = self._field("exact", t.field)
            if entry is None:
                return None
            want = t.tokens[0]
            return self._exact_prefix(entry, want) if p.prefix else self._exact_eq(entry, want)
        if t.field.kind != "text":
            return None
        entry = self._field("fts", t.field)
        if entry is None:
            return None
        phrase = p.phrase and len(t.tokens) > 1
        if phrase and not entry["spec"].get("positions"):
            return None
        per_token = self._units(entry, p, t)
        common = set(per_token[0])
        for units in per_token[1:]:
            common &= units.keys()
        if not phrase:
            return frozenset(o for o, _ in common)
        hits: set[int] = set()
        for unit in common:
            if any(
                all(s + i in per_token[i][unit] for i in range(1, len(per_token)))
                for s in per_token[0][unit]
            ):
                hits.add(unit[0])
        return frozenset(hits)

    @staticmethod
    def _terms(entry: Mapping[str, Any], q: str, prefix: bool) -> Iterable[list[list[int]]]:
        terms: Sequence[str] = entry["terms"]
        i = bisect.bisect_left(terms, q)
        while i < len(terms) and (terms[i].startswith(q) if prefix else terms[i] == q):
            yield entry["postings"][i]
            i += 1
            if not prefix:
                break
