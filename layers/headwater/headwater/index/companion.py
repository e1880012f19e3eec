"""One index companion object per sealed segment: a pure builder and a reader.

Format: ``docs/index-format.md``. Families: ``index.plan``.

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
  ``build_companion(plan, docs_from_records(records, registry))`` on one segment's records
  and PUT the bytes; the function is pure, so both write byte-identical objects.
* ``_search`` / ``filter=`` reads: ``Companion.from_bytes(obj).candidates(query)`` gives the
  doc ordinals that may match (``None``: scan the whole segment); ``seq_of(ordinal)`` maps
  them to seqs to read. ``narrow(query).exact`` says the set is exactly the matches (the
  evaluator still runs on the fetched docs for scores and sort keys).
* ``_routing_keys`` / ``key=`` reads: ``routing_keys()`` and ``docs_with_key(k)``.
* ``_aggregate`` without ``q``: ``rollup_windows(...)`` returns the segment's contribution to
  each window as shared groups (cached per request shape); the caller keeps those inside
  ``[from, to)``, adds the partial edge windows by scanning and merges segments. With a
  ``q`` the rollup cannot be used (scan).
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
import operator
import struct
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import orjson

from headwater import jsoncodec
from headwater.durable.fields import FieldSpec, doc_value
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
    analyze,
)
from headwater.durable.jsonvalue import MISSING, parse_date_ms, parse_json_pointer
from headwater.durable.offsets import Offset, decode_offset
from headwater.engine import StoredRecord
from headwater.index.plan import FORMAT_VERSION, IndexPlan, canonical_json, field_fingerprint

if TYPE_CHECKING:
    from headwater.durable.aggregate import Group, Rollup, _Summary

# Import discipline: this module (and index.plan) import only pure modules (durable.filter,
# durable.offsets, engine.records, jsoncodec -> orjson), so the Glue job can import it with
# orjson alone. Rollup semantics are durable/aggregate.py's own (Rollup.contribution,
# _Summary); that module pulls in durable.schema (jsonschema), so it is imported lazily,
# only when a plan has rollups or rollup windows are read.

MAGIC: Final = b"HWCIX\x00"
_HEADER: Final = struct.Struct("<6sH32sQQIqqHH")  # 80 bytes
_ENTRY: Final = struct.Struct("<8sQQI")  # 28 bytes per section
_CRC: Final = struct.Struct("<I")
SECTION_ORDER: Final = ("seq", "rk", "exact", "col", "fts", "agg")
_SECTION_ORDER = SECTION_ORDER
_OPS: Final[dict[str, Callable[[Any, Any], bool]]] = {
    "eq": operator.eq,
    "gt": operator.gt,
    "gte": operator.ge,
    "lt": operator.lt,
    "lte": operator.le,
}


class CompanionError(ValueError):
    """Bytes that are not a valid companion object (truncated, corrupt, wrong format)."""


class SectionNotLoaded(LookupError):
    """A companion read from a prefix of its object (`Companion.from_prefix`) needs a section
    it does not hold yet: bytes [offset, offset + length) of the object; `Companion.load` it
    and call again."""

    def __init__(self, name: str, offset: int, length: int) -> None:
        super().__init__(name)
        self.name, self.offset, self.length = name, offset, length


class _Undecodable:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNDECODABLE"

    def __reduce__(self) -> str:
        return "UNDECODABLE"  # unpickles (e.g. on a Spark executor) as the same singleton


UNDECODABLE: Final = _Undecodable()
"""A record whose data is not JSON: it has no field values (like ``scan.scan``'s None)."""


class SegmentDoc(NamedTuple):
    """One record of the segment as the builder sees it."""

    seq: int
    ts_ms: int  # the record's append time
    routing_key: str | None
    value: object  # the decoded JSON value, or UNDECODABLE
    version: int | None  # schema version of the stored value (None/0: newest bindings)


def _boundary_seq(offset: str) -> int:
    off = decode_offset(offset)
    return off.seq if isinstance(off, Offset) else 0


class _Versions:
    """``version_at`` for many seqs: the boundaries' seqs decoded once."""

    def __init__(self, registry: Mapping[str, Any]) -> None:
        boundaries: list[Mapping[str, Any]] = list(registry.get("boundaries", []))
        self.seqs = [_boundary_seq(b["offset"]) for b in boundaries]
        self.versions = [int(b["version"]) for b in boundaries]

    def at(self, seq: int) -> int:
        index = bisect.bisect_left(self.seqs, seq)
        return 0 if index == 0 else self.versions[index - 1]


def version_at(registry: Mapping[str, Any], seq: int) -> int:
    """``schema.version_at(registry, seq, key=<offset -> seq>)`` without importing
    durable.schema: the version of the last boundary whose offset's seq is < `seq` (0 when
    none); with equal offsets the later boundary wins."""
    return _Versions(registry).at(seq)


def docs_from_records(
    records: Iterable[StoredRecord], registry: Mapping[str, Any]
) -> list[SegmentDoc]:
    """Builder input from stored records, decoded exactly as ``scan.scan`` decodes them
    (value, schema version by boundary) and keyed like ``_routing_keys`` (the record tag)."""
    out: list[SegmentDoc] = []
    versions = _Versions(registry) if registry else None
    for rec in records:
        try:
            value: object = jsoncodec.loads(rec.data_raw)
        except ValueError:
            value = UNDECODABLE
        version = versions.at(rec.seq) if versions is not None else 0
        key = None
        tag_json = rec.tag_json
        if tag_json is not None:
            if tag_json[:1] == b'"' and b"\\" not in tag_json:  # a string without escapes
                key = tag_json[1:-1].decode()
            else:
                tag = json.loads(tag_json)
                key = tag if isinstance(tag, str) else None
        out.append(SegmentDoc(rec.seq, rec.ts, key, value, version or None))
    return out


# --------------------------------------------------------------------------- building


def _exact_key(v: Any) -> Any:
    """Equal numbers get one key (3 and 3.0); Python compares int and float exactly, so a
    float is replaced by its int only when it is integer-valued."""
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def _rollup_evaluator(registry: Mapping[str, Any], name: str, interval: str) -> Rollup:
    """``aggregate.Rollup`` for every timestamp (its contribution() is the semantics)."""
    from headwater.durable.aggregate import Rollup, interval_ms

    step = interval_ms(interval)
    r = Rollup({"rollup": name, "from": 0, "to": step, "interval": interval}, registry)
    r.from_ms, r.to_ms = -(2**63), 2**63
    return r


def _summary_state(s: _Summary) -> list[Any]:
    return [s.count, s.sum, s.min, s.max, s.hist]


def build_companion(plan: IndexPlan, docs: Iterable[SegmentDoc]) -> bytes:
    """The companion object of one segment. Pure and deterministic: the same plan and docs
    (in any order; they are sorted by seq) give byte-identical output."""
    items = sorted(docs, key=lambda d: d.seq)
    if not items:
        raise ValueError("a segment companion needs at least one record")
    for a, b in itertools.pairwise(items):
        if a.seq == b.seq:
            raise ValueError(f"seq {a.seq} appears twice")
    values = [None if d.value is UNDECODABLE else d.value for d in items]
    versions = [d.version or None for d in items]
    per_doc = _PerDoc(values, versions)
    sections: dict[str, Any] = {"seq": _seq_runs([d.seq for d in items])}
    if plan.routing_keys:
        keys: dict[str, list[int]] = {}
        for i, d in enumerate(items):
            if d.routing_key is not None:
                keys.setdefault(d.routing_key, []).append(i)
        order = sorted(keys)
        sections["rk"] = {"keys": order, "docs": [keys[k] for k in order]}
    if plan.exact:
        sections["exact"] = {"fields": {s.name: _build_exact(s, per_doc.of(s)) for s in plan.exact}}
    if plan.col:
        sections["col"] = {"fields": {s.name: _build_col(s, per_doc.of(s)) for s in plan.col}}
    if plan.fts:
        sections["fts"] = {"fields": {s.name: _build_fts(s, per_doc.of(s)) for s in plan.fts}}
    stdlib: set[str] = set()
    if plan.rollups:
        overflow: list[bool] = []
        sections["agg"] = {
            "rollups": {
                name: _build_rollup(plan, name, values, versions, per_doc, overflow)
                for name in plan.rollups
            }
        }
        if overflow:
            stdlib.add("agg")  # a sum that overflowed: written as Infinity, as documented
    ts = [d.ts_ms for d in items]
    return _encode(
        plan.generation_bytes,
        items[0].seq,
        items[-1].seq,
        len(items),
        min(ts),
        max(ts),
        sections,
        stdlib,
    )


def _seq_runs(seqs: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for s in seqs:
        if runs and runs[-1][0] + runs[-1][1] == s:
            runs[-1][1] += 1
        else:
            runs.append([s, 1])
    return runs


def _spec_key(spec: FieldSpec) -> tuple[Any, ...]:
    """What a field's indexed values depend on (not its name alone: a stale plan may bind
    the same name elsewhere)."""
    return (spec.name, spec.kind, spec.normalizer, spec.bindings)


class _PerDoc:
    """Each field's values per document, read once however many families index the field
    (a field's values depend on its kind, normalizer and bindings, not on its name)."""

    def __init__(self, values: list[object], versions: list[int | None]) -> None:
        self.values, self.versions = values, versions
        self._memo: dict[Any, list[Sequence[Any]]] = {}
        self._versions = set(versions)
        self._raws: dict[str, list[object]] = {}  # top-level key -> each doc's value there

    def of(self, spec: FieldSpec) -> list[Sequence[Any]]:
        key = _spec_key(spec)[1:]
        got = self._memo.get(key)
        if got is None:
            got = self._memo[key] = self._read(spec)
        return got

    def _read(self, spec: FieldSpec) -> list[Sequence[Any]]:
        """`spec.values(doc, version)` of every doc (a list, or () for none), a column at a
        time in the common case: one schema version and a pointer of one token."""
        if len(self._versions) == 1:
            (v,) = self._versions
            top = _top_token(spec, v)
            if top is not None:
                return self._column(spec, top, v)
        return self._by_doc(spec)

    def _column(self, spec: FieldSpec, top: str, v: int | None) -> list[Sequence[Any]]:
        raws = self._raws.get(top)
        if raws is None:
            raws = self._raws[top] = [
                d.get(top, MISSING) if type(d) is dict else _NOT_AN_OBJECT for d in self.values
            ]
        kind = spec.kind
        out: list[Sequence[Any] | None]
        # the common types as comprehensions; None marks a doc left to the general path
        if kind in ("keyword", "text"):
            if spec.normalizer == "lowercase_v1":
                out = [[x.lower()] if type(x) is str else None for x in raws]
            else:
                out = [[x] if type(x) is str else None for x in raws]
        elif kind == "integer":
            out = [[x] if type(x) is int else None for x in raws]
        elif kind == "float":
            out = [
                [x] if type(x) is int or (type(x) is float and x - x == 0.0) else None for x in raws
            ]
        elif kind == "date":
            days = _DateCache()
            out = [
                [x]
                if type(x) is int
                else [ms]
                if type(x) is str and (ms := days.ms(x)) is not None
                else None
                for x in raws
            ]
        else:
            out = [None] * len(raws)
        slow = spec.values
        for i, got in enumerate(out):
            if got is None:
                x = raws[i]
                if x is MISSING:
                    out[i] = ()
                elif x is _NOT_AN_OBJECT or type(x) is list or type(x) is tuple:
                    out[i] = slow(self.values[i], v)
                else:
                    one = doc_value(spec, x)
                    out[i] = () if one is None else [one]
        return out  # type: ignore[return-value]

    def _by_doc(self, spec: FieldSpec) -> list[Sequence[Any]]:
        """Docs of several schema versions: each doc's pointer by its version."""
        tops: dict[int | None, str | None] = {}
        out: list[Sequence[Any]] = []
        slow = spec.values
        for doc, v in zip(self.values, self.versions, strict=True):
            if v not in tops:
                tops[v] = _top_token(spec, v)
            top = tops[v]
            if top is None or type(doc) is not dict:
                out.append(slow(doc, v))
                continue
            raw = doc.get(top, MISSING)
            if raw is MISSING:
                out.append(())
            elif type(raw) is list or type(raw) is tuple:
                out.append(slow(doc, v))
            else:
                one = doc_value(spec, raw)
                out.append(() if one is None else [one])
        return out


_NOT_AN_OBJECT: Final = object()


def _top_token(spec: FieldSpec, version: int | None) -> str | None:
    """The one token of the field's pointer for `version`, when it has exactly one."""
    pointer = spec.pointer_for(version)
    tokens = parse_json_pointer(pointer) if pointer is not None else None
    return tokens[0] if tokens is not None and len(tokens) == 1 else None


class _DateCache:
    """`_doc_value` of a date string, with the common `YYYY-MM-DDTHH:MM:SS.mmmZ` shape parsed
    from the minute it starts (validated once per minute by the general parser); None for
    anything else, which the caller leaves to the general parser."""

    __slots__ = ("minutes",)

    def __init__(self) -> None:
        self.minutes: dict[str, int | None] = {}

    def ms(self, text: str) -> int | None:
        if len(text) == 24 and text[19] == "." and text[23] == "Z" and text[16] == ":":
            digits = text[17:19] + text[20:23]
            if digits.isascii() and digits.isdigit() and text[17] < "6":
                minute = text[:17]
                if minute in self.minutes:
                    base = self.minutes[minute]
                else:
                    base = self.minutes[minute] = parse_date_ms(minute + "00Z")
                if base is not None:
                    return base + int(digits[:2]) * 1000 + int(digits[2:])
        return None  # another shape: the general parser's


def _build_exact(spec: FieldSpec, per_doc: list[Sequence[Any]]) -> dict[str, Any]:
    postings: dict[Any, list[int]] = {}
    get = postings.get
    for i, got in enumerate(per_doc):
        if not got:
            continue
        if len(got) == 1:  # the common case: no dedup or sort
            x = got[0]
            if type(x) is float and x.is_integer():
                x = int(x)  # _exact_key, inline
            docs = get(x)
            if docs is None:
                postings[x] = [i]
            else:
                docs.append(i)
            continue
        for key in sorted({_exact_key(x) for x in got}):
            postings.setdefault(key, []).append(i)
    order = sorted(postings)
    return {
        "spec": field_fingerprint(spec, "exact"),
        "values": order,
        "docs": [postings[k] for k in order],
    }


def _build_col(spec: FieldSpec, per_doc: list[Sequence[Any]]) -> dict[str, Any]:
    column: list[Any] = []
    every: list[Any] = []
    for got in per_doc:
        every.extend(got)
        column.append(None if not got else got[0] if len(got) == 1 else got)
    return {
        "spec": field_fingerprint(spec, "col"),
        "values": column,
        "min": min(every) if every else None,
        "max": max(every) if every else None,
    }


def _build_fts(spec: FieldSpec, per_doc: list[Sequence[Any]]) -> dict[str, Any]:
    postings: dict[str, list[list[int]]] = {}
    get = postings.get
    present: list[int] = []
    positions = spec.positions
    for i, values in enumerate(per_doc):
        if not values:
            continue
        got = [x for x in values if isinstance(x, str)]
        if got:
            present.append(i)
        for vi, text in enumerate(got):
            # one entry per (doc, value) a term occurs in: [doc, value, *positions]; the
            # entries of a term are in (doc, value) order whatever order its tokens come in
            at: dict[str, list[int]] = {}
            for pos, tok in enumerate(analyze(text)):
                entry = at.get(tok)
                if entry is None:
                    at[tok] = [i, vi, pos] if positions else [i, vi]
                elif positions:
                    entry.append(pos)
            for tok, entry in at.items():
                docs = get(tok)
                if docs is None:
                    postings[tok] = [entry]
                else:
                    docs.append(entry)
    order = sorted(postings)
    return {
        "spec": field_fingerprint(spec, "fts"),
        "docs": present,
        "terms": order,
        "postings": [postings[t] for t in order],
    }


def _build_rollup(
    plan: IndexPlan,
    name: str,
    values: list[object],
    versions: list[int | None],
    per_doc: _PerDoc,
    overflow: list[bool],
) -> dict[str, Any]:
    """One rollup's windows; appends to `overflow` when a sum is not finite (the values are,
    but a sum of huge ones can overflow)."""
    cfg = plan.registry["search"]["rollups"][name]
    intervals: dict[str, Any] = {}
    dims: list[str] = []
    kinds: dict[str, str] = {}
    for interval in sorted(cfg["intervals"]):
        r = _rollup_evaluator(plan.registry, name, interval)
        dims = r.dims
        kinds = {m: spec["kind"] for m, spec in r.measures.items()}
        windows: dict[int, dict[bytes, tuple[list[Any], dict[str, Any]]]] = {}
        # each field the rollup reads, per doc, as the other families read it (once)
        specs = [r.ts, *(r.fields[d] for d in dims)]
        specs += [r.fields[m["field"]] for m in r.measures.values() if m["kind"] == "summary"]
        columns = {id(spec): per_doc.of(spec) for spec in specs}
        canonical: dict[Any, bytes] = {}
        order = sorted(kinds)
        at = [0]  # the doc `read` answers for

        def read(
            spec: FieldSpec, at: list[int] = at, cols: dict[int, list[Sequence[Any]]] = columns
        ) -> Sequence[Any]:
            return cols[id(spec)][at[0]]

        if _columnar(r):
            _rollup_columns(r, dims, columns, canonical, windows)
        else:
            _rollup_by_doc(r, dims, values, versions, read, at, canonical, windows, kinds, order)
        intervals[interval] = {
            "step": r.step,
            "windows": [
                [
                    start,
                    [
                        [key_list, {m: _state_out(s, overflow) for m, s in states.items()}]
                        for _, (key_list, states) in sorted(windows[start].items())
                    ],
                ]
                for start in sorted(windows)
            ],
        }
    return {"dimensions": dims, "measures": kinds, "intervals": intervals}


_Windows = dict[int, dict[bytes, tuple[list[Any], dict[str, Any]]]]


def _group_key(canonical: dict[Any, bytes], key_list: list[Any]) -> bytes:
    """A window group's key: the canonical JSON of its dimension values (memoised)."""
    try:
        ck = canonical.get(memo := tuple(key_list))
        if ck is None:
            ck = canonical[memo] = canonical_json(key_list)
    except TypeError:  # an unhashable dimension value (an array)
        ck = canonical_json(key_list)
    return ck


def _columnar(r: Rollup) -> bool:
    """Whether `_rollup_columns` computes exactly what `r.contribution` would: no filters
    (they read whole documents) and measures that read one field each."""
    return (
        r.include is None
        and not r.measure_include
        and all(spec["kind"] in ("count", "summary") for spec in r.measures.values())
    )


def _rollup_columns(
    r: Rollup,
    dims: list[str],
    columns: dict[int, list[Sequence[Any]]],
    canonical: dict[Any, bytes],
    windows: _Windows,
) -> None:
    """`Rollup.contribution` over the field columns, for the rollups `_columnar` accepts:
    the same documents contribute the same values, added in the same (seq) order, so the
    windows are identical (sums included); measured at ~4x the per-document path."""
    from headwater.durable.aggregate import _histogram_bucket, _number, _Summary

    ts_col = columns[id(r.ts)]
    dim_cols = [columns[id(r.fields[d])] for d in dims]
    # per measure in name order: (name, its field's column for a summary, histogram kept)
    plan: list[tuple[str, list[Sequence[Any]] | None, bool]] = []
    for m in sorted(r.measures):
        spec = r.measures[m]
        if spec["kind"] == "count":
            plan.append((m, None, False))
        else:
            hist = bool(spec.get("histogram", "log2_v1"))
            plan.append((m, columns[id(r.fields[spec["field"]])], hist))
    lo_ms, hi_ms, step = r.from_ms, r.to_ms, r.step
    values: list[float] = [0.0] * len(plan)
    for i, ts in enumerate(ts_col):
        if len(ts) != 1:
            continue
        t = ts[0]
        if not isinstance(t, int) or not lo_ms <= t < hi_ms:
            continue
        key_list: list[Any] = []
        for col in dim_cols:
            got = col[i]
            if len(got) > 1:
                break
            key_list.append(got[0] if got else None)
        else:
            for k, (_, field_col, _) in enumerate(plan):
                if field_col is None:
                    continue
                got = field_col[i]
                v = _number(got[0]) if len(got) == 1 else None
                if v is None:
                    break  # contribution(): a doc without every summary's value adds nothing
                values[k] = v
            else:
                ck = _group_key(canonical, key_list)
                _, states = windows.setdefault(t - t % step, {}).setdefault(ck, (key_list, {}))
                for k, (m, field_col, hist) in enumerate(plan):
                    if field_col is None:
                        states[m] = states.get(m, 0) + 1
                        continue
                    # _Summary.add(1.0, v, v, v, {bucket: 1}), inline: the same operations
                    v = values[k]
                    s = states.get(m)
                    if s is None:
                        s = states[m] = _Summary()
                    s.count += 1.0
                    s.sum += v
                    if s.min is None or v < s.min:
                        s.min = v
                    if s.max is None or v > s.max:
                        s.max = v
                    if hist:
                        bucket = _histogram_bucket(v)
                        if s.hist is None:
                            s.hist = {bucket: 1}
                        else:
                            s.hist[bucket] = s.hist.get(bucket, 0) + 1


def _rollup_by_doc(
    r: Rollup,
    dims: list[str],
    values: list[object],
    versions: list[int | None],
    read: Callable[[FieldSpec], Sequence[Any]],
    at: list[int],
    canonical: dict[Any, bytes],
    windows: _Windows,
    kinds: dict[str, str],
    order: list[str],
) -> None:
    """`Rollup.contribution` document by document (filters, summary_parts)."""
    from headwater.durable.aggregate import _Summary

    contribution = r.contribution
    for i, (doc, v) in enumerate(zip(values, versions, strict=True)):
        at[0] = i
        got = contribution(doc, v, read)
        if got is None:
            continue
        start, key, measures = got
        key_list = [key[d] for d in dims]
        ck = _group_key(canonical, key_list)
        _, states = windows.setdefault(start, {}).setdefault(ck, (key_list, {}))
        for m in order:  # contribution() answers every measure
            c, total, lo, hi, hist = measures[m]
            if kinds[m] == "count":
                states[m] = states.get(m, 0) + int(c)
            else:
                states.setdefault(m, _Summary()).add(c, total, lo, hi, hist)


def _state_out(s: int | _Summary, overflow: list[bool]) -> Any:
    if isinstance(s, int):
        return s
    if not math.isfinite(s.sum):
        overflow.append(True)
    return _summary_state(s)


def _section_json(value: object) -> bytes:
    """A section's canonical JSON, by orjson (sorted keys, no whitespace, UTF-8; the stdlib's
    encoder took a third of a build's CPU). What orjson cannot write exactly (an integer past
    64 bits, a lone surrogate) falls back to the stdlib's ASCII form: the choice depends only
    on the value, so the bytes stay a pure function of the inputs. orjson would write a
    non-finite float as null: the only ones a build makes are overflowed rollup sums, and the
    caller sends that section to the stdlib (`Infinity`)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:
        return canonical_json(value)


def _encode(
    generation: bytes,
    first: int,
    last: int,
    count: int,
    min_ts: int,
    max_ts: int,
    sections: Mapping[str, Any],
    stdlib: Set[str] = frozenset(),
) -> bytes:
    names = [n for n in _SECTION_ORDER if n in sections]
    bodies = [
        canonical_json(sections[n]) if n in stdlib else _section_json(sections[n]) for n in names
    ]
    table_end = _HEADER.size + _ENTRY.size * len(names) + _CRC.size
    head = _HEADER.pack(
        MAGIC, FORMAT_VERSION, generation, first, last, count, min_ts, max_ts, len(names), 0
    )
    entries = b""
    offset = table_end
    for name, body in zip(names, bodies, strict=True):
        entries += _ENTRY.pack(name.encode("ascii"), offset, len(body), zlib.crc32(body))
        offset += len(body)
    prefix = head + entries
    return prefix + _CRC.pack(zlib.crc32(prefix)) + b"".join(bodies)


# --------------------------------------------------------------------------- reading


@dataclass(frozen=True, slots=True)
class Narrowing:
    """Doc ordinals that may match; ``exact``: they are exactly the matching docs."""

    ordinals: frozenset[int]
    exact: bool


def full_span(from_ms: int, to_ms: int, step: int) -> tuple[int, int] | None:
    """[lo, hi): the union of the `step` windows lying entirely inside [from_ms, to_ms), or
    None when there is none. Contributions with a timestamp outside it are the edges."""
    lo = -(-from_ms // step) * step
    hi = to_ms - to_ms % step
    return (lo, hi) if lo < hi else None


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
    ) -> None:
        self.generation = generation
        self.first_seq = first_seq
        self.last_seq = last_seq
        self.doc_count = doc_count
        self.min_ts = min_ts
        self.max_ts = max_ts
        self._raw = dict(raw_sections)
        self._parsed: dict[str, Any] = {}
        self._seqs: list[int] | None = None
        self._sorted_cols: dict[Any, tuple[list[Any], list[int]]] = {}
        self._first_values: dict[Any, list[Any]] = {}
        self._rollups: dict[tuple[Any, ...], list[tuple[int, dict[str, Group]]]] = {}
        # sections in the object but not read yet: name -> (offset, length, crc32)
        self._unloaded: dict[str, tuple[int, int, int]] = {}

    # ------------------------------------------------------------------ decoding
    @classmethod
    def from_bytes(cls, data: bytes) -> Companion:
        """Parse and verify (magic, version, checksums, bounds); raises CompanionError."""
        out = cls.from_prefix(data)
        if out._unloaded:
            raise CompanionError("companion section lies outside the object (truncated)")
        return out

    @classmethod
    def from_prefix(cls, data: bytes, size: int | None = None) -> Companion:
        """Parse the first bytes of a companion object (of `size` bytes, when known): the
        header and section table, verified, and every section lying wholly inside `data`;
        the others are read when first needed (SectionNotLoaded, then `load`). A request
        reads only the sections its query uses. Raises CompanionError."""
        data = bytes(data)
        if len(data) < _HEADER.size + _CRC.size:
            raise CompanionError("companion object is truncated (shorter than its header)")
        magic, version, gen, first, last, count, min_ts, max_ts, n, _ = _HEADER.unpack_from(data)
        if magic != MAGIC:
            raise CompanionError("not a companion object (bad magic)")
        if version != FORMAT_VERSION:
            raise CompanionError(f"unsupported companion format version {version}")
        table_end = _HEADER.size + _ENTRY.size * n
        if len(data) < table_end + _CRC.size:
            raise CompanionError("companion object is truncated (section table)")
        (crc,) = _CRC.unpack_from(data, table_end)
        if crc != zlib.crc32(data[:table_end]):
            raise CompanionError("companion header checksum mismatch (corrupt object)")
        raw: dict[str, bytes] = {}
        unloaded: dict[str, tuple[int, int, int]] = {}
        for i in range(n):
            name_b, off, length, body_crc = _ENTRY.unpack_from(data, _HEADER.size + i * _ENTRY.size)
            name = name_b.rstrip(b"\x00").decode("ascii", "replace")
            end = off + length
            if off < table_end + _CRC.size or (size is not None and end > size):
                raise CompanionError(f"companion section {name!r} lies outside the object")
            if end > len(data):
                unloaded[name] = (off, length, body_crc)
                continue
            body = data[off:end]
            if zlib.crc32(body) != body_crc:
                raise CompanionError(f"companion section {name!r} checksum mismatch (corrupt)")
            raw[name] = body
        if "seq" not in raw and "seq" not in unloaded:
            raise CompanionError("companion object has no seq section")
        out = cls(gen.hex(), first, last, count, min_ts, max_ts, raw)
        out._unloaded = unloaded
        if "seq" in raw:
            out._check_seqs()
        return out

    def load(self, name: str, body: bytes) -> None:
        """Add a section read after `from_prefix` (the bytes SectionNotLoaded named);
        verified against the section table. Loading one already held is a no-op."""
        where = self._unloaded.get(name)
        if where is None:
            return
        _off, length, crc = where
        if len(body) != length or zlib.crc32(body) != crc:
            raise CompanionError(f"companion section {name!r} checksum mismatch (corrupt)")
        self._raw[name] = bytes(body)
        del self._unloaded[name]
        if name == "seq":
            self._check_seqs()

    def missing(self, name: str) -> SectionNotLoaded | None:
        where = self._unloaded.get(name)
        return SectionNotLoaded(name, where[0], where[1]) if where is not None else None

    def _check_seqs(self) -> None:
        seqs = self.seqs()
        n, first, last = self.doc_count, self.first_seq, self.last_seq
        if len(seqs) != n or (seqs and (seqs[0] != first or seqs[-1] != last)):
            raise CompanionError("companion seq section disagrees with its header")

    def _section(self, name: str) -> Any:
        if name not in self._parsed:
            raw = self._raw.get(name)
            if raw is None:
                missing = self.missing(name)
                if missing is not None:
                    raise missing
                self._parsed[name] = None
            else:
                try:
                    value = json.loads(raw)
                except ValueError as exc:
                    raise CompanionError(
                        f"companion section {name!r} is not valid: {exc}"
                    ) from None
                if not isinstance(value, dict | list):
                    raise CompanionError(f"companion section {name!r} has the wrong shape")
                self._parsed[name] = value
        return self._parsed[name]

    @property
    def families(self) -> tuple[str, ...]:
        return tuple(
            n for n in _SECTION_ORDER if (n in self._raw or n in self._unloaded) and n != "seq"
        )

    def seqs(self) -> list[int]:
        """The seq of every doc ordinal, ascending."""
        if self._seqs is None:
            runs = self._section("seq")
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
        rk = self._section("rk")
        return list(rk["keys"]) if rk else []

    def docs_with_key(self, key: str) -> list[int]:
        """Ordinals of the docs whose routing key is `key` (ascending)."""
        rk = self._section("rk")
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
        return self._narrow(query)

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
        got = self._narrow(p)
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
        memo = _spec_key(spec)
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

    def _narrow(self, p: Predicate) -> Narrowing | None:
        if isinstance(p, And):
            parts = [self._narrow(c) for c in p.children]
            known = [x for x in parts if x is not None]
            if not known:
                return None
            ords = frozenset.intersection(*(x.ordinals for x in known))
            return Narrowing(ords, len(known) == len(parts) and all(x.exact for x in known))
        if isinstance(p, Or):
            parts = [self._narrow(c) for c in p.children]
            if any(x is None for x in parts):
                return None
            done = [x for x in parts if x is not None]
            return Narrowing(
                frozenset().union(*(x.ordinals for x in done)), all(x.exact for x in done)
            )
        if isinstance(p, Not):
            inner = self._narrow(p.child)
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
        name = _spec_key(p.field)
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
        key = _exact_key(value)
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
        from headwater.durable.aggregate import Group, _Summary

        agg = self._section("agg")
        if not agg or rollup not in agg["rollups"]:
            raise KeyError(f"companion has no rollup {rollup!r}")
        sec = agg["rollups"][rollup]
        if interval not in sec["intervals"]:
            raise KeyError(f"companion has no {interval} windows for rollup {rollup!r}")
        dims: list[str] = sec["dimensions"]
        for g in group_by:
            if g not in dims:
                raise KeyError(f"{g!r} is not a dimension of rollup {rollup!r}")
        kinds: Mapping[str, str] = sec["measures"]
        wanted = sorted(set(kinds if measures is None else measures))
        for m in wanted:
            if m not in kinds:
                raise KeyError(f"unknown measure {m!r} on rollup {rollup!r}")
        shape = (rollup, interval, tuple(group_by), tuple(wanted))
        cached = self._rollups.get(shape)
        if cached is not None:
            return cached
        iv = sec["intervals"][interval]
        out: list[tuple[int, dict[str, Group]]] = []
        keys: dict[Any, tuple[dict[str, Any], str]] = {}  # a stored group -> its request group
        for start, groups in iv["windows"]:
            buckets: dict[str, Group] = {}
            for key_list, states in groups:
                memo: Any = tuple(key_list)
                try:
                    known = keys.get(memo)
                except TypeError:  # an unhashable dimension value (an array)
                    memo = json.dumps(key_list)
                    known = keys.get(memo)
                if known is None:
                    dims_map = dict(zip(dims, key_list, strict=True))
                    key = {g: dims_map.get(g) for g in group_by}
                    # as run_aggregate keys its groups
                    known = keys[memo] = (key, json.dumps(key, sort_keys=True))
                key, gk = known
                grp = buckets.get(gk)
                if grp is None:
                    grp = buckets[gk] = Group(key, {}, shared=True)
                acc = grp.states
                for m in wanted:
                    state = states[m]
                    if kinds[m] == "count":
                        acc[m] = acc.get(m, 0) + int(state)
                    else:
                        count, total, lo, hi, hist = state
                        summary = acc.get(m)
                        if summary is None:
                            summary = acc[m] = _Summary()
                        summary.add(count, total, lo, hi, hist)
            out.append((start, buckets))
        self._rollups[shape] = out
        return out
